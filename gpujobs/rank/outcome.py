"""What a rank sends back: :class:`Outcome` (a value, or an exception with its remote traceback)."""
from __future__ import annotations

import pickle
import traceback
from dataclasses import dataclass
from typing import Any

import cloudpickle

from ..errors import RemoteError


_PEER_LOST = ("Connection closed by peer", "Connection reset by peer", "Broken pipe",
              "connectFullMesh", "remote process exited", "communicator was aborted",
              "Socket Timeout", "Timed out waiting")


def is_collateral(exc: BaseException) -> bool:
    """True for errors that only say *another* rank died (a collective lost its peer)."""
    name = type(exc).__name__
    text = str(exc)
    return name in ("DistBackendError", "DistNetworkError", "DistStoreError") or \
        any(marker in text for marker in _PEER_LOST)


def exception_line(exc_type: str, exc_message: str, rank: int) -> str:
    """``KeyError: 'missing_key' (rank 1)``: what a failed job's status message starts with, on
    every backend (``exc_type`` is ``module.Qualname``; builtins lose their module)."""
    kind = exc_type.removeprefix("builtins.").rsplit(".", 1)[-1] if exc_type else "Exception"
    text = (exc_message or "").strip().splitlines()
    msg = text[0][:200] if text else ""
    return f"{kind}: {msg} (rank {rank})" if msg else f"{kind} (rank {rank})"


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
