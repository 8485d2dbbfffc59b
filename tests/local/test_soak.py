"""A short run of benchmarks/soak.py: jobs in two queues of a cohort, with preemptions, a
rank SIGKILL, a rank SIGSTOP and an agent SIGKILL; every invariant of the soak must hold."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
SOAK = Path(__file__).resolve().parents[2] / "benchmarks" / "soak.py"


def test_short_soak_keeps_every_invariant(monkeypatch):
    spec = importlib.util.spec_from_file_location("gpujobs_soak", SOAK)
    soak = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(soak)
    for var in ("GPUJOBS_HOME", "GPUJOBS_LOCAL_GPUS", "GPUJOBS_AGENT_IDLE_S"):
        monkeypatch.setenv(var, "")  # restored after the test (run() sets its own)
    res = soak.run(jobs=16, faults=4, minutes=3, slots=4, clients=2, seed=3, quiet=True)
    soak.print_table(res)
    broken = {k: res[k] for k in ("crashes", "lost_jobs", "wrong_results", "doubled_runs",
                                  "over_slot_samples", "unsupervised_ranks",
                                  "discarded_finished_runs") if res[k]}
    assert not broken, (broken, res["examples"])
    assert res["max_agent_processes"] <= 2
    assert res["preemptions"] > 0, "the mix should preempt (the first third of the jobs is low)"
    assert res["succeeded_right"] + res["failed_as_planned"] + res["failed_by_rank_fault"] == 16
