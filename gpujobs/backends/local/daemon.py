"""The agent's process: ``python -m gpujobs.backends.local.daemon --home H --daemonize``
(started on demand by :mod:`.client`): detach (double fork, own session), take the home's
lock (one agent per home), build the :class:`~.agent.Agent` and run it. A failure to start
is left in ``H/agent.error`` for the client to raise.
"""
from __future__ import annotations

import argparse
import fcntl
import os
import sys
from pathlib import Path

from ...rank.contract import JobFolder
from ...errors import GpuJobsError
from . import private
from .lean import payload_needs_torch
from .records import agent_log
from .zygote import start_zygote


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gpujobs-agent")
    ap.add_argument("--home", required=True)
    ap.add_argument("--daemonize", action="store_true")
    ap.add_argument("--for-job", help="the job whose submit starts this agent: when its call "
                    "needs no torch (.lean) the torch zygote starts with the first job that does, "
                    "when it needs torch the lean zygote with the first lean gang")
    args = ap.parse_args(argv)
    home = Path(args.home)
    try:
        private.make_home(home)  # ours, writable by no one else (else nothing is started)
    except (GpuJobsError, OSError) as exc:
        print(f"gpujobs agent: {exc}", file=sys.stderr)
        return 1
    if args.daemonize and os.fork() > 0:
        os._exit(0)  # the client reaps this parent at once; the agent is re-parented
    if args.daemonize:
        os.setsid()
    lock = private.open_private(home / "agent.lock", "a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0  # another agent holds this home
    agent_log(f"agent started for {home}")
    err = home / "agent.error"
    try:
        err.unlink()
    except OSError:
        pass
    # The zygotes' imports overlap the agent's start. When the job that starts the agent tells
    # which one it needs, only that one starts now, the other with the first job that needs it:
    # torch's import takes seconds of CPU, and the lean one's would compete with it.
    first = _first_job_needs_torch(home, args.for_job) if args.for_job else None
    zygote, started = (None, 0.0) if first is False else start_zygote(home, agent_log)
    lean = (None, 0.0) if first is True else start_zygote(home, agent_log, lean=True)
    try:
        from .agent import Agent
        agent = Agent(home)
    except Exception as exc:  # noqa: BLE001 - the client reads this and raises it
        for z in (zygote, lean[0]):
            if z is not None:
                z.close()  # it has no ranks: it exits
        name = type(exc).__name__ if isinstance(exc, GpuJobsError) else "StateError"
        text = str(exc) or f"{type(exc).__name__} while starting the agent"
        agent_log(f"cannot start: {name}: {text}")
        try:
            private.write_private(err, f"{name}\n{text}")
        except OSError:  # a full disk: the client says so itself (never an empty error)
            pass
        return 1
    agent.use_zygote(*lean, lean=True)
    agent.use_zygote(zygote, started)
    agent.torch_zygote_deferred = first is False
    agent.lean_zygote_deferred = first is True
    agent.run()
    return 0


def _first_job_needs_torch(home: Path, job_id: str) -> bool | None:
    """Whether job ``job_id``'s call may need torch (:func:`.lean.payload_needs_torch`); None
    when that cannot be told: no such job folder in this home, or no call (a command job)."""
    try:
        folder = private.job_folder(home, job_id, None)
    except (GpuJobsError, OSError, ValueError):
        return None
    payload = JobFolder(folder).payload_file
    try:
        if not payload.stat().st_size:
            return None
    except OSError:
        return None
    return payload_needs_torch(payload)


if __name__ == "__main__":
    sys.exit(main())
