"""The examples the README points to run as documented and print what they promise."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def run_example(name: str, timeout: float = 240) -> str:
    out = subprocess.run([sys.executable, str(ROOT / "examples" / name)], cwd=ROOT,
                         capture_output=True, text=True, timeout=timeout, env=dict(os.environ))
    assert out.returncode == 0, f"{name} failed:\n{out.stdout}\n{out.stderr}"
    return out.stdout + out.stderr


def test_quickstart_trains_over_four_ranks_and_prints_the_timeline():
    text = run_example("quickstart.py")
    assert "over 4 ranks on cpu" in text and "each requested GPU runs as a CPU rank" in text
    for event in ("submitted", "admitted", "started", "finished"):
        assert f"  {event}" in text
    first, final = (float(x) for x in text.split("loss ")[1].split(" over")[0].split(" -> "))
    assert final < first / 10


def test_mpi_pi_estimates_pi():
    text = run_example("mpi_pi.py")
    assert "3.14" in text


def test_k8s_simulated_shows_a_queue_position_and_both_results():
    text = run_example("k8s_simulated.py")
    assert "kubeflow.org/v2beta1/MPIJob" in text and "kueue.x-k8s.io/queue-name: q" in text
    assert "1st in q" in text
    assert "results: 3.1" in text
