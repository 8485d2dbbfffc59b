"""The agent's socket server: it serves only its own user (peer uid checked at accept) and
answers one JSON request a line (:mod:`.protocol`) from the table :data:`OPS`.
"""
from __future__ import annotations

import os
import queue as queue_mod
import socketserver
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Protocol

from ...errors import SpecError
from ...spec import JobSpec
from ...status import JobStatus
from . import private, protocol

LISTEN_BACKLOG = 1024  # capped by net.core.somaxconn


class ServedAgent(Protocol):
    """What the server uses of the agent (:class:`.agent.Agent`): its lock and condition, the
    connected clients and subscribers, and the commands and queries it answers."""
    lock: Any
    cond: threading.Condition
    clients: int
    last_active: float
    stopping: bool
    slots: int
    subs: dict[str, list[queue_mod.Queue]]
    recs: dict[str, Any]
    zygote: Any
    lean_zygote: Any
    forecasts: Any
    engine: Any

    def submit(self, msg: dict) -> dict: ...
    def cancel(self, jid: str) -> None: ...
    def status(self, jid: str) -> JobStatus: ...
    def jobs(self, queue: str | None) -> list[JobStatus]: ...
    def view(self, rec: Any) -> JobStatus: ...
    def request_stop(self, why: str = "stop") -> None: ...


class PeerCheckedServer(socketserver.ThreadingUnixStreamServer):
    """Serves only its own user: a connection from any other uid (SO_PEERCRED) is closed at
    accept, before a byte of it is read (the socket's 0700 folder should already keep
    others out; this holds even when it does not)."""
    daemon_threads = True
    request_queue_size = LISTEN_BACKLOG  # the default (5) refused bursts of clients (EAGAIN)

    def verify_request(self, request, client_address) -> bool:  # noqa: ANN001
        try:
            uid = private.peer_uid(request)
        except OSError:
            return False
        if uid != os.geteuid():
            print(f"gpujobs agent: refused a connection from uid {uid}", file=sys.stderr, flush=True)
            return False
        return True


def _plan(agent: ServedAgent, msg: dict) -> dict:  # read-only: nothing is queued
    from ...admission import gates
    plan = agent.forecasts.plan(JobSpec.stored(msg["spec"]), msg.get("name", ""), msg.get("user", ""))
    plan = gates.with_basis(plan, agent.engine.kueue_version, "the local agent's ([local] kueue_version)")
    return {"ok": True, "plan": plan.to_dict()}


def _cancel(agent: ServedAgent, msg: dict) -> dict:
    agent.cancel(msg["id"])
    return {"ok": True}


def _pids(agent: ServedAgent, msg: dict) -> dict:
    rec = agent.recs.get(msg["id"])
    return {"ok": True, "pids": rec.gang.pids if rec and rec.gang else []}


def _agent_pids(agent: ServedAgent, msg: dict) -> dict:
    z, lean = agent.zygote, agent.lean_zygote
    return {"ok": True, "agent": os.getpid(), "zygote": z.proc.pid if z else None,
            "lean_zygote": lean.proc.pid if lean else None}


def _stop(agent: ServedAgent, msg: dict) -> dict:
    agent.request_stop()
    return {"ok": True, "pid": os.getpid()}


#: op -> its answer, called under the agent's lock but for :data:`UNLOCKED` (``wait`` and
#: ``subscribe`` are the handler's own: they hold the connection)
OPS: dict[str, Callable[[ServedAgent, dict], dict[str, Any]]] = {
    "ping": lambda agent, msg: {"ok": True, "pid": os.getpid(), "slots": agent.slots},
    "submit": lambda agent, msg: agent.submit(msg),
    "status": lambda agent, msg: {"ok": True, "status": agent.status(msg["id"]).to_dict()},
    "jobs": lambda agent, msg: {"ok": True, "jobs": [s.to_dict() for s in agent.jobs(msg.get("queue"))]},
    "plan": _plan,
    "cancel": _cancel,
    "pids": _pids,
    "agent_pids": _agent_pids,
    "stop": _stop,
}
#: ops that take the agent's lock themselves, only to copy what they need, so other clients'
#: requests do not wait for the rest: plan() simulates outside it, jobs() reads the store and
#: encodes the statuses (immutable) outside it
UNLOCKED = frozenset({"plan", "jobs"})


