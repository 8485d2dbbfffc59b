"""LocalBackend (first version): runs each gang from a supervisor thread in this process.

Queues, quota, preemption and a detached agent arrive with the local scheduler;
this module keeps the same interface so the handle never notices.
"""
from __future__ import annotations

import getpass
import json
import secrets
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from ...config import gpujobs_home
from ...devices import cpu_notice, local_gpu_slots
from ...errors import QuotaError, SpecError
from ...spec import JobSpec
from ...status import JobEvent, JobStatus
from .gang import Gang, describe_returncode
from .jobdir import JobDir


class LocalBackend:
    name = "local"

    def __init__(self, home: Path | None = None):
        self.home = Path(home) if home else gpujobs_home()
        self._records: dict[str, JobStatus] = {}
        self._gangs: dict[str, Gang] = {}
        self._cond = threading.Condition()
        self._subs: dict[str, list[Callable[[JobStatus], Any]]] = {}

    # ----------------------------------------------------------------- helpers
    def _dir(self, job_id: str) -> JobDir:
        return JobDir(self.home / "jobs" / job_id)

    def _update(self, job_id: str, event: str | None = None, msg: str = "", **changes: Any) -> None:
        with self._cond:
            st = self._records[job_id]
            if event:
                changes["events"] = st.events + (JobEvent(time.time(), event, msg),)
            st = st.with_(**changes)
            self._records[job_id] = st
            (self._dir(job_id).root / "status.json").write_text(json.dumps(st.to_dict()))
            self._cond.notify_all()
            subs = list(self._subs.get(job_id, ()))
        for cb in subs:
            try:
                cb(st)
            except Exception:
                pass

    # -------------------------------------------------------------------- API
    def submit(self, spec: JobSpec) -> str:
        if spec.queue != "default":
            raise SpecError("queue", f"unknown local queue {spec.queue!r}; known: default",
                            "use queue 'default' or configure more queues")
        slots, real = local_gpu_slots()
        need = max(spec.total_gpus, spec.world_size if not real else 0)
        if need > slots:
            raise QuotaError(f"the job needs {need} GPU slots but this machine has {slots}; "
                             f"it could never start (set GPUJOBS_LOCAL_GPUS or ask for fewer)")
        if spec.framework == "mpi":  # [ray-mpi] preflight: name what to install, create nothing
            from .launch_mpi import check_mpi_available
            check_mpi_available()
        elif spec.framework == "ray":
            from .launch_ray import check_ray_available
            check_ray_available()
        if not real:
            cpu_notice()
        job_id = f"{spec.display_name}-{secrets.token_hex(3)}"
        jd = self._dir(job_id)
        jd.create(spec.to_dict(), spec.payload())
        now = time.time()
        self._records[job_id] = JobStatus(
            job_id=job_id, phase="queued", name=spec.display_name, queue=spec.queue,
            priority=spec.priority, user=getpass.getuser(), gpus=spec.total_gpus,
            gang_size=spec.world_size, submitted_at=now, cpu_ranks=not real, queue_position=1,
            extra={"return_all": spec.return_all})
        self._update(job_id, "submitted")
        devices = [[r] for r in range(spec.world_size)] if real and spec.gpus_per_proc else None
        common = dict(job_id=job_id, job_dir=jd.root, framework=spec.framework,
                      world_size=spec.world_size, key_file=jd.key_file, devices=devices,
                      env=spec.env_dict(), return_all=spec.return_all)
        if spec.framework == "mpi":  # [ray-mpi] until launchers.make_gang exists
            from .launch_mpi import mpi_gang_for_spec
            gang = mpi_gang_for_spec(spec, **common)
        elif spec.framework == "ray":
            from .launch_ray import ray_gang_for_spec
            gang = ray_gang_for_spec(spec, **common)
        else:
            gang = Gang(**common)
        self._gangs[job_id] = gang
        threading.Thread(target=self._supervise, args=(job_id, gang), daemon=True,
                         name=f"gpujobs-{job_id}").start()
        return job_id

    def _supervise(self, job_id: str, gang: Gang) -> None:
        self._update(job_id, "admitted", phase="admitted", queue_position=None)
        try:
            gang.start()
        except Exception as exc:
            self._update(job_id, "finished", f"failed to start: {exc}", phase="failed",
                         message=f"failed to start: {exc}", finished_at=time.time())
            gang.terminate(0)
            return
        self._update(job_id, "started", phase="running", started_at=time.time(),
                     gang_ready=gang.world_size)
        result = gang.wait()
        st = self._records[job_id]
        if st.phase == "cancelled":
            return
        if result.ok:
            self._update(job_id, "finished", "succeeded", phase="succeeded", exit_code=0,
                         finished_at=time.time())
        else:
            code = result.returncodes.get(result.failed_rank, 1)
            self._update(job_id, "finished", result.message, phase="failed", exit_code=code,
                         message=result.message, reason="rank-failed", finished_at=time.time())

    def status(self, job_id: str) -> JobStatus:
        if job_id in self._records:
            return self._records[job_id]
        path = self._dir(job_id).root / "status.json"
        if not path.exists():
            raise SpecError("job_id", f"no local job {job_id!r}", "list jobs with gpujobs.jobs()")
        d = json.loads(path.read_text())
        d.pop("terminal", None)
        d["events"] = tuple(JobEvent(**e) for e in d["events"])
        d["metrics"] = ()
        return JobStatus(**d)

    def wait(self, job_id: str, timeout: float | None = None) -> JobStatus:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                st = self.status(job_id)
                if st.terminal:
                    return st
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return st
                self._cond.wait(0.5 if left is None else min(left, 0.5))

    def outcomes(self, job_id: str) -> dict[int, bytes]:
        return self._dir(job_id).outcomes()

    def job_key(self, job_id: str) -> bytes:
        return self._dir(job_id).key()

    def logs(self, job_id: str, rank: int | None = None, follow: bool = False) -> Iterator[str]:
        yield from self._dir(job_id).read_logs(rank)

    def cancel(self, job_id: str) -> None:
        st = self.status(job_id)
        if st.terminal:
            return
        self._update(job_id, "cancelled", "cancelled by user", phase="cancelled",
                     message="cancelled by user", finished_at=time.time())
        gang = self._gangs.get(job_id)
        if gang is not None:
            gang.terminate(grace=3.0)

    def jobs(self, queue: str | None = None) -> list[JobStatus]:
        return [s for s in self._records.values() if queue is None or s.queue == queue]

    def subscribe(self, job_id: str, callback: Callable[[JobStatus], Any]) -> Callable[[], None]:
        self._subs.setdefault(job_id, []).append(callback)
        return lambda: self._subs.get(job_id, []).remove(callback)

    def render(self, spec: JobSpec, kind: str | None = None) -> list[dict]:
        raise SpecError("backend", "the local backend creates no Kubernetes objects",
                        "use builder.render(kind=...) (it renders for Kubernetes)")

    def pids(self, job_id: str) -> list[int]:
        gang = self._gangs.get(job_id)
        return gang.pids if gang else []
