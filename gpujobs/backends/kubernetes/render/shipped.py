"""The gpujobs code a pod gets (``lib.zip``): the rank package's files, whole.

Everything a rank runs is in :mod:`gpujobs.rank`, which imports only the standard library,
cloudpickle and :mod:`gpujobs.errors` (import-linter checks it: pyproject.toml). So a pod gets,
with nothing computed from imports:

- every file of ``gpujobs/rank/`` (the runner, contract, wire format, context, payload
  envelope, samplers …);
- ``gpujobs/errors.py``, the one layer below it (a rank raises and pickles gpujobs' errors);
- the public modules that re-export the rank package (:data:`PUBLIC_REEXPORTS`:
  ``gpujobs.checkpoint``, ``gpujobs.fsdp``), so a function's ``import gpujobs.checkpoint``
  works in a pod as on the client;
- ``gpujobs/__init__.py`` from :mod:`gpujobs.rank.pod_package`: the client's package
  ``__init__`` imports the client side (builder, backends, views), which is not shipped.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

_GPUJOBS = Path(__file__).resolve().parents[3]  # the gpujobs package folder
_ROOT = _GPUJOBS.parent

RANK_PACKAGE = "rank"
BELOW_RANK = ("errors.py",)
"""gpujobs modules below the rank package (the only gpujobs modules it may import)."""
PUBLIC_REEXPORTS = ("checkpoint.py", "fsdp.py")
"""Public gpujobs modules that only re-export the rank package (a test checks they import
nothing else)."""
POD_PACKAGE_INIT = "rank/pod_package.py"
"""Shipped as ``gpujobs/__init__.py``."""


@lru_cache(maxsize=1)
def gpujobs_files() -> dict[str, str]:
    """``lib/``-relative path -> source text of the gpujobs code a pod gets."""
    files = {"gpujobs/__init__.py": (_GPUJOBS / POD_PACKAGE_INIT).read_text()}
    for path in sorted((_GPUJOBS / RANK_PACKAGE).rglob("*.py")):
        files[path.relative_to(_ROOT).as_posix()] = path.read_text()
    for name in BELOW_RANK + PUBLIC_REEXPORTS:
        files[f"gpujobs/{name}"] = (_GPUJOBS / name).read_text()
    return files
