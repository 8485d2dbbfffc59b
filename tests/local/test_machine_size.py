"""A job asking for more GPU slots than this machine's local agent has can never start in any
queue: submit refuses it and plan() says so, with the machine's fix (fewer GPUs; without a GPU,
more CPU ranks through GPUJOBS_LOCAL_GPUS when the queues take every slot), not a queue's."""
from __future__ import annotations

import pytest

import gpujobs
import gpujobs.backends.local.agent as agent_mod
from gpujobs.backends.local.agent import Agent
from gpujobs.devices import beyond_machine
from gpujobs.errors import QuotaError
from tests.local.inproc import submit


def nap(seconds):
    import time
    time.sleep(seconds)


@pytest.fixture
def make_agent(gpujobs_home, monkeypatch):
    """``make_agent(slots, real, config)``: an Agent in this process whose machine has ``slots``
    GPU slots (``real`` GPUs or CPU ranks); nothing runs, so nothing needs stopping but its store."""
    made = []

    def make(slots: int, real: bool, config: str = "") -> Agent:
        (gpujobs_home / "config.toml").write_text(config)
        (gpujobs_home / "jobs").mkdir(exist_ok=True)
        monkeypatch.setattr(agent_mod, "local_gpu_slots", lambda local=None: (slots, real))
        made.append(Agent(gpujobs_home))
        return made[-1]
    yield make
    for ag in made:
        ag._shutdown()
        ag.store.close()


def test_more_cpu_ranks_than_the_agent_runs_is_refused_with_the_variable_that_runs_more(make_agent, gpujobs_home):
    ag = make_agent(4, real=False)
    with pytest.raises(QuotaError) as e:
        submit(ag, gpujobs.job(nap, 1).ddp(gpus_per_node=8).name("big"))
    text = str(e.value)
    assert "asks for 8 gpu" in text and "4 GPU slots, each a CPU rank" in text and "queue 'default'" in text
    assert "at most 4" in text and "gpujobs agent stop, then export GPUJOBS_LOCAL_GPUS=8" in text
    with ag.lock:
        assert ag.recs == {} and ag.store.all() == [] and ag.engine.pending() == []  # nothing recorded or queued
    plan = ag.forecasts.plan(gpujobs.job(nap, 1).ddp(gpus_per_node=8).spec(), "big")
    assert plan.never and plan.reason == text and plan.summary().startswith("can never start")
    fits = ag.forecasts.plan(gpujobs.job(nap, 1).ddp(gpus_per_node=4).spec(), "fits")
    assert fits.admit_now  # four is the machine's size: the engine's own answer


def test_with_configured_queues_the_fix_names_the_config_not_the_variable(make_agent, gpujobs_home):
    ag = make_agent(4, real=False, config='[[local.queues]]\nname = "team"\ngpus = 4\n')
    with pytest.raises(QuotaError) as e:
        submit(ag, gpujobs.job(nap, 1).ddp(gpus_per_node=6).queue("team"))
    text = str(e.value)
    assert "queue 'team'" in text and "at most 4" in text and "GPUJOBS_LOCAL_GPUS" not in text
    assert f"gpus under [local] in {gpujobs_home / 'config.toml'}" in text


def test_with_real_gpus_only_fewer_is_the_fix(make_agent):
    ag = make_agent(2, real=True)
    with pytest.raises(QuotaError) as e:
        submit(ag, gpujobs.job(nap, 1).ddp(gpus_per_node=4))
    text = str(e.value)
    assert "the local agent has 2 GPUs" in text and "ask for fewer GPUs, at most 2)" in text
    assert "CPU rank" not in text and "GPUJOBS_LOCAL_GPUS" not in text


def test_a_job_within_the_machine_is_left_to_the_queues():
    assert beyond_machine(4, 4, False, "default", True) is None
    assert beyond_machine(0, 4, False, "default", True) is None  # CPU-only ranks take no slot
