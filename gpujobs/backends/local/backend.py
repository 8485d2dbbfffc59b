"""LocalBackend: the Backend protocol as a client of the local agent.

Submitting writes the job directory (payload, key, logs, results) under GPUJOBS_HOME and
hands the spec to the agent (started on demand); results and logs are read straight from
the job directory; status, waits and events come from the agent (or, for jobs it no longer
holds, from the SQLite state it keeps).
"""
from __future__ import annotations

import getpass
import os
import secrets
import shutil
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from ...config import gpujobs_home, settings
from ...devices import cpu_notice
from ...errors import Fix, JobNotFound, BackendUnavailable, GpuJobsError, SpecError
from ...spec import JobSpec
from ...status import JobStatus
from ..base import (Backend, ChecksQueues, HasMetricsHistory, HasProgressHistory, HasStacks,
                    Plans)
from . import protocol
from .client import AgentClient, check_home
from .gang import save_submitter_env
from .jobdir import JobDir
from .private import check_home as check_state
from .queue_config import admission_config
from .store import Store, status_from_dict


#: written by ``gpujobs agent stop``: reads (views, status, waits) do not start the agent
#: again while it exists; the next submit removes it
STOPPED_MARKER = "agent.stopped"
HELD_MESSAGE = ("the local agent was stopped (gpujobs agent stop); this job waits, and the next "
                "submit starts the agent again")


