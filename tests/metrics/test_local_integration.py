"""Metrics of a real local job: the agent samples its gang; status, history, frame, usage."""
from __future__ import annotations

import time

import pytest

import gpujobs

pytestmark = pytest.mark.slow


def spin(seconds):
    import time as t
    end = t.time() + seconds
    n = 0
    while t.time() < end:
        n += 1
    return n


def test_running_job_reports_cpu_metrics(monkeypatch, no_leftovers):
    monkeypatch.setenv("GPUJOBS_METRICS_INTERVAL", "0.3")
    monkeypatch.setenv("GPUJOBS_LOCAL_GPUS", "2")
    job = gpujobs.submit(spin, 4.0, gpus=1)
    live = ()
    deadline = time.monotonic() + 60
    while not job.done() and time.monotonic() < deadline:
        st = job.status()
        if st.phase == "running" and st.metrics:
            live = st.metrics
        time.sleep(0.2)
    assert job.result(timeout=60) > 0
    assert live, "no metrics reached JobStatus.metrics while the job ran"
    assert all(s.source == "psutil" and s.is_cpu and s.rank == 0 for s in live)
    frame = job.metrics()
    assert len(frame) >= 4 and frame.is_cpu
    assert frame["util"].max() > 10  # the rank was spinning
    assert frame["mem_used"].min() > 10 * 2**20
    report = gpujobs.usage(by="user")
    row = report.iloc[0]
    assert row["jobs"] >= 1 and row["metrics_source"] == "cpu" and row["mean_cpu_pct"] > 0
    no_leftovers(job.id)
