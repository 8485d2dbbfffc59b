"""The client <-> agent wire format: one JSON object per line over a Unix socket.

Request ``{"op": ..., ...}``; reply ``{"ok": true, ...}`` or ``{"ok": false, "error":
<gpujobs.errors class name>, "args": <its constructor's arguments>, "message"}`` (a SpecError
also spells out "field", "problem", "fix"). ``subscribe``
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
    """The reply for an error: a gpujobs error travels with its constructor's arguments
    (:meth:`~gpujobs.errors.GpuJobsError.init_args`) so the client rebuilds it field for field."""
    if not isinstance(exc, errors.GpuJobsError):
        return {"ok": False, "error": "BackendError", "args": [f"agent error: {type(exc).__name__}: {exc}"],
                "message": f"agent error: {type(exc).__name__}: {exc}"}
    args = list(exc.init_args())
    try:
        json.dumps(args)
    except (TypeError, ValueError):  # a field that is not JSON (an object passed as message)
        args = [str(exc)]
    reply: dict[str, Any] = {"ok": False, "error": type(exc).__name__, "args": args, "message": str(exc)}
    if isinstance(exc, errors.SpecError):
        reply.update(field=exc.field, problem=exc.problem, fix=exc.fix)
    return reply


def raise_reply(reply: dict[str, Any]) -> dict[str, Any]:
    """Return an ok reply; re-raise an error reply as the gpujobs exception it was."""
    if reply.get("ok"):
        return reply
    cls = getattr(errors, reply.get("error", ""), None)
    message = reply.get("message", "unknown agent error")
    if not (isinstance(cls, type) and issubclass(cls, errors.GpuJobsError)):
        raise errors.BackendError(message)
    if "args" in reply:
        try:
            exc = cls(*reply["args"])
        except TypeError:  # an agent of another version: the message at least
            exc = errors.BackendError(message)
        raise exc
    if issubclass(cls, errors.SpecError):  # an older agent: no "args"
        raise cls(reply.get("field", "?"), reply.get("problem", message), reply.get("fix"))
    raise cls(message)


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
