"""benchmarks/fault_report.py: a scenario that crashes is reported as crashed (never as
0 lost) and makes the report's exit code non-zero; it runs from a plain checkout (the
repository root on the path: gpujobs_sim is not in the package)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import benchmark_module

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fault_report():
    return benchmark_module("fault_report")


def test_a_crashing_scenario_is_reported_as_crashed_and_fails_the_report(fault_report, monkeypatch,
                                                                           capsys, tmp_path):
    def fine():
        return fault_report.scenarios.row("fine", 3, 2, seconds=0.1)

    def boom():
        raise ModuleNotFoundError("No module named 'gpujobs_sim'")

    monkeypatch.setattr(fault_report, "PLAN", [("fine", fine), ("boom", boom)])
    monkeypatch.setattr(fault_report, "_fresh_home", lambda: tmp_path)
    code = fault_report.main(["--quick"])
    out = capsys.readouterr().out
    assert code != 0
    boom_row = next(line for line in out.splitlines() if line.startswith("| boom |"))
    assert boom_row.count("crashed") == 5, boom_row
    assert "CRASHED ModuleNotFoundError: No module named 'gpujobs_sim'" in out
    assert "0 lost" not in out
    assert "FAILED: 1 of 2 scenarios crashed (boom)" in out


def test_every_scenario_ran_and_none_lost_passes(fault_report, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(fault_report, "PLAN", [
        ("a", lambda: fault_report.scenarios.row("a", 3, 2)),
        ("b", lambda: fault_report.scenarios.row("b", 1, 1))])
    monkeypatch.setattr(fault_report, "_fresh_home", lambda: tmp_path)
    assert fault_report.main(["--quick"]) == 0
    assert "4 faults injected over 3 jobs in 2 scenarios: 0 lost" in capsys.readouterr().out


def test_the_simulator_is_importable_as_the_report_runs_it():
    """Run as a script (sys.path[0] = benchmarks/), the report finds gpujobs_sim."""
    code = ("import runpy, sys; runpy.run_path(sys.argv[1], run_name='fault_report'); "
            "import gpujobs_sim; print('ok')")
    out = subprocess.run([sys.executable, "-c", code, str(ROOT / "benchmarks" / "fault_report.py")],
                         capture_output=True, text=True, timeout=300,
                         cwd=ROOT / "benchmarks", env=_env_without_root())
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]


def _env_without_root():
    import os
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
