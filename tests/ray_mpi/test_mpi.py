"""MPI jobs: real mpirun (Open MPI) running mpi4py ranks, through the public API and the launcher."""
from __future__ import annotations

import os
import time

import pytest

import gpujobs
from gpujobs.backends.local.launch_mpi import MpiGang, job_processes
from gpujobs.errors import JobCancelledError

from .helpers import alive, described, make_job_dir, outcomes, wait_for


class RankError(RuntimeError):
    pass


def allreduce(scale):
    from mpi4py import MPI
    ctx = gpujobs.context()
    print(f"hello from rank {ctx.rank} of {ctx.world_size}", flush=True)
    total = MPI.COMM_WORLD.allreduce(ctx.rank + 1)
    return {"sum": total * scale, "rank": ctx.rank, "world": ctx.world_size, "device": ctx.device,
            "mpi_rank": MPI.COMM_WORLD.Get_rank(), "checkpoint_dir": str(ctx.checkpoint_dir),
            "framework": ctx.framework}


def fail_in_rank_one():
    from mpi4py import MPI
    if MPI.COMM_WORLD.Get_rank() == 1:
        raise RankError("rank 1 gave up")
    time.sleep(60)  # must be torn down by mpirun, not waited for


def wait_for_stop(marker_dir):
    ctx = gpujobs.context()
    print(f"rank {ctx.rank} running", flush=True)
    while not ctx.should_stop():
        time.sleep(0.05)
    with open(os.path.join(marker_dir, f"stopped-{ctx.rank}"), "w") as fh:
        fh.write("stop announced")
    time.sleep(120)  # ignores the announcement: the launcher must kill after the grace period


@pytest.mark.slow
def test_mpi_job_returns_rank0_value_context_and_rank_logs(no_leftovers):
    job = gpujobs.job(allreduce, 10).mpi(ranks=3, gpus_per_rank=0).submit()
    value = job.result(timeout=60)
    assert value["sum"] == 10 * (1 + 2 + 3)
    assert (value["rank"], value["world"], value["mpi_rank"], value["device"]) == (0, 3, 0, "cpu")
    assert value["framework"] == "mpi"
    assert value["checkpoint_dir"].endswith(os.path.join(job.id, "checkpoint"))
    st = job.status()
    assert st.phase == "succeeded" and st.exit_code == 0 and st.gang_size == 3
    for rank in range(3):
        assert f"hello from rank {rank} of 3" in job.logs(rank=rank)
        assert all(line.startswith(f"[rank {rank}]") for line in job.logs(rank=rank).splitlines())
    no_leftovers(job.id)


@pytest.mark.slow
def test_mpi_return_all_and_ranks_per_node():
    job = gpujobs.job(allreduce, 1).mpi(ranks=4, gpus_per_rank=0, ranks_per_node=2).return_all().submit()
    values = job.result(timeout=60)
    assert [v["rank"] for v in values] == [0, 1, 2, 3]
    assert {v["sum"] for v in values} == {10} and {v["world"] for v in values} == {4}


@pytest.mark.slow
def test_mpi_rank_exception_comes_back_with_type_and_rank(no_leftovers):
    start = time.monotonic()
    job = gpujobs.job(fail_in_rank_one).mpi(ranks=3, gpus_per_rank=0).submit()
    with pytest.raises(RankError, match="rank 1 gave up") as info:
        job.result(timeout=60)
    assert info.value.rank == 1
    assert "fail_in_rank_one" in info.value.remote_traceback
    assert time.monotonic() - start < 40  # the sleeping ranks were aborted
    st = job.status()
    assert st.phase == "failed" and "rank 1" in st.message and st.exit_code == 1
    no_leftovers(job.id)