class LocalBackend(Backend, Plans, ChecksQueues, HasStacks, HasMetricsHistory, HasProgressHistory):
    """The ``local`` backend (its capabilities are declared as bases: gpujobs.backends.base)."""

    name = "local"

    def __init__(self, home: Path | None = None):
        self.home = Path(home) if home else gpujobs_home()
        self.client = AgentClient(self.home)

    def held(self) -> bool:
        """True after ``gpujobs agent stop`` until the next submit: reads use the saved state
        and do not start an agent (open notebook views would otherwise undo the stop)."""
        return (self.home / STOPPED_MARKER).exists() and not self.client.running()

    def _held_status(self, st: JobStatus) -> JobStatus:
        import dataclasses
        return st if st.terminal else dataclasses.replace(st, message=HELD_MESSAGE)

    def _dir(self, job_id: str) -> JobDir:
        check_state(self.home)  # keys and results come from here: no one else may write it
        return JobDir(self.home / "jobs" / job_id)

    # ------------------------------------------------------------------ submit
    def submit(self, spec: JobSpec) -> str:
        check_home(self.home)
        admission_config(slots=1 << 30)  # config errors here, as SpecError, not in the agent
        if spec.queue is not None:
            self.check_queue(spec.queue, submitting=True)
        from .launchers import preflight
        preflight(spec.framework)  # e.g. mpirun / mpi4py / ray missing: say what to install
        job_id = f"{spec.display_name}-{secrets.token_hex(3)}"
        jd = self._dir(job_id)
        jd.create(spec.to_dict(), spec.payload())
        try:
            (self.home / STOPPED_MARKER).unlink(missing_ok=True)  # a submit starts the agent
            save_submitter_env(jd.root)
            reply = self.client.request({
                "op": "submit", "id": job_id, "spec": spec.to_dict(), "name": spec.display_name,
                "job_dir": str(jd.root), "cwd": spec.working_dir or os.getcwd(),
                "user": getpass.getuser()})
        except BaseException:
            shutil.rmtree(jd.root, ignore_errors=True)  # nothing half-created
            raise
        if reply.get("cpu_ranks") and spec.gpus_per_proc > 0:  # a 0-GPU job asked for none
            cpu_notice(spec.framework)
        return reply["id"]

    # ------------------------------------------------------------------ status
    def _stored(self, job_id: str) -> JobStatus | None:
        db = self.home / "state.db"
        if not db.exists():
            return None
        store = Store(db, readonly=True)
        try:
            return store.status(job_id)
        finally:
            store.close()

    def _ask_running(self, msg: dict, timeout: float | None = 60.0) -> JobStatus | None:
        """The running agent's answer to a status-returning request, in one connection; None
        when no agent runs (none is started: finished jobs are read from the stored state)."""
        try:
            reply = self.client.request(msg, timeout=timeout, start=False, retries=0)
        except BackendUnavailable:
            return None
        return status_from_dict(reply["status"])

    def status(self, job_id: str) -> JobStatus:
        live = self._ask_running({"op": "status", "id": job_id})
        if live is not None:
            return live
        st = self._stored(job_id)
        if st is None:
            raise JobNotFound("job_id", f"no local job {job_id!r}", Fix.run("jobs", text="list jobs with {}"))
        if st.terminal:
            return st  # no need to start an agent to read a finished job
        if self.held():
            return self._held_status(st)
        reply = self.client.request({"op": "status", "id": job_id})
        return status_from_dict(reply["status"])

    def wait(self, job_id: str, timeout: float | None = None) -> JobStatus:
        deadline = None if timeout is None else time.monotonic() + timeout
        chunk = 60.0 if timeout is None else min(timeout, 60.0)
        live = self._ask_running({"op": "wait", "id": job_id, "timeout": chunk}, timeout=chunk + 30)
        if live is not None and (live.terminal or (deadline is not None and time.monotonic() >= deadline)):
            return live
        if live is None:
            st = self._stored(job_id)
            if st is not None and st.terminal:
                return st  # no need to start an agent to read a finished job
        while True:
            if self.held():  # stopped on purpose: wait for the next submit, do not restart it
                st = self.status(job_id)
                if deadline is not None and time.monotonic() >= deadline:
                    return st
                time.sleep(0.5 if deadline is None else max(0.0, min(0.5, deadline - time.monotonic())))
                continue
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            chunk = 60.0 if left is None else min(left, 60.0)
            try:
                reply = self.client.request({"op": "wait", "id": job_id, "timeout": chunk},
                                            timeout=chunk + 30)
                st = status_from_dict(reply["status"])
            except BackendUnavailable:
                st = self.status(job_id)  # a new agent recovers (re-adopts or marks lost)
            if st.terminal or (deadline is not None and time.monotonic() >= deadline):
                return st

    def outcomes(self, job_id: str) -> dict[int, bytes]:
        return self._dir(job_id).outcomes()

    def job_key(self, job_id: str) -> bytes:
        return self._dir(job_id).key()

    def logs(self, job_id: str, rank: int | None = None, follow: bool = False) -> Iterator[str]:
        if not follow:
            yield from self._dir(job_id).read_logs(rank)
            return
        yield from self._follow(job_id, rank)

    def _follow(self, job_id: str, rank: int | None) -> Iterator[str]:
        offsets: dict[int, int] = {}
        while True:
            done = self.status(job_id).terminal
            for r, path in self._dir(job_id).log_files(rank):
                with open(path, "r", errors="replace") as fh:
                    fh.seek(offsets.get(r, 0))
                    for line in fh:
                        yield f"[rank {r}] {line if line.endswith(chr(10)) else line + chr(10)}"
                    offsets[r] = fh.tell()
            if done:
                return
            time.sleep(0.2)

    def cancel(self, job_id: str) -> None:
        self.client.request({"op": "cancel", "id": job_id})

    def check_queue(self, queue: str, namespace: str | None = None, *, submitting: bool = False) -> None:
        """SpecError for a queue the config does not define (and, listing, no job ever used);
        ``namespace``: a Kubernetes argument, unused here."""
        s = settings()
        known = s.local.queue_names()
        if queue in known:
            return
        if not submitting and (self.home / "state.db").exists():
            store = Store(self.home / "state.db", readonly=True)
            try:
                if store.all(queue):
                    return  # a queue since removed from the config still lists its jobs
            finally:
                store.close()
        import difflib
        close = difflib.get_close_matches(queue, known, n=1)
        raise SpecError("queue", f"unknown queue {queue!r}" + (f" (did you mean {close[0]!r}?)"
                                                              if close else "")
                        + f"; known: {', '.join(known)}",
                        f"use one of them, or define {queue!r} in a [[local.queues]] table of "
                        f"{s.path} (docs/configuration.md)")

    def jobs(self, queue: str | None = None) -> list[JobStatus]:
        if queue is not None:
            self.check_queue(queue)
        if not self.client.running():
            db = self.home / "state.db"
            if not db.exists():
                return []
            store = Store(db, readonly=True)
            try:
                rows = store.all(queue)
            finally:
                store.close()
            if self.held():
                return [self._held_status(st) for _, _, st, _, _ in rows][::-1]
            if not any(not st.terminal for _, _, st, _, _ in rows):
                return [st for _, _, st, _, _ in rows][::-1]
        reply = self.client.request({"op": "jobs", "queue": queue})
        return [status_from_dict(d) for d in reply["jobs"]]

    def plan(self, spec: JobSpec):
        """What submitting ``spec`` now would do (:class:`gpujobs.status.Plan`); nothing is
        submitted. Asks the agent (started on demand: it holds the queue)."""
        from ...status import Plan
        check_home(self.home)
        admission_config(slots=1 << 30)  # config errors here, as SpecError
        reply = self.client.request({"op": "plan", "spec": spec.to_dict(), "name": spec.display_name,
                                     "user": getpass.getuser()})
        d = dict(reply["plan"])
        d["preempts"] = tuple(d.get("preempts", ()))
        d["blocked_by"] = tuple(d.get("blocked_by", ()))
        if d.get("expected_start_range") is not None:
            d["expected_start_range"] = tuple(d["expected_start_range"])
        return Plan(**d)

    def subscribe(self, job_id: str, callback: Callable[[JobStatus], Any]) -> Callable[[], None]:
        """Status changes pushed by the agent (no polling); returns an unsubscribe function."""
        if self.held():  # views fall back to reading the saved state
            raise BackendUnavailable(HELD_MESSAGE)
        sock = self.client.connect(timeout=None)
        protocol.send(sock, {"op": "subscribe", "id": job_id})
        stop = threading.Event()

        def pump() -> None:
            reader = protocol.LineReader(sock)
            try:
                while not stop.is_set():
                    msg = reader.read()
                    if msg is None:
                        return
                    try:
                        callback(status_from_dict(msg["status"]))
                    except Exception:  # noqa: BLE001 - a broken callback must not kill the pump
                        pass
            except (OSError, ValueError):
                return
            finally:
                sock.close()

        threading.Thread(target=pump, daemon=True, name=f"gpujobs-sub-{job_id}").start()

        def unsubscribe() -> None:
            stop.set()
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return unsubscribe

    def metrics_history(self, job_id: str) -> list:
        """The job's kept metric samples (bounded; the agent writes them to metrics.log)."""
        from ...metrics import read_history
        return read_history(self._dir(job_id).metrics_log).samples()

    def pids(self, job_id: str) -> list[int]:
        try:
            return self.client.request({"op": "pids", "id": job_id}, start=False)["pids"]
        except GpuJobsError:
            return []

    # ---------------------------------------------------------- [progress]
    def progress_history(self, job_id: str) -> list[dict]:
        """Every ``ctx.progress`` report the job's ranks wrote (oldest first)."""
        from ...progress import ProgressTail
        tail = ProgressTail(self._dir(job_id).result_dir)
        tail.read()
        return sorted(tail.reports, key=lambda r: r["time"])

    def stacks(self, job_id: str, rank: int | None = None, timeout: float = 5.0) -> dict[int, str]:
        """{rank: Python stacks of all its threads} of a running job (faulthandler on SIGUSR2)."""
        from ...errors import JobStateError
        from .stacks import dump_stacks
        st = self.status(job_id)
        if st.phase != "running":
            raise JobStateError(f"job {job_id} is {st.phase}: only a running job has stacks "
                                f"(a failed rank's traceback is in job.logs() / job.exception())")
        return dump_stacks(self._dir(job_id).result_dir, None if rank is None else [rank], timeout)
