"""Packing calls and results: cloudpickle by value, HMAC-authenticated envelopes.

A packed call is ``cloudpickle.dumps((fn, args, kwargs))``. Results and remote
exceptions travel back inside an envelope ``MAGIC + hmac_sha256(key, body) + body``
and are verified *before* anything is unpickled (:func:`open_envelope`).
"""
from __future__ import annotations

import hashlib
import hmac
import pickle
import secrets
import traceback
from dataclasses import dataclass
from typing import Any, Iterator

import cloudpickle

from .errors import PayloadError, RemoteError, ResultAuthError

MAGIC = b"GPJ1"
_DIGEST = 32


def new_key() -> bytes:
    """A fresh per-job HMAC key."""
    return secrets.token_bytes(32)


def derive_key(key: bytes, context: str) -> bytes:
    """The key of one job (``context``: its id) from a longer-lived key: a sealed call or
    result of one job does not verify as another job's."""
    return hmac.new(key, b"gpujobs-job:" + context.encode(), hashlib.sha256).digest()



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


def _user_modules(fn: Any) -> list[Any]:
    """Modules of the user's own code (not installed, not stdlib) that ``fn`` comes from.

    They are pickled by value: a rank (or a pod) cannot import a script or a test file
    from the submitter's working tree.
    """
    import sys
    import sysconfig
    name = getattr(fn, "__module__", None) or getattr(type(fn), "__module__", None)
    mod = sys.modules.get(name or "")
    path = getattr(mod, "__file__", None)
    if mod is None or name == "__main__" or not path or name.split(".")[0] == "gpujobs":
        return []
    installed = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    if any(str(path).startswith(p) for p in installed) or "site-packages" in str(path):
        return []
    return [mod]


SOURCES_LIMIT = 2 << 20  # bytes of source text shipped with a call, at most