@pytest.mark.slow
def test_mpi_cancel_announces_then_kills_every_rank(tmp_path, no_leftovers):
    markers = tmp_path / "markers"
    markers.mkdir()
    job = gpujobs.job(wait_for_stop, str(markers)).mpi(ranks=3, gpus_per_rank=0).submit()
    wait_for(lambda: all("running" in job.logs(rank=r) for r in range(3)), timeout=30)
    backend = job.backend
    pids = backend.pids(job.id)
    assert len(pids) >= 4  # mpirun and its three ranks
    assert {p.pid for p in job_processes(job.id)} >= set(pids)
    job.cancel()
    with pytest.raises(JobCancelledError):
        job.result(timeout=10)
    # The ranks hear SIGTERM (should_stop), ignore it, and are killed after the grace period.
    wait_for(lambda: alive(pids) == [], timeout=20)
    assert sorted(p.name for p in markers.iterdir()) == ["stopped-0", "stopped-1", "stopped-2"]
    no_leftovers(job.id, within=1.0)


@pytest.mark.slow
def test_mpi_launcher_directly_failed_rank_and_terminate(tmp_path):
    """The launcher alone: a killed rank is reported as such; terminate() leaves nothing."""
    def killed_rank():
        import signal
        from mpi4py import MPI
        if MPI.COMM_WORLD.Get_rank() == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)

    spec = gpujobs.job(killed_rank).mpi(ranks=3, gpus_per_rank=0).spec()
    jd, key = make_job_dir(tmp_path / "job", spec)
    gang = MpiGang(job_id="mpi-direct-1", job_dir=jd.root, framework="mpi", world_size=3,
                   key_file=jd.key_file)
    gang.start()
    pids = wait_for(lambda: len(gang.pids) >= 4 and gang.pids, timeout=20)
    result = gang.wait(timeout=40)
    assert result is not None and not result.ok
    assert result.failed_rank == 2 and "SIGKILL" in result.message, result
    assert alive(pids) == [] and job_processes("mpi-direct-1") == [], (described(pids), job_processes("mpi-direct-1"))
    assert outcomes(jd, key) == {}
    assert (jd.log_dir / "mpirun.txt").exists()
    assert sorted(p.name for p in jd.log_dir.glob("rank-*.log")) == ["rank-0.log", "rank-1.log",
                                                                       "rank-2.log"]

    # terminate() of a running gang: mpirun and all ranks go, the exit says killed.
    spec = gpujobs.job(wait_for_stop, str(tmp_path)).mpi(ranks=2, gpus_per_rank=0).spec()
    jd, key = make_job_dir(tmp_path / "job2", spec)
    gang = MpiGang(job_id="mpi-direct-2", job_dir=jd.root, framework="mpi", world_size=2,
                   key_file=jd.key_file)
    gang.start()
    wait_for(lambda: all((jd.log_dir / f"rank-{r}.log").exists() and "running" in
                         (jd.log_dir / f"rank-{r}.log").read_text() for r in range(2)), timeout=20)
    pids = gang.pids
    gang.terminate(grace=0.5)
    result = gang.poll()
    assert result is not None and not result.ok and result.returncodes[result.failed_rank] != 0
    assert sorted(p.name for p in tmp_path.glob("stopped-*")) == ["stopped-0", "stopped-1"]
    assert alive(pids) == [] and job_processes("mpi-direct-2") == [], (described(pids), job_processes("mpi-direct-2"))


def report_devices():
    ctx = gpujobs.context()
    return {"rank": ctx.rank, "device": ctx.device, "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}


@pytest.mark.slow
def test_mpi_ranks_get_their_own_gpu_slots(tmp_path):
    """With GPU slots, rank r sees only its group (set before MPI_Init) and uses cuda:0."""
    spec = gpujobs.job(report_devices).mpi(ranks=2, gpus_per_rank=2).return_all().spec()
    jd, key = make_job_dir(tmp_path / "job", spec)
    gang = MpiGang(job_id="mpi-gpus-1", job_dir=jd.root, framework="mpi", world_size=2,
                   key_file=jd.key_file, devices=[[0, 1], [2, 3]], return_all=True)
    gang.start()
    result = gang.wait(timeout=40)
    assert result is not None and result.ok, (jd.log_dir / "rank-0.log").read_text()
    got = {r: o.value for r, o in outcomes(jd, key).items()}
    assert got == {0: {"rank": 0, "device": "cuda:0", "visible": "0,1"},
                   1: {"rank": 1, "device": "cuda:0", "visible": "2,3"}}
