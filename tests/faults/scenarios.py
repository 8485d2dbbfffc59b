"""Fault scenarios shared by tests/faults and benchmarks/fault_report.py.

Each scenario runs real jobs (real runner processes; Kubernetes ones through the fake
apiserver + simulated controllers of gpujobs_sim), injects faults, and returns a row::

    {"scenario", "faults_injected", "jobs", "jobs_lost", "results_lost", "transitions_lost",
     "seconds", "note"}

jobs_lost: a submitted job missing or duplicated; results_lost: result() not the value the
function returned (or the expected error); transitions_lost: a subscriber that never saw
the final phase, or saw the phase go backwards after it ended.
"""
from __future__ import annotations

import os
import signal
import socket
import time

from tests.support import MPI_IMAGE
from tests.support import wait_for as until  # noqa: F401
from pathlib import Path
from typing import Callable

import psutil

import gpujobs

TERMINAL = ("succeeded", "failed", "cancelled")


def row(name: str, faults: int, jobs: int, jobs_lost: int = 0, results_lost: int = 0,
        transitions_lost: int = 0, seconds: float = 0.0, note: str = "") -> dict:
    return {"scenario": name, "faults_injected": faults, "jobs": jobs, "jobs_lost": jobs_lost,
            "results_lost": results_lost, "transitions_lost": transitions_lost,
            "seconds": round(seconds, 2), "note": note}


def transitions_lost(phases: list[str], final: str) -> int:
    """1 if the final phase was never delivered, +1 per phase seen after a terminal one."""
    lost = 0 if final in phases else 1
    if final in phases:
        after = phases[phases.index(final) + 1:]
        lost += sum(1 for p in after if p != final)
    return lost


def job_processes(job_id: str) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter():
        try:
            if p.pid != os.getpid() and p.status() != psutil.STATUS_ZOMBIE and \
                    p.environ().get("GPUJOBS_JOB_ID") == job_id:
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


# ----------------------------------------------------------------------------- functions
def double(x):
    import time as _t
    _t.sleep(0.3)
    return x * 2


def sleep_then(seconds, value):
    import time as _t
    _t.sleep(seconds)
    return value


def allreduce_sum():
    import torch
    import torch.distributed as dist
    import gpujobs as g
    t = torch.tensor([g.context().rank + 1.0])
    dist.all_reduce(t)
    return float(t.item())


# ----------------------------------------------------------------------------- Kubernetes
def _k8s(gpus: int = 4):
    from gpujobs.backends.kubernetes import KubernetesBackend
    from gpujobs_sim import SimCluster
    sim = SimCluster(gpus=gpus).start()
    be = KubernetesBackend(api_client=sim.api_client(), namespace="default", default_queue="q",
                           request_timeout=5.0)
    return sim, be


def _k8s_stop(sim, be) -> list[int]:
    be.state.stop_watches()
    return sim.stop()


def _k8s_jobs(sim, be, n: int, during: Callable[[], int]) -> dict:
    """Submit n one-rank MPIJobs, run ``during()`` (returns faults injected), check everything."""
    from gpujobs.handle import Job
    ids, phases = [], {}
    faults = 0
    for i in range(n):
        jid = be.submit(gpujobs.job(double, i).mpi(ranks=1, gpus_per_rank=1).image(MPI_IMAGE).queue("q").spec())
        ids.append(jid)
        phases[jid] = []
        be.subscribe(jid, lambda s, j=jid: phases[j].append(s.phase))
    faults += during()
    results_lost = 0
    for i, jid in enumerate(ids):
        try:
            if Job(jid, be).result(timeout=90) != i * 2:
                results_lost += 1
        except Exception:  # noqa: BLE001 - counted, not raised
            results_lost += 1
    time.sleep(0.5)  # let coalesced status flushes reach the subscribers
    names = {jid.split("/")[1] for jid in ids}
    jobs_in_store = [o["metadata"]["name"] for r, o in sim.store.all_objects()
                     if r.kind == "MPIJob"]
    jobs_lost = sum(1 for nm in names if jobs_in_store.count(nm) != 1)
    jobs_lost += len([nm for nm in jobs_in_store if nm not in names])  # duplicates/strays
    lost_t = sum(transitions_lost(phases[j], "succeeded") for j in ids)
    return {"faults": faults, "jobs": n, "jobs_lost": jobs_lost, "results_lost": results_lost,
            "transitions_lost": lost_t}


def _consumed(server, before: int) -> int:
    left = sum(f.count for f in server._faults)
    return before - left


