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
from typing import Any

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


def pack_call(fn: Any, args: tuple, kwargs: dict, limit: int) -> bytes:
    """cloudpickle ``(fn, args, kwargs)``; raise PayloadError naming what fails or is too big."""
    already = getattr(cloudpickle.cloudpickle, "_PICKLE_BY_VALUE_MODULES", set())
    by_value = [m for m in _user_modules(fn) if m.__name__ not in already]
    for mod in by_value:
        cloudpickle.register_pickle_by_value(mod)
    try:
        return _pack(fn, args, kwargs, limit)
    finally:
        for mod in by_value:
            cloudpickle.unregister_pickle_by_value(mod)


def _pack(fn: Any, args: tuple, kwargs: dict, limit: int) -> bytes:
    try:
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
    fn, args, kwargs = cloudpickle.loads(data)
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
