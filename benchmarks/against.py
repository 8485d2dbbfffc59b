"""Run a benchmark script of this checkout with the gpujobs of another tree (an older commit's
worktree), for ``run_all.sh --against REV``:

    PYTHONPATH=TREE .venv/bin/python benchmarks/against.py TREE benchmarks/X.py [ARGS...]

The script's own ``sys.path.insert(0, <its repository>)`` would import this checkout's
packages; importing TREE's first makes every later import (and, through PYTHONPATH, every
process it starts: agents, zygotes, ranks) use TREE's. Helpers the script takes from this
checkout (tests/, benchmarks/) stay this checkout's: the same benchmark, the old code.
"""
from __future__ import annotations

import importlib
import os
import runpy
import sys


def main() -> None:
    tree, script, *args = sys.argv[1:]
    tree = os.path.abspath(tree)
    sys.path.insert(0, tree)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (tree, os.environ.get("PYTHONPATH")) if p)
    for name in ("gpujobs", "gpujobs_sim", "gpujobs_magic"):
        if os.path.isdir(os.path.join(tree, name)):
            mod = importlib.import_module(name)
            assert os.path.abspath(mod.__file__ or "").startswith(tree), (name, mod.__file__)
    sys.argv = [script, *args]
    sys.path.insert(1, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
