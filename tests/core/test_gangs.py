"""Real torch.distributed gangs (gloo on CPU) through the public API."""
from __future__ import annotations

import time

import pytest

import gpujobs
from gpujobs.errors import JobCancelledError, JobFailedError

pytestmark = pytest.mark.slow


def allreduce_ranks(scale):
    import torch
    import torch.distributed as dist
    ctx = gpujobs.context()
    t = torch.tensor([float(ctx.rank)])
    dist.all_reduce(t)
    return {"sum": t.item() * scale, "world": ctx.world_size, "rank": ctx.rank,
            "device": ctx.device}


class RankFailure(RuntimeError):
    pass


def fail_on_rank_one(marks: str):
    """Rank 1 raises once every peer runs; the peers never end by themselves (each marks
    that it runs, then waits forever): only a teardown ends them."""
    import os
    ctx = gpujobs.context()
    if ctx.rank == 1:
        peers = [r for r in range(ctx.world_size) if r != 1]
        while not all(os.path.exists(f"{marks}/{r}.up") for r in peers):
            time.sleep(0.05)
        raise RankFailure(f"rank {ctx.rank} gave up")
    open(f"{marks}/{ctx.rank}.up", "w").close()
    while True:
        time.sleep(1)


def exit_on_rank_one(code):
    import os
    import signal
    if gpujobs.context().rank == 1:
        if code == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(code)
    time.sleep(60)


def sleeper():
    time.sleep(120)


@pytest.mark.parametrize("gpus", [2, 4])
def test_ddp_gang_returns_rank0_result(gpus, no_leftovers):
    job = gpujobs.submit(allreduce_ranks, 10, gpus=gpus)
    result = job.result(timeout=120)
    assert result == {"sum": 10.0 * sum(range(gpus)), "world": gpus, "rank": 0, "device": "cpu"}
    st = job.status()
    assert st.phase == "succeeded" and st.cpu_ranks and st.exit_code == 0
    assert [e.kind for e in st.events][0] == "submitted" and st.events[-1].kind == "finished"
    no_leftovers(job.id)


def test_return_all_ranks():
    job = gpujobs.job(allreduce_ranks, 1).ddp(gpus=2).return_all().submit()
    results = job.result(timeout=120)
    assert [r["rank"] for r in results] == [0, 1]


def test_fsdp_gang_shards_model():
    def train():
        import torch
        import gpujobs.fsdp
        torch.manual_seed(0)
        model = gpujobs.fsdp.shard(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 1)),
                                   layers=torch.nn.Linear)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        losses = []
        for _ in range(10):
            x = torch.randn(32, 8)
            loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        p = next(model.parameters())
        return type(p).__name__, p.to_local().shape[0], losses[0] > losses[-1]

    kind, local_rows, improved = gpujobs.job(train).fsdp(gpus=2).submit().result(timeout=120)
    assert kind == "DTensor" and local_rows == 8 and improved  # 16 rows sharded over 2 ranks


def test_remote_exception_type_message_traceback_rank(no_leftovers, tmp_path):
    """The order, not the seconds (speed: benchmarks/): every peer runs, rank 1 fails, the
    peers (which never end by themselves) are torn down and the job fails with rank 1's error."""
    job = gpujobs.submit(fail_on_rank_one, str(tmp_path), gpus=4)
    with pytest.raises(RankFailure) as err:
        job.result(timeout=600)  # a hang guard: the peers end only when torn down
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0.up", "2.up", "3.up"]
    assert str(err.value) == "rank 1 gave up"
    assert err.value.rank == 1
    assert "fail_on_rank_one" in err.value.remote_traceback
    assert job.status().phase == "failed"
    # #31: the status names the exception (as on Kubernetes), not only "rank 1 exit code 1"
    assert job.status().message.startswith("RankFailure: rank 1 gave up (rank 1)"), job.status().message
    no_leftovers(job.id)


