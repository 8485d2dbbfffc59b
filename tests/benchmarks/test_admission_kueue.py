"""benchmarks/admission_kueue.py's comparison cannot pass vacuously: it refuses when a side
admitted nothing, names the Workloads the two sides disagree on, and its scenario has something to
refuse (oversized Workloads) and something to borrow. The control plane itself is not started here
(that takes minutes): the benchmark's run is recorded in benchmarks/RESULTS.md."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "admission_kueue.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("admission_kueue", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod          # its dataclasses look their module up
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.modules.pop(spec.name, None)


def test_kueue_admitting_nothing_is_no_comparison(bench):
    sc = bench.scenario(40, 3)
    engine = bench.run_engine(sc, repeat=1)
    with pytest.raises(bench.NothingToCompare, match="real Kueue admitted nothing"):
        bench.compare(sc.admissible, {"admitted": set(), "cpu_s": 3.0}, engine)
    with pytest.raises(bench.NothingToCompare, match="no measurable CPU"):
        bench.compare(sc.admissible, {"admitted": {"wl-00000"}, "cpu_s": 0.0}, engine)


def test_differing_sets_are_named_not_counted_equal(bench):
    expected = {"a", "b", "c"}
    c = bench.compare(expected, {"admitted": {"a", "b", "x"}, "cpu_s": 2.0},
                      {"admitted": {"a", "b", "c"}, "cpu_s": 0.01})
    assert not c["same"]
    assert c["only_kueue"] == ["x"] and c["only_engine"] == ["c"]
    assert c["kueue_missing"] == ["c"] and c["kueue_extra"] == ["x"]
    assert c["kueue_rate"] == pytest.approx(1.5) and c["engine_rate"] == pytest.approx(300)
    assert c["ratio"] == pytest.approx(200)


def test_the_scenario_refuses_the_oversized_and_makes_the_first_queue_borrow(bench):
    sc = bench.scenario(300, 4)
    big = [j for j in sc.jobs if j.name not in sc.admissible]
    assert len(big) == bench.OVERSIZED and all(j.gpus > sc.nominal * sc.queues for j in big)
    fits = [j for j in sc.jobs if j.name in sc.admissible]
    assert sum(j.gpus for j in fits) <= sc.nominal * sc.queues          # all fit at once
    assert sum(j.gpus for j in fits if j.queue == 0) > sc.nominal         # queue 0 borrows
    assert {j.gpus for j in fits} == {1, 2, 4, 8}
    assert len({j.priority for j in fits}) == 3
    # the engine admits exactly the admissible set, the oversized stay pending
    assert bench.run_engine(sc, repeat=1)["admitted"] == sc.admissible


def test_cpu_seconds_reads_utime_plus_stime(bench):
    t = os.times()
    got = bench.cpu_seconds(os.getpid())
    t2 = os.times()
    assert t.user + t.system - 0.02 <= got <= t2.user + t2.system + 0.02


def test_missing_binaries_skip_with_a_line_saying_so(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "GPUJOBS_CONTROLPLANE_BIN": str(tmp_path),
                            "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    assert "admission_kueue: skipped, the control-plane binaries are missing" in r.stdout
    assert "etcd, kube-apiserver, kueue not built" in r.stdout
