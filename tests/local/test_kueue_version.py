"""The local agent's admission follows ``[local] kueue_version`` (default: the newest supported
Kueue), and plan() says which one in its basis."""
from __future__ import annotations

import pytest

import gpujobs
from gpujobs.backends.local.agent import Agent
from gpujobs.backends.local.server import _plan
from gpujobs.backends.local.queue_config import admission_config
from gpujobs.config import Settings
from gpujobs.errors import SpecError


def nap(seconds):
    import time as _t
    _t.sleep(seconds)


def test_config_names_a_supported_version_or_says_how_to_fix_it():
    assert admission_config(2, Settings.from_dict({}), cpus=4)["kueue_version"] == "v0.20"
    assert admission_config(2, Settings.from_dict({"local": {"kueue_version": "0.19.1"}}), cpus=4)["kueue_version"] == "v0.19.2"
    with pytest.raises(SpecError, match=r"\[local\] kueue_version.*set kueue_version = \"v0.20\""):
        admission_config(2, Settings.from_dict({"local": {"kueue_version": "v0.16.0"}}), cpus=4)


@pytest.mark.parametrize("configured,row,overlap", [(None, "v0.20", "on"), ("v0.17.8", "v0.17.0", "off")])
def test_agent_engine_and_plan_basis_follow_the_config(gpujobs_home, monkeypatch, configured, row, overlap):
    if configured:
        (gpujobs_home / "config.toml").write_text(f'[local]\nkueue_version = "{configured}"\n')
    monkeypatch.setenv("GPUJOBS_LOCAL_GPUS", "2")
    (gpujobs_home / "jobs").mkdir(exist_ok=True)
    agent = Agent(gpujobs_home)
    try:
        assert agent.engine.kueue_version == row
        spec = gpujobs.job(nap, 1).spec()
        basis = _plan(agent, {"spec": spec.to_dict(), "name": "x"})["plan"]["basis"]
        assert basis.endswith(f"admission as Kueue {row} scheduler (FlavorFungibilityPreserveScanProgress="
                              f"{'off' if row == 'v0.17.0' else 'on'}, RecomputeAssignmentUponPreemptionTargetsOverlap="
                              f"{overlap}), the local agent's ([local] kueue_version)"), basis
    finally:
        agent._shutdown()
        agent.store.close()
