"""benchmarks/k8s_forecast.py runs against today's Kubernetes backend (it crashed for rounds after
``forecasting.for_backend`` took the hub getter: nothing ran it but ``run_all.sh``): a small
seeding, one round, both headline lines printed."""
from __future__ import annotations

from tests.support import benchmark_module


def test_the_kubernetes_forecast_benchmark_runs_and_reports_both_figures(capsys):
    bench = benchmark_module("k8s_forecast")
    assert bench.main(["--pending", "200", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "seeded 200 pending Workloads" in out
    assert "kubernetes plan() behind 200 pending Workloads" in out and "(target < 1 s" in out
    assert "kubernetes forecast refresh of every queued job (" in out
