"""The zygote's warm imports: a rank forked from it imports nothing more while it starts
(each import there is paid per rank, on every launch)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # a fresh interpreter that imports torch

SCRIPT = """
import json, sys
from gpujobs.backends.local import zygote
zygote._warm_imports(zygote.{modules})
before = set(sys.modules)
from gpujobs.rank import runner
runner.enable_faulthandler(0)  # what every rank does before the user's function
runner._created()
runner.set_title("gpujobs test rank 0", "r0 test")
print(json.dumps(sorted(set(sys.modules) - before)))
"""


@pytest.mark.parametrize("modules", ["WARM_MODULES", "LEAN_MODULES"])
def test_a_rank_start_imports_nothing_the_zygote_did_not_warm(tmp_path, modules):
    """Both zygotes: torch's and the lean one (before: a lean rank imported ctypes itself)."""
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(modules=modules)],
                         capture_output=True, text=True,
                         timeout=300, cwd=tmp_path, env=_env())
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def _env():
    import os
    from pathlib import Path
    root = str(Path(__file__).resolve().parents[2])
    return {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}


FREEZE_SCRIPT = """
import gc, json
from gpujobs.backends.local import zygote
zygote._warm_imports()
print(json.dumps(gc.get_freeze_count()))
"""


def test_the_warm_objects_are_frozen_out_of_the_ranks_collections(tmp_path):
    """After its imports the zygote freezes its objects (gc.freeze): a rank's collections do
    not walk, and so copy, the pages of torch's objects it shares with the zygote (a full
    collection in a forked rank cost ~0.1 s of CPU each, measured on the build machine)."""
    out = subprocess.run([sys.executable, "-c", FREEZE_SCRIPT], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path, env=_env())
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) > 100_000  # torch's objects, at least