def make_handler(agent: ServedAgent) -> type[socketserver.StreamRequestHandler]:
    """The request handler of ``agent``'s socket: one JSON request a line, answered from
    :data:`OPS`; ``wait`` and ``subscribe`` hold the connection open."""
    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            reader = protocol.LineReader(self.request)
            with agent.lock:
                agent.clients += 1
            try:
                while True:
                    msg = reader.read()
                    if msg is None:
                        return
                    if msg.get("op") == "subscribe":
                        self._subscribe(msg)
                        return
                    try:
                        reply = self._do(msg)
                    except Exception as exc:  # noqa: BLE001
                        reply = protocol.error_reply(exc)
                    protocol.send(self.request, reply)
            except (BrokenPipeError, ConnectionResetError):
                return
            finally:
                with agent.lock:
                    agent.clients -= 1
                    agent.last_active = time.monotonic()

        def _do(self, msg: dict) -> dict:
            op = msg.get("op")
            if op == "wait":  # blocks: waits on the agent's condition, not under its lock
                return self._wait(msg["id"], msg.get("timeout"))
            answer = OPS.get(op) if isinstance(op, str) else None
            if answer is None:
                raise SpecError("op", f"unknown agent operation {op!r}", "update gpujobs on both sides")
            if op in UNLOCKED:
                return answer(agent, msg)
            with agent.lock:
                return answer(agent, msg)

        def _wait(self, jid: str, timeout: float | None) -> dict:
            deadline = None if timeout is None else time.monotonic() + float(timeout)
            with agent.cond:
                while True:
                    st = agent.status(jid)
                    left = None if deadline is None else deadline - time.monotonic()
                    if st.terminal or agent.stopping or (left is not None and left <= 0):
                        return {"ok": True, "status": st.to_dict()}
                    agent.cond.wait(1.0 if left is None else min(left, 1.0))

        def _subscribe(self, msg: dict) -> None:
            key = msg.get("id") or "*"
            q: queue_mod.Queue = queue_mod.Queue()
            with agent.lock:
                if key != "*":
                    st = agent.status(key)
                    protocol.send(self.request, {"status": st.to_dict()})
                    if st.terminal:  # nothing more will come
                        return
                agent.subs.setdefault(key, []).append(q)
            try:
                while True:
                    rec = q.get()
                    if rec is None:
                        return
                    with agent.lock:
                        st = agent.view(rec)
                    protocol.send(self.request, {"status": st.to_dict()})
                    if key != "*" and st.terminal:
                        return
            finally:
                with agent.lock:
                    qs = agent.subs.get(key, [])
                    qs.remove(q)
                    if not qs:  # no key per job ever watched: the loop walks live ones only
                        del agent.subs[key]

    return Handler


class AgentServer:
    """The agent's socket (``protocol.socket_path(home)``, 0600 in a 0700 folder), served on a
    thread of its own: :meth:`start` before the agent's loop, :meth:`close` after it."""

    def __init__(self, home: Path, agent: ServedAgent):
        self.path = protocol.socket_path(home)
        self.agent = agent
        self.server: PeerCheckedServer | None = None

    def start(self) -> None:
        private.make_socket_dir(self.path.parent)  # ours, 0700: nobody else can reach the socket
        if self.path.exists() or self.path.is_symlink():
            self.path.unlink()
        self.server = PeerCheckedServer(str(self.path), make_handler(self.agent))
        os.chmod(self.path, 0o600)
        threading.Thread(target=self.server.serve_forever, daemon=True, name="gpujobs-server").start()

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
        try:
            self.path.unlink()
        except OSError:
            pass
