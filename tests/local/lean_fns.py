"""Job functions for tests/local/test_lean_zygote.py: this module imports the standard library
alone, so that a call of these functions forks from the lean zygote (gpujobs.backends.local.lean).
Their text never spells torch's name: a call whose code, globals, arguments or source text name
it forks from the torch zygote."""
from __future__ import annotations

import os
import sys
import time


def where() -> tuple[int, bool]:
    """(the rank's parent pid, whether the heavy module is loaded in the rank)."""
    return os.getppid(), "".join(["to", "rch"]) in sys.modules  # built at run time (not folded)


def imports_by_a_name_built_at_run_time() -> tuple[int, bool, bool, int]:
    """Imports the heavy module where no scan of the call can see it; then asks its
    distributed package whether its process group is set up."""
    import importlib
    heavy = "".join(["to", "rch"])
    before = heavy in sys.modules
    importlib.import_module(heavy)
    dist = importlib.import_module(heavy + ".distributed")
    return os.getppid(), before, dist.is_initialized(), dist.get_world_size()


def sleeps(seconds: float, value: str) -> str:
    time.sleep(seconds)
    return value


def touches(path: str, seconds: float, value: str) -> str:
    """Writes ``path`` once running, then sleeps."""
    with open(path, "w") as fh:
        fh.write(str(os.getpid()))
    time.sleep(seconds)
    return value


def say_with_torch(value):
    """Names torch, so its gang forks from the torch zygote (backends/local/lean.py sends a call
    that names no torch to the lean one, which these tests are not about)."""
    import torch  # noqa: F401
    return value
