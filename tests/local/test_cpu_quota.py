"""Ranks that ask for 0 GPUs are charged CPUs, not GPU slots: on a machine without GPUs
(GPUJOBS_LOCAL_GPUS=2) an MPI job of 3 CPU-only ranks is admitted (it needs 3 CPUs), as on a
cluster. Requested GPUs still take GPU slots (CPU ranks without a GPU)."""
from __future__ import annotations

import pytest

import gpujobs
from gpujobs.backends.local.agent import Agent
from gpujobs.backends.local.jobdir import JobDir
from gpujobs.backends.local.queue_config import admission_config
from gpujobs.config import Settings
from gpujobs.devices import local_cpus
from gpujobs.errors import QuotaError, SpecError
from gpujobs.metrics.nvml import NvmlReader


def work():
    return 1


@pytest.fixture
def agent(gpujobs_home, monkeypatch):
    monkeypatch.setenv("GPUJOBS_LOCAL_GPUS", "2")
    monkeypatch.setenv("GPUJOBS_LOCAL_CPUS", "4")
    monkeypatch.setattr(NvmlReader, "open", classmethod(lambda cls, nvml=None: None))  # no GPU
    (gpujobs_home / "jobs").mkdir(exist_ok=True)
    a = Agent(gpujobs_home)
    yield a
    a.store.close()


def _submit(agent, jid, builder):
    spec = builder.spec()
    jd = JobDir(agent.home / "jobs" / jid)
    jd.create(spec.to_dict(), spec.payload())
    with agent.lock:  # what LocalBackend.submit sends; nothing starts until the loop runs
        return agent.submit({"id": jid, "spec": spec.to_dict(), "name": jid,
                             "job_dir": str(jd.root), "user": "test"})


def test_zero_gpu_ranks_are_charged_cpus_not_gpu_slots(agent):
    assert _submit(agent, "cpu3", gpujobs.job(work).mpi(ranks=3, gpus_per_rank=0))["ok"]
    assert _submit(agent, "gpu2", gpujobs.job(work).mpi(ranks=2, gpus_per_rank=1))["ok"]
    d = agent.engine.schedule()
    assert sorted(d.admitted_ids) == ["cpu3", "gpu2"]  # 3 of 4 CPUs and 2 of 2 GPU slots
    assert agent.engine.admission("cpu3").usage == {"cpu": 3.0}
    assert agent.engine.admission("gpu2").usage == {"gpu": 2.0}


def test_more_cpu_ranks_than_cpus_is_refused_with_the_cpu_numbers(agent):
    with pytest.raises(QuotaError, match=r"needs 5 cpu, queue 'default' flavor 'default' has nominal 4"):
        _submit(agent, "cpu5", gpujobs.job(work).mpi(ranks=5, gpus_per_rank=0))


def _local(cfg):
    """The [local] settings of a parsed file ``cfg`` and this process's variables."""
    import os
    return Settings.from_dict(cfg, env=os.environ).local


def test_cpu_quota_from_env_config_and_machine(gpujobs_home, monkeypatch):
    monkeypatch.delenv("GPUJOBS_LOCAL_CPUS", raising=False)
    import os
    assert local_cpus(_local({})) == float(max(os.cpu_count() or 1, 4))
    # a 2-core laptop still runs the 4-rank CPU examples (examples/mpi_pi.py): floor of 4, as the
    # CPU-rank GPU slots
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert local_cpus(_local({})) == 4.0
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert local_cpus(_local({})) == 16.0
    assert local_cpus(_local({"local": {"cpus": 6}})) == 6.0
    monkeypatch.setenv("GPUJOBS_LOCAL_CPUS", "3")
    assert local_cpus(_local({"local": {"cpus": 6}})) == 3.0
    monkeypatch.setenv("GPUJOBS_LOCAL_CPUS", "none")
    with pytest.raises(SpecError) as err:
        local_cpus(_local({}))
    assert err.value.field == "GPUJOBS_LOCAL_CPUS"
    monkeypatch.delenv("GPUJOBS_LOCAL_CPUS")
    cfg = {"local": {"queues": [{"name": "a", "gpus": 1, "cpus": 3}, {"name": "b", "gpus": 1}]}}
    adm = admission_config(2, Settings.from_dict(cfg), cpus=4)
    assert [q.quota for q in adm["queues"]] == [{"gpu": 1.0, "cpu": 3.0}, {"gpu": 1.0, "cpu": 4.0}]
    cfg["local"]["queues"][1]["cpus"] = 2
    with pytest.raises(SpecError, match="CPU quotas add up to 5 but this machine has 4 CPUs"):
        admission_config(2, Settings.from_dict(cfg), cpus=4)
