"""``[local] gpus`` of the config file is applied where slots are counted (gpujobs.devices), so
the agent, gpujobs.machine_gpus() and the device listing agree."""
from __future__ import annotations

import pytest

from gpujobs.backends.local.agent import Agent
from gpujobs.devices import local_gpu_slots
from gpujobs.errors import SpecError
from gpujobs.metrics import machine_gpus
from gpujobs.rank.nvml import NvmlReader


@pytest.fixture
def config(gpujobs_home, monkeypatch):
    monkeypatch.delenv("GPUJOBS_LOCAL_GPUS", raising=False)
    monkeypatch.setattr(NvmlReader, "open", classmethod(lambda cls, nvml=None: None))  # no GPU

    def write(text: str) -> None:
        (gpujobs_home / "config.toml").write_text(text)
    return write


def test_config_gpus_sets_the_slots_everywhere(config, gpujobs_home):
    config("[local]\ngpus = 3\n")
    assert local_gpu_slots() == (3, False)
    assert local_gpu_slots(found=2) == (3, True)  # real GPUs, but the config caps the slots
    df = machine_gpus()
    assert df.attrs["summary"] == "no GPU: 3 CPU slots" and df.attrs["cpu_slots"] == 3
    agent = Agent(gpujobs_home)
    try:
        assert (agent.slots, agent.real, agent.free) == (3, False, [0, 1, 2])
    finally:
        agent.store.close()


def test_environment_overrides_the_config(config, monkeypatch):
    config("[local]\ngpus = 3\n")
    monkeypatch.setenv("GPUJOBS_LOCAL_GPUS", "5")
    assert local_gpu_slots(found=0) == (5, False)
    assert machine_gpus().attrs["cpu_slots"] == 5


def test_without_config_the_found_gpus_count(config):
    config("[local]\nidle_timeout_s = 5\n")
    assert local_gpu_slots(found=2) == (2, True)


@pytest.mark.parametrize("bad", ["0", "-2", '"four"', "2.5", "true"])
def test_bad_config_gpus_is_a_spec_error(config, bad):
    config(f"[local]\ngpus = {bad}\n")
    with pytest.raises(SpecError) as err:
        local_gpu_slots(found=0)
    assert err.value.field == "[local] gpus" and "gpus = 4" in err.value.fix


@pytest.mark.parametrize("good,slots", [("4", 4), ("4.0", 4), ('"4"', 4)])
def test_config_gpus_whole_numbers_in_any_spelling(config, good, slots):
    config(f"[local]\ngpus = {good}\n")
    assert local_gpu_slots(found=0)[0] == slots


def test_bad_environment_gpus_is_a_spec_error(config, monkeypatch):
    monkeypatch.setenv("GPUJOBS_LOCAL_GPUS", "two")
    with pytest.raises(SpecError) as err:
        local_gpu_slots(found=0)
    assert err.value.field == "GPUJOBS_LOCAL_GPUS"


def test_cpu_notice_names_the_config_path_and_does_not_suggest_a_set_variable(config, monkeypatch,
                                                                             gpujobs_home):
    from gpujobs.devices import cpu_notice_text
    (gpujobs_home / "config.toml").write_text("")
    text = cpu_notice_text("ddp")
    assert "export GPUJOBS_LOCAL_GPUS=N" in text and str(gpujobs_home / "config.toml") in text
    assert "gloo" in text
    monkeypatch.setenv("GPUJOBS_LOCAL_GPUS", "4")
    text = cpu_notice_text("ddp")
    assert "GPUJOBS_LOCAL_GPUS=4 sets how many run at once" in text
    assert "export GPUJOBS_LOCAL_GPUS" not in text and "Set GPUJOBS_LOCAL_GPUS" not in text
    assert "gloo" not in cpu_notice_text("mpi")  # MPI ranks use no torch.distributed


def test_unknown_queue_names_the_known_ones_and_the_config_file(config, gpujobs_home):
    import gpujobs
    config('[[local.queues]]\nname = "team-a"\ngpus = 1\nlocal_queues = ["alice"]\n')
    with pytest.raises(SpecError) as err:
        gpujobs.job(print).queue("team-b").submit()
    assert err.value.field == "queue" and "did you mean 'team-a'?" in err.value.problem
    assert "alice, team-a" in err.value.problem
    assert str(gpujobs_home / "config.toml") in err.value.fix
    assert not (gpujobs_home / "jobs").exists() or not list((gpujobs_home / "jobs").iterdir())
    with pytest.raises(SpecError, match="unknown queue 'typo'"):
        gpujobs.queue("typo")


def _zero():
    return 0


@pytest.mark.slow
def test_no_gpu_notice_only_for_jobs_that_asked_for_gpus(capsys, monkeypatch):
    import shutil

    import gpujobs
    import gpujobs.devices as devices
    if devices.nvml_gpu_count():
        pytest.skip("this machine has a GPU: its jobs get no CPU-rank notice at all")
    builders = [gpujobs.job(_zero).ddp(gpus_per_node=0, procs_per_node=1)]
    if shutil.which("mpirun"):
        builders.append(gpujobs.job(_zero).mpi(ranks=1, gpus_per_rank=0))
    for b in builders:
        monkeypatch.setattr(devices, "_notice_shown", False)
        assert b.submit().result(timeout=240) == 0
        assert "no GPU found" not in capsys.readouterr().err  # a 0-GPU job asked for none
    monkeypatch.setattr(devices, "_notice_shown", False)
    assert gpujobs.job(_zero).ddp(gpus_per_node=1).submit().result(timeout=240) == 0
    assert "no GPU found" in capsys.readouterr().err


def test_cpu_notice_is_information_in_a_notebook(capsys, monkeypatch):
    import sys
    import types

    import gpujobs.devices as devices
    fake_ipython = types.SimpleNamespace(get_ipython=lambda: types.SimpleNamespace(kernel=object()))
    monkeypatch.setitem(sys.modules, "IPython", fake_ipython)
    monkeypatch.setattr(devices, "_notice_shown", False)
    devices.cpu_notice("ddp")
    out, err = capsys.readouterr()
    assert "no GPU found" in out and err == ""  # not a red stderr box in Jupyter
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: None))
    monkeypatch.setattr(devices, "_notice_shown", False)
    devices.cpu_notice("ddp")
    out, err = capsys.readouterr()
    assert "no GPU found" in err and out == ""  # a terminal: stderr as before
