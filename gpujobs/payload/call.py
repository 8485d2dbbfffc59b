"""Packing a call: ``cloudpickle((fn, args, kwargs))`` by value, with the user's modules and
sources it needs; a clear PayloadError naming what cannot travel or is too big."""
from __future__ import annotations

import pickle
from typing import Any

import cloudpickle

from ..errors import PayloadError
from .modules import _user_modules, needed_modules
from .shipping import _pack_modules, _ShippedModules
from .sources import collect_sources, register_sources, restore_filenames


def _find_culprit(obj: Any, path: str, depth: int = 0) -> tuple[str, Any] | None:
    """Depth-first search for the smallest sub-object that cloudpickle refuses."""
    if depth > 4:
        return None
    children: list[tuple[str, Any]] = []
    if isinstance(obj, (list, tuple)):
        children = [(f"{path}[{i}]", v) for i, v in enumerate(obj)]
    elif isinstance(obj, dict):
        children = [(f"{path}[{k!r}]", v) for k, v in obj.items()]
    elif callable(obj) and hasattr(obj, "__code__"):
        glob = getattr(obj, "__globals__", {})
        names = obj.__code__.co_names
        children = [(f"global {n!r} of {obj.__name__}", glob[n]) for n in names if n in glob]
        if obj.__closure__:
            children += [(f"closure variable {n!r} of {obj.__name__}", c.cell_contents)
                         for n, c in zip(obj.__code__.co_freevars, obj.__closure__)]
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        children = [(f"{path}.{k}", v) for k, v in vars(obj).items()]
    for sub_path, child in children:
        try:
            cloudpickle.dumps(child)
        except Exception:
            return _find_culprit(child, sub_path, depth + 1) or (sub_path, child)
    return None


def pack_call(fn: Any, args: tuple, kwargs: dict, limit: int, shares_pythonpath: bool = False) -> bytes:
    """cloudpickle ``(fn, args, kwargs)``, with the sources of the user's own modules it
    needs; raise PayloadError naming what fails, cannot travel, or is too big.
    ``shares_pythonpath``: the ranks run on this machine with its PYTHONPATH (the local backend),
    so a module importable from there need not travel."""
    already: set[str] = getattr(cloudpickle.cloudpickle, "_PICKLE_BY_VALUE_MODULES", set())
    by_value = [m for m in _user_modules(fn) if m.__name__ not in already]
    for mod in by_value:
        cloudpickle.register_pickle_by_value(mod)
    try:
        modules = needed_modules(fn, args, kwargs, shares_pythonpath=shares_pythonpath)
        return _pack(fn, args, kwargs, limit, collect_sources(fn, _user_modules(fn)), modules)
    finally:
        for mod in by_value:
            cloudpickle.unregister_pickle_by_value(mod)


def _pack(fn: Any, args: tuple, kwargs: dict, limit: int,
          sources: dict[str, Any] | None = None,
          modules: dict[str, tuple] | None = None) -> bytes:
    shipped = _pack_modules(modules) if modules else b""
    first = (_ShippedModules(shipped),) if modules else ()   # installs them before fn loads
    try:
        call = first + ((fn, args, kwargs, sources) if sources else (fn, args, kwargs))
        data = cloudpickle.dumps(call, protocol=pickle.DEFAULT_PROTOCOL)
        if sources and len(data) > limit:  # the sources are a nicety: the call alone may fit
            data = cloudpickle.dumps(first + (fn, args, kwargs), protocol=pickle.DEFAULT_PROTOCOL)
    except Exception as exc:  # cloudpickle raises TypeError, PicklingError, …
        parts = [("fn", fn)] + [(f"args[{i}]", a) for i, a in enumerate(args)] + \
            [(f"kwargs[{k!r}]", v) for k, v in kwargs.items()]
        culprit = None
        for path, part in parts:
            try:
                cloudpickle.dumps(part)
            except Exception:
                culprit = _find_culprit(part, path) or (path, part)
                break
        where, obj = culprit if culprit else ("the call", None)
        what = f"{type(obj).__name__} object" if obj is not None else "an object"
        raise PayloadError(
            where, f"cannot be sent to the ranks: {what} is not serialisable ({exc})",
            "create it inside the function (open files, locks, sockets and clients "
            "must be made where they are used), or pass what is needed to build it") from None
    if len(data) > limit:
        sizes = sorted(((len(cloudpickle.dumps(a)), f"args[{i}]") for i, a in enumerate(args)),
                       reverse=True)[:1]
        if shipped:
            sizes.append((len(shipped), f"the source of your modules {', '.join(sorted(modules or ()))}"))
            sizes = sorted(sizes, reverse=True)[:1]
        biggest = f"; the largest part is {sizes[0][1]} ({sizes[0][0]:,} bytes)" if sizes else ""
        new_limit = 1 << max(20, (len(data) * 2 - 1).bit_length())
        raise PayloadError(
            "payload", f"fn and arguments pickle to {len(data):,} bytes, over the limit of "
            f"{limit:,}{biggest}",
            "load large data inside the function (from a path, a PVC or object storage) "
            "instead of passing it, or raise the limit: "
            f"gpujobs.job(fn, ...).options(max_payload_bytes={new_limit}).submit()")
    return data


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
