"""Inside a rank: the packed call opened (:func:`unpack_call`), and the user's modules shipped
with it served ahead of the disk by a meta-path finder (installed while the call is unpickled,
before the function loads). The submitting side packs it: :func:`gpujobs.payload.pack_call`."""
from __future__ import annotations

from typing import Any

import cloudpickle

from .sources import register_sources, restore_filenames


class _ShippedModules:
    """Unpickling this (first in the packed call) installs the shipped sources."""

    def __init__(self, blob: bytes):
        self.blob = blob

    def __reduce__(self):
        return (install_modules, (self.blob,))


class _ShippedFinder:
    """A meta-path finder/loader serving the user modules that came with the call."""

    def __init__(self) -> None:
        self.modules: dict[str, tuple[str | None, bool, str | None, list[str] | None]] = {}

    def find_spec(self, name: str, path: Any = None, target: Any = None):
        import importlib.util
        entry = self.modules.get(name)
        if entry is None:
            return None
        source, is_pkg, origin, search = entry
        # a loader by duck type (create_module / exec_module); typeshed's LoaderProtocol also
        # asks for the deprecated load_module
        spec = importlib.util.spec_from_loader(name, self, origin=origin,  # type: ignore[arg-type]
                                               is_package=is_pkg)
        if spec is not None and origin:
            spec.has_location = True
        if spec is not None and is_pkg:
            spec.submodule_search_locations = list(search or [])
        return spec

    def create_module(self, spec: Any) -> None:
        return None

    def exec_module(self, module: Any) -> None:
        source, _is_pkg, origin, _ = self.modules[module.__name__]
        if source is not None:
            exec(compile(source, origin or f"<gpujobs shipped {module.__name__}>", "exec"),
                 module.__dict__)

    def get_source(self, name: str) -> str | None:
        entry = self.modules.get(name)
        return entry[0] if entry else None

    def is_package(self, name: str) -> bool:
        return bool(self.modules.get(name, (None, False))[1])


def install_modules(blob: bytes) -> None:
    """Make the shipped modules importable in this process (a rank), ahead of the disk."""
    import json
    import sys
    import zlib
    modules = json.loads(zlib.decompress(blob).decode())
    finder = next((f for f in sys.meta_path if isinstance(f, _ShippedFinder)), None)
    if finder is None:
        finder = _ShippedFinder()
        sys.meta_path.insert(0, finder)
    for name, (source, is_pkg, origin, search) in modules.items():
        finder.modules[name] = (source, is_pkg, origin, search)


def _pack_modules(modules: dict[str, tuple]) -> bytes:
    import json
    import zlib
    return zlib.compress(json.dumps({n: list(v) for n, v in modules.items()}).encode(), 9)


def unpack_call(data: bytes) -> tuple[Any, tuple, dict]:
    """``(fn, args, kwargs)``; the user's modules shipped with the call (first in the tuple,
    unpickled as None) are installed on the way, and source text for tracebacks goes into
    linecache."""
    call = cloudpickle.loads(data)
    if call and call[0] is None:
        call = call[1:]
    fn, args, kwargs = call[:3]
    if len(call) > 3 and isinstance(call[3], dict):
        try:
            register_sources(call[3].get("sources") or {})
            restore_filenames(fn, call[3].get("files") or {})
        except Exception:  # noqa: BLE001 - tracebacks without lines beat no run at all
            pass
    return fn, tuple(args), dict(kwargs)
