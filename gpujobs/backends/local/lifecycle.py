"""The agent's life as a process: serve the socket, run the loop until stopped or idle, and
shut down, cancelling running jobs only when asked to stop (:class:`Lifecycle`)."""
from __future__ import annotations

import os
import signal
import threading
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, cast

from . import private, protocol
from .records import STOP_MESSAGES, agent_log
from .server import PeerCheckedServer, make_handler
from .zygote import Zygote

if TYPE_CHECKING:
    from .agent import Agent

MAX_LOOP_FAILURES = 50  # loop rounds failing in a row before the agent gives up (logged)


def start_zygote(home: Path) -> tuple[Zygote | None, float]:
    """The home's warm fork server, started now, and when (monotonic); None when it cannot
    start (ranks then start as fresh interpreters). The daemon calls it before it builds the
    agent: the zygote's imports (torch, seconds) overlap the agent's own start."""
    started = time.monotonic()
    try:
        return Zygote(home / "zygote.log"), started
    except Exception:  # noqa: BLE001 - ranks fall back to fresh interpreters
        agent_log(traceback.format_exc())
        return None, started


class Lifecycle:
    """Start, loop, stop (a mix-in of :class:`~.agent.Agent`: it runs on the agent's state)."""

    def run(self) -> None:
        agent = cast("Agent", self)  # a mix-in: it runs on the agent
        if agent.zygote is None:  # the daemon starts it first, before building the agent
            agent._start_zygote()
        path = protocol.socket_path(agent.home)
        private.make_socket_dir(path.parent)  # ours, 0700: nobody else can reach the socket
        if path.exists() or path.is_symlink():
            path.unlink()
        server = PeerCheckedServer(str(path), make_handler(agent))
        os.chmod(path, 0o600)
        threading.Thread(target=server.serve_forever, daemon=True, name="gpujobs-server").start()
        agent.forecasts.start()  # reasons and expected starts, off the hot path
        try:
            private.write_private(agent.home / "agent.pid", str(os.getpid()))
        except OSError as exc:  # a full disk: only `gpujobs agent stop` without an agent uses it
            agent_log(f"cannot write {agent.home / 'agent.pid'}: {exc}")
        signal.signal(signal.SIGTERM, lambda *_: agent.request_stop("sigterm"))
        failures = 0
        try:
            while not agent.stopping:
                try:
                    agent.step()
                    failures = 0
                except Exception:  # noqa: BLE001 - log it, keep scheduling
                    failures += 1
                    agent_log(f"agent loop error ({failures} in a row), continuing:\n"
                         + traceback.format_exc())
                    if failures >= MAX_LOOP_FAILURES:
                        raise
                    time.sleep(min(1.0, 0.05 * failures))
                with agent.lock:
                    running = any(r.gang is not None for r in agent.recs.values())
                    if agent.busy() or agent.clients:
                        agent.last_active = time.monotonic()
                    elif time.monotonic() - agent.last_active > agent.idle_s:
                        agent.exit_reason = "idle"
                        break
                agent.wake.wait(0.05 if running else 0.5)
                agent.wake.clear()
        except BaseException as exc:
            agent.exit_reason = f"{type(exc).__name__}: {exc}"
            agent_log(f"the agent exits unexpectedly: {agent.exit_reason}\n" + traceback.format_exc())
            raise
        finally:
            agent.forecasts.close()
            server.shutdown()
            agent._shutdown()
            try:
                path.unlink()
            except OSError:
                pass

    def _start_zygote(self) -> None:
        agent = cast("Agent", self)  # a mix-in: it runs on the agent
        agent.use_zygote(*start_zygote(agent.home))

    def use_zygote(self, zygote: Zygote | None, started: float) -> None:
        """Take the zygote started (at ``started``, monotonic) by :func:`start_zygote`."""
        agent = cast("Agent", self)  # a mix-in: it runs on the agent
        agent.zygote, agent.zygote_started = zygote, started
        if zygote is not None:
            zygote.on_exit = agent.wake.set

    def request_stop(self, why: str = "stop") -> None:
        agent = cast("Agent", self)  # a mix-in: it runs on the agent
        agent.exit_reason = why
        agent.stopping = True
        agent.wake.set()

    def _shutdown(self) -> None:
        """End the agent. Asked to stop (``gpujobs agent stop``, SIGTERM): running jobs are
        ended as cancelled, saying by what. Any other exit (an error) cancels nothing: the
        ranks keep running and the next agent re-adopts them."""
        agent = cast("Agent", self)  # a mix-in: it runs on the agent
        asked = STOP_MESSAGES.get(agent.exit_reason or "stop")
        with agent.lock:
            for rec in agent.recs.values():
                if rec.metrics is not None:
                    rec.metrics.stop(wait=False)
                    rec.metrics = None
                if rec.gang is None:
                    continue
                if asked is None:
                    if not rec.status.terminal:
                        agent._update(rec, "agent-exited", f"the agent exited unexpectedly "
                                     f"({agent.exit_reason}); its ranks keep running and the next "
                                     f"agent re-adopts them")
                    continue
                rec.gang.terminate(0.5)
                if not rec.status.terminal:
                    agent._update(rec, "finished", "the agent was stopped", phase="cancelled",
                                 message=asked, finished_at=time.time())
                rec.gang = None
            agent._flush_safely()
            for qs in agent.subs.values():
                for q in qs:
                    q.put(None)
        if agent.zygote is not None:
            agent.zygote.close()  # not asked: it keeps reaping its ranks (exit files), exits after them
            if asked is not None:
                try:
                    agent.zygote.proc.wait(5)
                except Exception:  # noqa: BLE001
                    agent.zygote.proc.kill()
        try:
            os.unlink(agent.home / "agent.pid")
        except OSError:
            pass