def k8s_submit_bursts(n: int = 3) -> dict:
    """429 (Retry-After) and 5xx bursts on every create, and on preflight reads, during submit."""
    t0 = time.monotonic()
    sim, be = _k8s()
    try:
        srv = sim.server
        # bursts within the client's retry budget (4 attempts a call, Retry-After honoured)
        srv.inject(429, count=2, verb="create", retry_after=1)
        srv.inject(500, count=1, verb="create")
        srv.inject(503, count=2, verb="get")
        planned = 5
        r = _k8s_jobs(sim, be, n, lambda: 0)
        r["faults"] = _consumed(srv, planned)
        # a burst beyond the budget: a clean SubmitError, nothing left in the cluster or at home
        from gpujobs.errors import SubmitError
        before = sorted((k.kind, o["metadata"]["name"]) for k, o in sim.store.all_objects())
        srv.inject(500, count=8, verb="create")
        try:
            be.submit(gpujobs.job(double, 9).mpi(ranks=1, gpus_per_rank=1).image(MPI_IMAGE).queue("q").spec())
            r["jobs_lost"] += 1  # should not have succeeded
        except SubmitError:
            pass
        r["faults"] += _consumed(srv, 8)
        srv.clear_faults()
        after = sorted((k.kind, o["metadata"]["name"]) for k, o in sim.store.all_objects())
        records = [p for p in (be.home / "k8s-jobs").rglob("*") if p.is_file()]  # one per job
        stray = [o for o in after if o not in before]
        r["jobs_lost"] += len(stray) + abs(len(records) - n)
    finally:
        _k8s_stop(sim, be)
    return row("k8s: 429/5xx bursts during submit", r["faults"], r["jobs"], r["jobs_lost"],
               r["results_lost"], r["transitions_lost"], time.monotonic() - t0,
               note="then 8 x 500: clean SubmitError, nothing left")


def k8s_status_faults(n: int = 3) -> dict:
    """Dropped watches, 410 Gone (compaction), 429/500 on watch and list while jobs run."""
    t0 = time.monotonic()
    sim, be = _k8s()
    try:
        srv = sim.server

        def during() -> int:
            injected = 0
            for _ in range(2):
                time.sleep(0.3)
                srv.drop_watches()
                injected += 1
            srv.compact()
            srv.drop_watches()  # resume from a compacted resourceVersion: 410 Gone, relist
            injected += 1
            srv.inject_watch_gone(count=2)
            srv.inject(429, count=3, verb="watch", retry_after=1)
            srv.inject(500, count=3, verb="list")
            srv.drop_watches()
            return injected
        planned = 8
        r = _k8s_jobs(sim, be, n, during)
        r["faults"] += _consumed(srv, planned)
    finally:
        _k8s_stop(sim, be)
    return row("k8s: dropped watches, 410 Gone, 429/500 while following status", r["faults"],
               r["jobs"], r["jobs_lost"], r["results_lost"], r["transitions_lost"],
               time.monotonic() - t0)


def k8s_log_read_faults(n: int = 2) -> dict:
    """500s on the pod-log reads that carry the results."""
    t0 = time.monotonic()
    sim, be = _k8s()
    try:
        srv = sim.server
        planned = 0

        def during() -> int:
            nonlocal planned
            # wait until every job ended, then break the next log reads
            until(lambda: all(s.phase == "succeeded" for s in be.jobs()), 90)
            srv.inject(500, count=2, path=r"/log$")
            planned = 2
            return 0
        r = _k8s_jobs(sim, be, n, during)
        r["faults"] = _consumed(srv, planned)
    finally:
        _k8s_stop(sim, be)
    return row("k8s: 500 on pod-log reads (results channel)", r["faults"], r["jobs"],
               r["jobs_lost"], r["results_lost"], r["transitions_lost"], time.monotonic() - t0)


# ----------------------------------------------------------------------------- local
def _rank_pid(job_id: str, rank: int, timeout: float = 60.0) -> int:
    """The pid of ``rank``'s process (env GPUJOBS_JOB_ID and RANK; not one of its children)."""
    def find():
        cands = {}
        for p in job_processes(job_id):
            try:
                if p.environ().get("RANK") == str(rank):
                    cands[p.pid] = p
            except psutil.Error:
                continue
        tops = [pid for pid, p in cands.items() if p.ppid() not in cands]
        return tops[0] if tops else None
    return until(find, timeout, 0.1)


def local_rank_oom_kill() -> dict:
    """SIGKILL one rank (what the OOM killer does): failed 'killed by SIGKILL', JobFailedError."""
    from gpujobs.errors import JobFailedError
    t0 = time.monotonic()
    job = gpujobs.job(sleep_then, 60, "never").ddp(gpus_per_node=0, procs_per_node=2).submit()
    phases: list[str] = []
    job.subscribe(lambda s: phases.append(s.phase))
    until(lambda: job.status().phase == "running", 90)
    pids = until(lambda: len(job.backend.pids(job.id)) == 2 and job.backend.pids(job.id), 30)
    os.kill(pids[1], signal.SIGKILL)  # the agent's pid list, in rank order
    st = job.wait(timeout=60)
    results_lost = 0
    try:
        job.result()
        results_lost = 1
    except JobFailedError as exc:
        if "SIGKILL" not in str(exc):
            results_lost = 1
    ok = st.phase == "failed" and "killed by SIGKILL" in (st.message or "")
    until(lambda: not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                          for p in pids), 15)
    time.sleep(0.3)
    lost_t = 0 if ok else 1
    lost_t += transitions_lost(phases, "failed") if phases else 0
    return row("local: a rank SIGKILLed (OOM killer)", 1, 1, 0, results_lost, lost_t,
               time.monotonic() - t0, note=st.message or "")


