"""The client <-> agent wire format: one JSON object per line over a Unix socket.

Request ``{"op": ..., ...}``; reply ``{"ok": true, ...}`` or ``{"ok": false, "error":
<gpujobs.errors class name>, "message", "field", "problem", "fix"}``. ``subscribe``
keeps the connection open and the agent pushes ``{"status": {...}}`` lines.
"""
from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

from ... import errors


def socket_path(home: Path) -> Path:
    """Where the agent of ``home`` listens: a folder only its user may enter
    (:func:`.private.socket_path`: the home, or a private runtime folder)."""
    from .private import socket_path as _path
    return _path(home)


def error_reply(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, errors.SpecError):
        return {"ok": False, "error": type(exc).__name__, "field": exc.field,
                "problem": exc.problem, "fix": exc.fix, "message": str(exc)}
    name = type(exc).__name__ if isinstance(exc, errors.GpuJobsError) else "BackendError"
    msg = str(exc) if isinstance(exc, errors.GpuJobsError) else f"agent error: {type(exc).__name__}: {exc}"
    return {"ok": False, "error": name, "message": msg}


def raise_reply(reply: dict[str, Any]) -> dict[str, Any]:
    """Return an ok reply; re-raise an error reply as its gpujobs exception."""
    if reply.get("ok"):
        return reply
    cls = getattr(errors, reply.get("error", ""), None)
    if isinstance(cls, type) and issubclass(cls, errors.SpecError):
        raise cls(reply.get("field", "?"), reply.get("problem", reply.get("message", "")), reply.get("fix"))
    if isinstance(cls, type) and issubclass(cls, errors.GpuJobsError):
        raise cls(reply.get("message", ""))
    raise errors.BackendError(reply.get("message", "unknown agent error"))


def send(sock: socket.socket, msg: dict[str, Any]) -> None:
    sock.sendall((json.dumps(msg) + "\n").encode())


class LineReader:
    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = b""

    def read(self) -> dict[str, Any] | None:
        while b"\n" not in self.buf:
            data = self.sock.recv(1 << 16)
            if not data:
                return None
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)
