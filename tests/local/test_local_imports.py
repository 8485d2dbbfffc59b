"""The local backend's modules meet through public names only (imported, or read on an object),
import each other at module level, and the agent is composed, not mixed: it owns a recovery,
a gang watcher and a server, each given the few things it uses (issue 32). Checked on the
source with ``ast`` (tests/importrules.py)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.importrules import ROOT, foreign_private_attributes, mixins, violations

PACKAGE = ROOT / "gpujobs" / "backends" / "local"

# Function-level imports of the package's own modules kept on purpose; an entry here that is
# fixed can simply go.
KNOWN_IMPORTS = {
    # the package's names are imported when first read: the daemon and the zygotes (python -m
    # of this package's modules) import this __init__ first, and need none of the client's
    "gpujobs.backends.local: function-level import of gpujobs.backends.local in __getattr__",
    # the daemon starts the zygote (torch imports, seconds) before it imports the agent
    "gpujobs.backends.local.daemon: function-level import of gpujobs.backends.local.agent in main",
    # client-side start-up time: a launch or a status query imports none of these
    "gpujobs.backends.local.backend: function-level import of gpujobs.backends.local.launchers in submit",
    "gpujobs.backends.local.backend: function-level import of gpujobs.backends.local.stacks in stacks",
    "gpujobs.backends.local.client: function-level import of gpujobs.backends.local.store in _kill_recorded_ranks",
    "gpujobs.backends.local.protocol: function-level import of gpujobs.backends.local.private in socket_path",
}
# The launchers' gangs: a launcher is a Gang with its own command line (launchers.make_gang).
KNOWN_CLASSES = {"launch_mpi.py: class MpiGang extends Gang", "launch_ray.py: class RayGang extends Gang"}


def test_the_agent_is_composed_not_mixed():
    assert sorted(mixins(PACKAGE) - KNOWN_CLASSES) == []


def test_no_private_names_cross_the_local_modules():
    assert sorted(violations(PACKAGE, inner_only=True) - KNOWN_IMPORTS) == []
    assert sorted(foreign_private_attributes(PACKAGE)) == []


def test_the_attribute_check_sees_another_modules_private_member(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("class A:\n    def _view(self):\n        return self._x\n")
    (pkg / "b.py").write_text("import os\n\n\ndef f(agent):\n    os._exit(agent._view())\n")
    assert foreign_private_attributes(pkg) == {"b.py: reads agent._view at line 5"}
    assert violations(pkg, tmp_path, inner_only=True) == set()
    (pkg / "c.py").write_text("def g():\n    from . import a\n    import json\n    return a, json\n")
    assert violations(pkg, tmp_path, inner_only=True) == {"pkg.c: function-level import of pkg in g"}


@pytest.mark.parametrize("module", ["gpujobs.backends.local.zygote", "gpujobs.backends.local.daemon"])
def test_the_agents_start_up_imports_neither_the_client_nor_the_admission_engine(module):
    """The daemon starts the zygotes before it imports the agent, and a zygote imports torch
    after its own module: neither needs the client's modules or the admission engine first
    (before: both came with this package's __init__, ~40 ms of CPU in each process)."""
    code = f"import sys, {module}; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    loaded = set(out.stdout.split())
    heavy = {"gpujobs.admission", "gpujobs.backends.local.backend", "gpujobs.backends.local.client",
             "gpujobs.backends.local.store", "gpujobs.backends.local.agent", "sqlite3"}
    assert sorted(loaded & heavy) == []
    import gpujobs.backends.local as local
    assert local.LocalBackend.__module__ == "gpujobs.backends.local.backend"  # read on demand
    assert callable(local.stop_agent) and callable(local.register_launcher)