@pytest.mark.parametrize("code, expect", [(3, "exit code 3"), ("kill", "killed by SIGKILL")])
def test_rank_exit_code_or_signal_fails_job(code, expect, no_leftovers):
    job = gpujobs.submit(exit_on_rank_one, code, gpus=2)
    with pytest.raises(JobFailedError) as err:
        job.result(timeout=120)
    st = job.status()
    assert st.phase == "failed" and expect in st.message and expect in str(err.value)
    assert st.exit_code == (3 if code == 3 else -9)
    no_leftovers(job.id)


def test_cancel_stops_whole_gang(no_leftovers):
    job = gpujobs.submit(sleeper, gpus=2)
    deadline = time.monotonic() + 60
    while job.status().phase != "running" and time.monotonic() < deadline:
        time.sleep(0.1)
    job.cancel()
    assert job.wait(timeout=30).phase == "cancelled"
    with pytest.raises(JobCancelledError):
        job.result()
    no_leftovers(job.id)


def test_logs_carry_rank_prefix():
    def talk():
        print(f"hello from {gpujobs.context().rank}", flush=True)
        return 0
    job = gpujobs.job(talk).ddp(gpus=2).submit()
    job.result(timeout=120)
    logs = job.logs()
    assert "[rank 0] hello from 0" in logs and "[rank 1] hello from 1" in logs
    assert job.logs(rank=1).strip() == "[rank 1] hello from 1"


def test_command_job_runs_program_in_every_rank(no_leftovers):
    code = "import os; print('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'])"
    job = gpujobs.job().options(command=("python", "-c", code)).ddp(gpus=2).submit()
    assert job.result(timeout=120) == 0
    logs = job.logs()
    assert "[rank 0] rank 0 of 2" in logs and "[rank 1] rank 1 of 2" in logs
    failing = gpujobs.job().options(command=("python", "-c", "raise SystemExit(7)")).ddp(gpus=2).submit()
    with pytest.raises(JobFailedError, match="exit code 7"):
        failing.result(timeout=120)
    no_leftovers(failing.id)


def read_env(name):
    import os
    return os.environ.get(name), os.environ.get("OMP_NUM_THREADS")


def test_ranks_see_submitter_environment(monkeypatch):
    """The agent is detached, but ranks get the environment of the process that submitted."""
    monkeypatch.setenv("GPUJOBS_TEST_MARK", "from-the-notebook")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert gpujobs.submit(read_env, "GPUJOBS_TEST_MARK", gpus=2).result(timeout=120) == \
        ("from-the-notebook", "1")
    job = gpujobs.job(read_env, "GPUJOBS_TEST_MARK").ddp(gpus=2).env(GPUJOBS_TEST_MARK="spec",
                                                                      OMP_NUM_THREADS="2").submit()
    assert job.result(timeout=120) == ("spec", "2")


def die_in_collective():
    import os
    import signal
    import torch
    import torch.distributed as dist
    if gpujobs.context().rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    t = torch.ones(1)
    dist.all_reduce(t)  # rank 0 loses its peer here: a collateral error, not the cause
    return t.item()


def test_killed_rank_is_blamed_not_the_peer_it_left_behind(no_leftovers):
    job = gpujobs.submit(die_in_collective, gpus=2)
    with pytest.raises(JobFailedError, match="rank 1 killed by SIGKILL"):
        job.result(timeout=120)
    no_leftovers(job.id)


def rendezvous_kind():
    import os
    import torch.distributed as dist
    store = dist.distributed_c10d._get_default_store()
    while hasattr(store, "underlying_store"):
        store = store.underlying_store
    return os.environ.get("GPUJOBS_RENDEZVOUS_FILE", ""), type(store).__name__


def test_local_gang_meets_through_a_file_store():
    """Regression: a TCPStore per gang stalled admissions for 5 s in ~4% of gangs here."""
    job = gpujobs.submit(rendezvous_kind, gpus=2)
    path, kind = job.result(timeout=120)
    assert kind == "FileStore" and path.endswith("rendezvous-0") and job.id in path
