"""benchmarks/eta_replay.py --pool: several runs' dumps reported as one population."""
from __future__ import annotations

import json
import sys

import pytest

from tests.support import benchmark_module


def job(err: float, naive_err: float, gpus: int = 1, inside: bool = True) -> dict:
    """A job that waited: its forecast ``err`` s early, naive ``naive_err`` s early."""
    actual = 100.0
    return {"scenario": "steady", "gpus": gpus, "prio": "normal", "phase": "queued", "actual": actual,
            "expected": actual - err, "naive": actual - naive_err, "not_before": 0.0, "latency": 0.001,
            "range": [actual - 1, actual + 1] if inside else [0.0, 1.0], "basis": "history of similar jobs"}


def cells(out: str, label: str) -> list[str]:
    line = next(ln for ln in out.splitlines() if ln.startswith(f"| {label} |"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_pool_reports_the_median_over_the_union_of_the_dumps(tmp_path, monkeypatch, capsys):
    er = benchmark_module("eta_replay")
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps([job(1, 2), job(1, 2)]))  # alone: ratio 0.50
    b.write_text(json.dumps([job(10, 10, gpus=8, inside=False), job(10, 10, gpus=8)]))  # alone: 1.00
    monkeypatch.setattr(sys, "argv", ["eta_replay.py", "--pool", str(a), str(b)])
    er.main()
    out = capsys.readouterr().out
    assert "2 runs pooled: 4 jobs" in out
    got = cells(out, "**all**")
    assert got[1] == "4" and got[3].startswith("5.5 ") and got[4].startswith("6.0 ")
    assert float(got[5]) == pytest.approx(5.5 / 6.0, abs=0.005)
    assert got[6] == "3/4 (75 %)" and got[7] == "0"
    assert cells(out, "8 GPUs")[5] == "1.00" and cells(out, "1 GPU")[5] == "0.50"


def test_pool_reads_the_kept_gzipped_dumps(tmp_path, monkeypatch, capsys):
    """benchmarks/dumps/ keeps runs as .json.gz; --pool reads them as they are."""
    import gzip
    er = benchmark_module("eta_replay")
    a = tmp_path / "a.json.gz"
    a.write_bytes(gzip.compress(json.dumps([job(1, 2), job(3, 4)]).encode()))
    monkeypatch.setattr(sys, "argv", ["eta_replay.py", "--pool", str(a)])
    er.main()
    assert cells(capsys.readouterr().out, "**all**")[1] == "2"


def test_a_seed_gives_the_trace_its_kept_dump_ran():
    """The generator (eta_replay.trace, whose draws eta_oracle's --floor reuses) still makes the
    jobs the kept seed-3 run submitted, field for field."""
    from pathlib import Path
    er = benchmark_module("eta_replay")
    rows = er.load_dump(str(Path(er.__file__).parent / "dumps" / "eta_replay_s18_seed3.json.gz"))
    warm, scenarios = er.trace(3, 8, 1.0, 2, ["steady", "heavy", "sweeps"])
    assert len(warm) == 16 and all(w["fail"] is None for w in warm)
    made = [(sc, j) for sc, jobs in scenarios.items() for j in jobs]
    assert len(made) == len(rows) == 180
    keys = ("t", "kind", "run", "limit", "fail", "report", "gpus", "prio")
    assert [(sc, {k: j[k] for k in keys}) for sc, j in made] == [(r["scenario"], {k: r[k] for k in keys}) for r in rows]
