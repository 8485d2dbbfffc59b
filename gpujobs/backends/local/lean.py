"""Which gangs fork from the lean zygote (no torch loaded) instead of the torch one.

Forking the torch-loaded zygote (~600 MB) and ending the fork costs ~20 ms of kernel time per
rank (page tables, copy-on-write faults, exit); a lean image costs ~2 ms. A rank needs torch
before the job's function runs only to set up torch.distributed, and a gang of one CPU rank has
no peer to meet: its process group is set up when (if) torch is first imported in the rank
(:func:`gpujobs.rank.runner.frameworks.setup`). So a gang forks from the lean zygote when it is:

- a command job (its ranks run a program; the runner sets up no framework), or
- one CPU rank of ddp/fsdp whose sealed call names no module that could import torch:
  nothing in the pickle or in the sources of the user's modules shipped with it mentions
  ``torch``, and every module it references or those sources import is the standard
  library's, cloudpickle's, gpujobs' or one of the shipped ones.

This is decided from the payload file's bytes, never unpickled. A call that still imports
torch (through a name built at run time) runs correctly: it pays torch's import in its rank.
"""
from __future__ import annotations

import pickletools
import sys
from pathlib import Path
from typing import Any, Sequence

from ...rank.envelope import MAGIC

#: top-level modules a call may reference and still fork from the lean zygote
LEAN_ROOTS = frozenset(sys.stdlib_module_names) | {"cloudpickle", "gpujobs", "__main__", "__builtin__"}
#: cloudpickle's module importers: their argument (the next string) is a module name
_IMPORTERS = {"subimport", "dynamic_subimport"}
#: a call bigger than this is not scanned (large arguments are rarely torch-free)
SCAN_LIMIT = 256 * 1024
_DIGEST = 32
_STRINGS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "STRING",
            "BINSTRING", "SHORT_BINSTRING"}
_GETS = {"GET", "BINGET", "LONG_BINGET"}
_BYTES = {"SHORT_BINBYTES", "BINBYTES", "BINBYTES8"}
_SHIPPING = "gpujobs.payload.shipping"


def modules_of_call(body: bytes) -> set[str] | None:
    """The modules a pickle references (globals and cloudpickle's module imports, and what
    the sources of the modules shipped with it import), or None when it cannot be read (or a
    shipped source mentions torch). Scans opcodes and source text only: nothing is unpickled,
    run or imported."""
    memo: list[Any] = []
    pushed: list[Any] = []  # values of the recent pushes (strings; None for anything else)
    modules: set[str] = set()
    importing = False
    shipping = False
    try:
        for op, arg, _ in pickletools.genops(body):
            name = op.name
            if name in ("FRAME", "PROTO", "STOP"):
                continue
            if name == "MEMOIZE":
                memo.append(pushed[-1] if pushed else None)
                continue
            if name in ("PUT", "BINPUT", "LONG_BINPUT"):
                continue  # older protocols: memoizes the top, which a scan need not follow
            value = None
            if name in _STRINGS:
                value = arg.decode("latin-1") if isinstance(arg, bytes) else arg
                if importing:
                    modules.add(str(value))
                    importing = False
            elif name in _GETS:
                value = memo[arg] if isinstance(arg, int) and arg < len(memo) else None
                if importing and isinstance(value, str):
                    modules.add(value)
                    importing = False
            elif name in _BYTES and shipping:
                shipped = shipped_imports(bytes(arg or b""))
                if shipped is None:
                    return None
                modules |= shipped
                shipping = False
            elif name in ("GLOBAL", "STACK_GLOBAL"):
                if name == "GLOBAL":
                    module, _, attr = str(arg).partition(" ")
                else:
                    top = pushed[-2:]
                    if len(top) < 2 or not isinstance(top[0], str):
                        return None
                    module, attr = top
                modules.add(module)
                importing = attr in _IMPORTERS
                shipping = shipping or (module == _SHIPPING and attr == "install_modules")
            pushed.append(value)
            del pushed[:-2]
    except Exception:  # noqa: BLE001 - unreadable: the caller takes the torch zygote
        return None
    return modules


def shipped_imports(blob: bytes) -> set[str] | None:
    """The top-level modules the shipped sources (:mod:`gpujobs.payload.shipping`'s blob)
    import, less the shipped ones themselves; None when a source mentions torch or cannot
    be read."""
    import ast
    import json
    import zlib
    try:
        inflate = zlib.decompressobj()
        text = inflate.decompress(blob, 8 * SCAN_LIMIT)
        if inflate.unconsumed_tail or b"torch" in text:
            return None
        shipped = json.loads(text.decode())
        roots: set[str] = set()
        for entry in shipped.values():
            source = entry[0] if isinstance(entry, list) and entry else None
            if not source:
                continue
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.Import):
                    roots.update(a.name.split(".")[0] for a in node.names)
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    roots.add(node.module.split(".")[0])
    except Exception:  # noqa: BLE001 - unreadable: the caller takes the torch zygote
        return None
    return roots - {name.split(".")[0] for name in shipped}


def _inner(body: bytes) -> bytes | None:
    """The bytes a pickle of one bytes object holds (a payload file seals the packed call as
    bytes: :meth:`.jobdir.JobDir.create`), else None."""
    inner = None
    try:
        for op, arg, _ in pickletools.genops(body):
            if op.name in _BYTES and inner is None:
                inner = bytes(arg or b"")
            elif op.name not in ("PROTO", "FRAME", "MEMOIZE", "BINPUT", "STOP"):
                return None
    except Exception:  # noqa: BLE001
        return None
    return inner


def call_needs_torch(blob: bytes) -> bool:
    """Whether a sealed call (``MAGIC + digest + pickle``, the packed call inside as bytes)
    may import torch before or while it runs, as far as its bytes tell; True when unsure."""
    if not blob.startswith(MAGIC) or len(blob) > SCAN_LIMIT or b"torch" in blob:
        return True
    call = _inner(blob[len(MAGIC) + _DIGEST:])
    if call is None:
        return True
    modules = modules_of_call(call)
    if modules is None:
        return True
    return any(m.split(".", 1)[0] not in LEAN_ROOTS for m in modules)


def payload_needs_torch(path: Path | str) -> bool:
    """:func:`call_needs_torch` of a payload file; True when it cannot be read."""
    try:
        with open(path, "rb") as fh:
            blob = fh.read(SCAN_LIMIT + 1)
    except OSError:
        return True
    return call_needs_torch(blob)


def gang_is_lean(framework: str, world_size: int, devices: Sequence[Any] | None,
                 program: Any, payload: Path | str) -> bool:
    """Whether a local gang forks from the lean zygote (see the module's docstring)."""
    if program:
        return True
    if framework not in ("ddp", "fsdp") or world_size != 1 or devices is not None:
        return False
    return not payload_needs_torch(payload)
