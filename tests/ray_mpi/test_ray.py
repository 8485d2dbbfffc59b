"""Ray jobs: fn is the driver of a private local Ray instance (real ray.init), torn down after.

Ray starts in ~5-10 s here, so the cases share as few jobs as possible.
"""
from __future__ import annotations

import os
import time

import pytest

import gpujobs
from gpujobs.backends.local.launch_mpi import job_processes
from gpujobs.backends.local.launch_ray import ray_temp_dir
from gpujobs.errors import JobCancelledError

from .helpers import alive, cmdline_mentions, wait_for

pytestmark = pytest.mark.slow


class TaskError(ValueError):
    pass


def square_on_gpus(n):
    import ray
    ray.init()  # as a RayJob entrypoint would: joins the job's cluster, no second instance
    ctx = gpujobs.context()

    @ray.remote(num_gpus=1)
    def square(i):
        return i * i, os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get("GPUJOBS_JOB_ID")

    print("driver started", flush=True)
    results = ray.get([square.remote(i) for i in range(n)])
    res = ray.cluster_resources()
    return {"squares": sorted(r[0] for r in results), "gpu_ids": sorted({r[1] for r in results}),
            "job_ids": {r[2] for r in results}, "gpus": res.get("GPU"), "cpus": res.get("CPU"),
            "rank": ctx.rank, "world": ctx.world_size, "device": ctx.device,
            "framework": ctx.framework, "checkpoint_dir": str(ctx.checkpoint_dir),
            "address": ray.get_runtime_context().gcs_address}


def failing_task():
    import ray

    @ray.remote
    def bad():
        raise TaskError("task blew up")

    return ray.get(bad.remote())


def work_until_stopped(marker):
    import ray
    ctx = gpujobs.context()

    @ray.remote
    def one():
        return 1

    assert ray.get(one.remote()) == 1
    print("ray ready", flush=True)
    while not ctx.should_stop():
        time.sleep(0.05)
    with open(marker, "w") as fh:
        fh.write("stop announced")
    time.sleep(120)  # the launcher must kill the driver and all of Ray after the grace period


def test_ray_job_runs_tasks_on_its_own_cluster_and_leaves_nothing(no_leftovers):
    job = gpujobs.job(square_on_gpus, 6).ray(workers=2, gpus_per_worker=1, cpus_per_worker=2).submit()
    seen: set[int] = set()

    def watch():
        seen.update(job.backend.pids(job.id))
        return job.done()
    wait_for(watch, timeout=120, every=0.3)
    value = job.result(timeout=5)
    assert value["squares"] == [i * i for i in range(6)]
    assert value["gpus"] == 2.0 and value["cpus"] == 4.0  # workers x per-worker resources
    assert value["gpu_ids"] == ["0", "1"]  # Ray handed out its (logical) GPUs
    assert value["job_ids"] == {job.id}
    assert (value["rank"], value["world"], value["device"], value["framework"]) == (0, 2, "cpu", "ray")
    assert value["checkpoint_dir"].endswith(os.path.join(job.id, "checkpoint"))
    assert value["address"].startswith("127.0.0.1:")  # a private instance on loopback
    assert job.status().phase == "succeeded"
    assert "driver started" in job.logs(rank=0)
    assert len(seen) >= 3  # the driver and Ray's processes under it were running
    assert alive(seen) == []
    job_dir = gpujobs.config.gpujobs_home() / "jobs" / job.id
    temp = ray_temp_dir(job_dir)
    assert not temp.exists() and not (job_dir / "ray").exists()
    assert cmdline_mentions(str(temp)) == []
    no_leftovers(job.id, within=1.0)


def test_ray_remote_exception_then_cancel(tmp_path, no_leftovers):
    job = gpujobs.job(failing_task).ray(workers=1, gpus_per_worker=0).submit()
    with pytest.raises(TaskError, match="task blew up") as info:
        job.result(timeout=120)
    assert info.value.rank == 0
    assert job.status().phase == "failed" and "Ray driver exit code 1" in job.status().message
    no_leftovers(job.id, within=2.0)

    # Cancel: the driver hears SIGTERM (should_stop), ignores it, and after the grace period the
    # agent's launcher kills the driver and all of Ray, found by pids, process group and job id.
    marker = tmp_path / "stopped"
    job = gpujobs.job(work_until_stopped, str(marker)).ray(workers=1, gpus_per_worker=0).submit()
    wait_for(lambda: "ray ready" in job.logs(rank=0), timeout=120)
    pids = job.backend.pids(job.id)
    by_env = {p.pid for p in job_processes(job.id)}
    # Ray's agents retitle themselves (their environ no longer shows the job id) but stay in
    # the driver's process group; workers take groups of their own but keep the job id.
    assert len(pids) >= 3 and pids[0] in by_env and len(by_env) >= 3
    everything = sorted(set(pids) | by_env)
    job_dir = gpujobs.config.gpujobs_home() / "jobs" / job.id
    assert ray_temp_dir(job_dir).is_dir()
    job.cancel()
    with pytest.raises(JobCancelledError):
        job.result(timeout=10)
    wait_for(lambda: alive(everything) == [], timeout=30)
    assert marker.read_text() == "stop announced"
    wait_for(lambda: not ray_temp_dir(job_dir).exists(), timeout=10)  # removed by path
    assert job_processes(job.id) == []
    no_leftovers(job.id, within=1.0)


def ray_up_then_wait(seconds):
    time.sleep(seconds)
    return "done"


def test_status_message_says_ray_is_starting_until_fn_runs(monkeypatch, no_leftovers):
    """Was: only `running` (no message) for the ~5-12 s ray.init takes; now the driver's phase
    ("starting Ray head (C CPUs, G GPUs)") is the status message until Ray is up, then cleared."""
    monkeypatch.setenv("GPUJOBS_METRICS_INTERVAL", "0.3")  # the agent reads the phase each round
    job = gpujobs.job(ray_up_then_wait, 4).ray(workers=2, gpus_per_worker=0, cpus_per_worker=1).submit()
    seen: list[tuple[str, str]] = []

    def watch():
        st = job.status()
        if not seen or seen[-1] != (st.phase, st.message):
            seen.append((st.phase, st.message))
        return st.terminal
    wait_for(watch, timeout=180, every=0.1)
    assert job.result(timeout=5) == "done"
    starting = [i for i, (ph, msg) in enumerate(seen) if ph == "running" and msg == "starting Ray head (2 CPUs, 0 GPUs)"]
    assert starting, seen
    assert ("running", "") in seen[starting[0] + 1:], seen  # cleared once fn runs, before the end
    assert "starting" not in job.status().extra
    no_leftovers(job.id)