def local_rendezvous_port_taken() -> dict:
    """MASTER_PORT names a port another process holds: the launcher still starts the gang."""
    t0 = time.monotonic()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        job = (gpujobs.job(allreduce_sum).ddp(gpus_per_node=0, procs_per_node=2)
               .env(MASTER_PORT=str(port), MASTER_ADDR="127.0.0.1").submit())
        try:
            value = job.result(timeout=120)
        except Exception as exc:  # noqa: BLE001
            value = exc
    return row("local: rendezvous port already taken", 1, 1, 0, 0 if value == 3.0 else 1, 0,
               time.monotonic() - t0, note=repr(value)[:80])


def local_agent_killed(home: Path) -> dict:
    """SIGKILL the agent mid-job; the next call re-adopts the job or marks it lost, never silent."""
    from gpujobs.backends import get_backend
    from gpujobs.backends.local import agent_pids
    t0 = time.monotonic()
    job = gpujobs.job(sleep_then, 3, "survived").ddp(gpus_per_node=0, procs_per_node=1).submit()
    until(lambda: job.status().phase == "running", 90)
    pids = agent_pids(home)
    os.kill(pids["agent"], signal.SIGKILL)
    psutil.Process(pids["agent"]).wait(10) if psutil.pid_exists(pids["agent"]) else None
    get_backend.cache_clear()
    again = gpujobs.attach(job.id)  # a new client: restarts the agent on demand
    st = again.wait(timeout=60)
    results_lost = 0
    if st.phase == "succeeded":
        results_lost = 0 if again.result() == "survived" else 1
    elif not (st.phase == "failed" and st.reason == "lost" and st.message):
        results_lost = 1  # neither re-adopted nor marked lost with a reason
    jobs_lost = 0 if any(s.job_id == job.id for s in get_backend("local").jobs()) else 1
    return row("local: agent SIGKILLed mid-job", 1, 1, jobs_lost, results_lost,
               0 if st.terminal else 1, time.monotonic() - t0, note=f"{st.phase}: {st.message}")


def zygote_children(home: Path) -> list[int]:
    """Rank processes forked by this home's zygote (their /proc environ is the zygote's)."""
    from gpujobs.backends.local import agent_pids
    z = agent_pids(home).get("zygote")
    try:
        return [c.pid for c in psutil.Process(z).children(recursive=True)] if z else []
    except psutil.NoSuchProcess:
        return []


def fill(path: Path) -> Path:
    """Write zeros into ``path``'s file system until it is full."""
    filler = path / "filler"
    with open(filler, "wb") as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError:
            pass
        try:
            os.fsync(fh.fileno())
        except OSError:
            pass
    return filler


def local_full_disk(home: Path) -> dict:
    """GPUJOBS_HOME on a tiny tmpfs filled up: submit fails cleanly (nothing half-made);
    running jobs keep their status; after space is freed the next submit works."""
    from gpujobs.backends import get_backend
    from gpujobs.errors import GpuJobsError
    t0 = time.monotonic()
    first = gpujobs.job(double, 1).ddp(gpus_per_node=0, procs_per_node=1).submit()
    assert first.result(timeout=120) == 2
    jobs_before = sorted(p.name for p in (home / "jobs").iterdir())
    filler = fill(home)
    error = None
    try:
        get_backend("local").submit(gpujobs.job(double, 2).ddp(gpus_per_node=0, procs_per_node=1).spec())
    except GpuJobsError as exc:
        error = exc
    except OSError as exc:  # a raw OSError is a bug: counted as a lost job below
        error = exc
    half_made = sorted(p.name for p in (home / "jobs").iterdir() if p.name not in jobs_before)
    procs = zygote_children(home)
    jobs_lost = len(half_made) + len(procs) + (0 if isinstance(error, GpuJobsError) else 1)
    filler.unlink()
    second = gpujobs.job(double, 3).ddp(gpus_per_node=0, procs_per_node=1).submit()
    results_lost = 0 if second.result(timeout=120) == 6 else 1
    results_lost += 0 if gpujobs.attach(first.id).result() == 2 else 1
    return row("local: state disk full (tmpfs)", 1, 3, jobs_lost, results_lost, 0,
               time.monotonic() - t0, note=f"{type(error).__name__}: {str(error)[:200]}")