def _installed_prefixes() -> tuple[str, ...]:
    import sysconfig
    paths = sysconfig.get_paths()
    return tuple({paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")})


def _code_key(code: Any) -> str:
    return f"{getattr(code, 'co_qualname', code.co_name)}:{code.co_firstlineno}"


def _functions(fn: Any, seen: set[int] | None = None, depth: int = 0) -> Iterator[Any]:
    """``fn`` and the functions it reaches: globals it names, closure cells, methods of the
    classes among them (what cloudpickle ships by value with it)."""
    import types
    seen = set() if seen is None else seen
    fn = getattr(fn, "__func__", fn)
    if depth > 3 or id(fn) in seen:
        return
    seen.add(id(fn))
    if isinstance(fn, type):
        for v in list(vars(fn).values()):
            if isinstance(v, (types.FunctionType, staticmethod, classmethod, property)):
                for f in (getattr(v, "fget", None),) if isinstance(v, property) else (v,):
                    if f is not None:
                        yield from _functions(getattr(f, "__func__", f), seen, depth + 1)
        return
    code = getattr(fn, "__code__", None)
    if not isinstance(code, types.CodeType):
        return
    yield fn
    glob = getattr(fn, "__globals__", None) or {}
    for name in code.co_names:
        v = glob.get(name)
        if isinstance(v, (types.FunctionType, type)):
            yield from _functions(v, seen, depth + 1)
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            v = cell.cell_contents
        except ValueError:
            continue
        if isinstance(v, (types.FunctionType, type)):
            yield from _functions(v, seen, depth + 1)


def _user_file(name: str, installed: tuple[str, ...]) -> bool:
    return bool(name) and not (name.startswith("<") and not name.startswith("<ipython-input")) \
        and not name.startswith(installed) and "site-packages" not in name


def collect_sources(fn: Any, modules: list[Any] = ()) -> dict[str, Any]:
    """What a rank needs for tracebacks that name the user's files and show their lines:
    ``{"sources": {file: [[first line number, text], ...]}, "files": {code key: file}}``:
    the source of each user function ``fn`` reaches (notebook cells included, read through
    linecache), not whole files, so the call stays small. cloudpickle replaces the file name
    of code it ships by value with ``<dynamic-code>``; ``files`` puts it back."""
    import inspect
    installed = _installed_prefixes()
    files: dict[str, str] = {}
    blocks: dict[str, dict[int, str]] = {}
    size = 0
    try:
        for f in _functions(fn):
            name = f.__code__.co_filename
            if not _user_file(name, installed):
                continue
            files[_code_key(f.__code__)] = name
            try:
                lines, start = inspect.getsourcelines(f)
            except (OSError, TypeError):
                continue
            text = "".join(lines)
            if size + len(text) > SOURCES_LIMIT:
                continue
            blocks.setdefault(name, {})[max(1, start)] = text
            size += len(text)
    except Exception:  # noqa: BLE001 - sources are a nicety; never fail a submit on them
        pass
    sources = {name: sorted([start, text] for start, text in b.items()) for name, b in blocks.items()}
    return {"sources": sources, "files": files} if files else {}


def _with_filename(code: Any, name: str) -> Any:
    import types
    consts = tuple(_with_filename(c, name) if isinstance(c, types.CodeType) else c
                   for c in code.co_consts)
    return code.replace(co_filename=name, co_consts=consts)


def restore_filenames(fn: Any, files: dict[str, str]) -> None:
    """Give the shipped functions their file names back (see :func:`collect_sources`)."""
    for f in _functions(fn):
        name = files.get(_code_key(f.__code__))
        if name and f.__code__.co_filename != name:
            try:
                f.__code__ = _with_filename(f.__code__, name)
            except (TypeError, ValueError, AttributeError):
                pass


def register_sources(sources: dict[str, Any]) -> None:
    """Put shipped source lines into linecache (no mtime: never re-read from disk). Lines
    that were not shipped read as empty."""
    import linecache
    for name, blocks in (sources or {}).items():
        if isinstance(blocks, str):
            blocks = [[1, blocks]]
        lines: list[str] = []
        for start, text in blocks:
            chunk = text.splitlines(keepends=True)
            end = int(start) - 1 + len(chunk)
            if len(lines) < end:
                lines.extend("\n" for _ in range(end - len(lines)))
            lines[int(start) - 1:end] = [c if c.endswith("\n") else c + "\n" for c in chunk]
        linecache.cache[name] = (sum(map(len, lines)), None, lines, name)


def pack_call(fn: Any, args: tuple, kwargs: dict, limit: int) -> bytes:
    """cloudpickle ``(fn, args, kwargs)``; raise PayloadError naming what fails or is too big."""
    already = getattr(cloudpickle.cloudpickle, "_PICKLE_BY_VALUE_MODULES", set())
    by_value = [m for m in _user_modules(fn) if m.__name__ not in already]
    for mod in by_value:
        cloudpickle.register_pickle_by_value(mod)
    try:
        return _pack(fn, args, kwargs, limit, collect_sources(fn, _user_modules(fn)))
    finally:
        for mod in by_value:
            cloudpickle.unregister_pickle_by_value(mod)


def _pack(fn: Any, args: tuple, kwargs: dict, limit: int,
          sources: dict[str, Any] | None = None) -> bytes:
    try:
        call = (fn, args, kwargs, sources) if sources else (fn, args, kwargs)
        data = cloudpickle.dumps(call, protocol=pickle.DEFAULT_PROTOCOL)
        if sources and len(data) > limit:  # the sources are a nicety: the call alone may fit
            data = cloudpickle.dumps((fn, args, kwargs), protocol=pickle.DEFAULT_PROTOCOL)
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
        biggest = f"; the largest part is {sizes[0][1]} ({sizes[0][0]:,} bytes)" if sizes else ""
        raise PayloadError(
            "payload", f"fn and arguments pickle to {len(data):,} bytes, over the limit of "
            f"{limit:,}{biggest}",
            "load large data inside the function (from a path, a PVC or object storage) "
            "instead of passing it, or raise max_payload_bytes")
    return data


def unpack_call(data: bytes) -> tuple[Any, tuple, dict]:
    """``(fn, args, kwargs)``; source text shipped with the call goes into linecache."""
    call = cloudpickle.loads(data)
    fn, args, kwargs = call[:3]
    if len(call) > 3 and isinstance(call[3], dict):
        try:
            register_sources(call[3].get("sources") or {})
            restore_filenames(fn, call[3].get("files") or {})
        except Exception:  # noqa: BLE001 - tracebacks without lines beat no run at all
            pass
    return fn, tuple(args), dict(kwargs)


def seal(obj: Any, key: bytes) -> bytes:
    """Pickle ``obj`` and prefix the HMAC of the pickle."""
    body = cloudpickle.dumps(obj)
    return MAGIC + hmac.new(key, body, hashlib.sha256).digest() + body


def open_envelope(blob: bytes, key: bytes) -> Any:
    """Verify the HMAC, then unpickle. Raise ResultAuthError if anything is off."""
    if len(blob) < len(MAGIC) + _DIGEST or not blob.startswith(MAGIC):
        raise ResultAuthError("result envelope is malformed; refusing to unpickle it")
    mac, body = blob[len(MAGIC):len(MAGIC) + _DIGEST], blob[len(MAGIC) + _DIGEST:]
    if not hmac.compare_digest(mac, hmac.new(key, body, hashlib.sha256).digest()):
        raise ResultAuthError("result failed authentication (HMAC mismatch); it was not "
                              "unpickled. It was changed after the job wrote it, or was "
                              "written by something else.")
    return pickle.loads(body)


_PEER_LOST = ("Connection closed by peer", "Connection reset by peer", "Broken pipe",
              "connectFullMesh", "remote process exited", "communicator was aborted",
              "Socket Timeout", "Timed out waiting")


def is_collateral(exc: BaseException) -> bool:
    """True for errors that only say *another* rank died (a collective lost its peer)."""
    name = type(exc).__name__
    text = str(exc)
    return name in ("DistBackendError", "DistNetworkError", "DistStoreError") or \
        any(marker in text for marker in _PEER_LOST)


@dataclass
class Outcome:
    """What one rank sends back: a value or an exception (with its remote traceback)."""
    rank: int
    ok: bool
    value: Any = None
    exc_bytes: bytes | None = None
    exc_type: str = ""
    exc_message: str = ""
    traceback: str = ""
    collateral: bool = False
    """The rank failed because another one did (a collective lost its peer, or it was stopped)."""

    @classmethod
    def success(cls, rank: int, value: Any) -> "Outcome":
        return cls(rank=rank, ok=True, value=value)

    @classmethod
    def failure(cls, rank: int, exc: BaseException) -> "Outcome":
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        try:
            exc_bytes = cloudpickle.dumps(exc)
        except Exception:
            exc_bytes = None
        return cls(rank=rank, ok=False, exc_bytes=exc_bytes,
                   exc_type=f"{type(exc).__module__}.{type(exc).__qualname__}",
                   exc_message=str(exc), traceback=tb, collateral=is_collateral(exc))

    def exception(self) -> BaseException:
        """Re-create the remote exception as its own type, with rank and traceback attached."""
        exc: BaseException | None = None
        if self.exc_bytes is not None:
            try:
                exc = pickle.loads(self.exc_bytes)
            except Exception:
                exc = None
        if not isinstance(exc, BaseException):
            return RemoteError(self.exc_type, self.exc_message, self.rank, self.traceback)
        try:
            exc.rank = self.rank  # type: ignore[attr-defined]
            exc.remote_traceback = self.traceback  # type: ignore[attr-defined]
        except Exception:
            pass
        if hasattr(exc, "add_note"):
            exc.add_note(f"\n[gpujobs] raised in rank {self.rank}; remote traceback:\n"
                         f"{self.traceback.rstrip()}")
        return exc
