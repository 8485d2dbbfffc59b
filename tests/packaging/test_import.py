"""``import gpujobs`` (issue 27): what the README spells, ``gpujobs.checkpoint.resumable`` and
``gpujobs.fsdp.shard``, works without another import, and loads no torch until used."""
from __future__ import annotations

import subprocess
import sys


def test_checkpoint_and_fsdp_load_on_first_use_without_torch_at_import():
    code = ("import sys, gpujobs\n"
            "assert 'torch' not in sys.modules and 'gpujobs.checkpoint' not in sys.modules\n"
            "assert callable(gpujobs.checkpoint.resumable) and callable(gpujobs.fsdp.shard)\n"
            "assert 'torch' not in sys.modules\n"
            "try:\n"
            "    gpujobs.no_such_thing\n"
            "except AttributeError as exc:\n"
            "    print(exc)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "module 'gpujobs' has no attribute 'no_such_thing'"
