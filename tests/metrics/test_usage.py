"""Usage report over constructed JobStatus lists and samples (no processes)."""
from __future__ import annotations

import math
from datetime import timedelta

import pytest

import gpujobs
from gpujobs.errors import SpecError
from gpujobs.metrics.usage import to_epoch, usage_report
from gpujobs.status import GpuSample, JobStatus

H = 3600.0


def job(job_id, queue="team-a", user="ana", gpus=2, sub=0.0, start=None, end=None, phase=None):
    phase = phase or ("succeeded" if end is not None else "running" if start is not None
                      else "queued")
    return JobStatus(job_id=job_id, phase=phase, queue=queue, user=user, gpus=gpus,
                     submitted_at=sub, started_at=start, finished_at=end)


def series(rank, device, t0, t1, util, step=2.0, source="nvml"):
    n = int((t1 - t0) / step)
    return [GpuSample(time=t0 + i * step, rank=rank, device=device, util=util, mem_used=1.0,
                      mem_total=2.0, source=source) for i in range(n)]


def test_requested_used_utilisation_and_wait():
    a = job("a", sub=0, start=600, end=600 + H)  # waited 10 min, ran 1 h on 2 GPUs at 50 %
    b = job("b", sub=100, start=400, end=400 + H / 2, gpus=1)  # 30 min on 1 GPU at 100 %
    samples = {"a": series(0, 0, 600, 600 + H, 50) + series(1, 1, 600, 600 + H, 50),
               "b": series(0, 0, 400, 400 + H / 2, 100)}
    df = usage_report([a, b], samples, until=10 * H)
    row = df.loc[("team-a", "ana")]
    assert row["jobs"] == 2 and row["running"] == 0 and row["queued"] == 0
    assert row["gpu_hours_requested"] == pytest.approx(2.5)
    assert row["gpu_hours_used"] == pytest.approx(1.5)  # 2 x 1 h x 0.5 + 0.5 h x 1.0
    assert row["efficiency"] == pytest.approx(0.6)
    assert row["mean_util"] == pytest.approx((2 * 1800 * 50 + 900 * 100) / (2 * 1800 + 900))
    assert row["mean_wait_s"] == pytest.approx((600 + 300) / 2) and row["max_wait_s"] == 600
    assert row["metrics_source"] == "gpu" and math.isnan(row["mean_cpu_pct"])


def test_period_clips_running_time_and_samples():
    a = job("a", sub=0, start=0, end=4 * H, gpus=4)
    samples = {"a": series(0, 0, 0, 4 * H, 80)}
    df = usage_report([a], samples, since=1 * H, until=2 * H)
    row = df.iloc[0]
    assert row["gpu_hours_requested"] == pytest.approx(4.0)
    assert row["gpu_hours_used"] == pytest.approx(0.8)
    assert math.isnan(row["mean_wait_s"])  # it started before the period


def test_queued_and_running_at_until_and_jobs_outside_period():
    rows = [job("q", sub=50, user="bo"), job("r", sub=0, start=10, user="bo", gpus=1),
            job("old", sub=0, start=1, end=2, user="bo"), job("late", sub=500, user="bo")]
    df = usage_report(rows, {}, since=100, until=400)
    row = df.loc[("team-a", "bo")]
    assert (row["jobs"], row["queued"], row["running"]) == (2, 1, 1)  # old and late are outside
    assert row["gpu_hours_requested"] == pytest.approx(300 / H)
    assert math.isnan(row["gpu_hours_used"]) and row["metrics_source"] == "none"


def test_cpu_samples_never_count_as_gpu_use():
    a = job("a", sub=0, start=0, end=H, gpus=2)
    df = usage_report([a], {"a": series(0, -1, 0, H, 180, source="psutil")}, until=H)
    row = df.iloc[0]
    assert math.isnan(row["gpu_hours_used"]) and math.isnan(row["mean_util"])
    assert row["mean_cpu_pct"] == 180 and row["metrics_source"] == "cpu"


def test_gaps_in_samples_are_not_counted_as_busy():
    a = job("a", sub=0, start=0, end=H, gpus=1)
    two = [GpuSample(time=0.0, rank=0, device=0, util=100, mem_used=1, mem_total=2),
           GpuSample(time=H - 2, rank=0, device=0, util=100, mem_used=1, mem_total=2)]
    df = usage_report([a], {"a": two}, until=H, max_gap=10)
    assert df.iloc[0]["gpu_hours_used"] == pytest.approx(12 / H)  # 10 s + the last 2 s


def test_group_by_queue_only_and_by_errors():
    rows = [job("a", queue="q1", user="x", start=0, end=H, gpus=1),
            job("b", queue="q1", user="y", start=0, end=H, gpus=1),
            job("c", queue="q2", user="x", start=0, end=H, gpus=3)]
    df = usage_report(rows, {}, until=H, by="queue")
    assert list(df.index) == ["q1", "q2"]
    assert list(df["gpu_hours_requested"]) == pytest.approx([2.0, 3.0])
    with pytest.raises(SpecError, match="by"):
        usage_report(rows, {}, by=("team",))
    with pytest.raises(SpecError, match="since"):
        usage_report(rows, {}, since=10, until=5)


def test_time_arguments():
    assert to_epoch(None, "since") is None
    assert to_epoch(12.5, "since") == 12.5
    assert to_epoch(timedelta(hours=1), "since", now=10 * H) == 9 * H
    assert to_epoch("2026-01-01T00:00:00Z", "since") == 1767225600.0
    with pytest.raises(SpecError, match="until"):
        to_epoch("yesterday-ish", "until")


class MemoryBackend:
    """Job records and histories held in memory: what gpujobs.usage reads from a backend."""
    name = "memory"

    def __init__(self, statuses, histories):
        self.statuses, self.histories = statuses, histories

    def jobs(self, queue=None):
        return list(self.statuses)

    def metrics_history(self, job_id):
        return self.histories.get(job_id, [])


def test_gpujobs_usage_reads_the_backend():
    be = MemoryBackend([job("a", sub=0, start=60, end=60 + H, gpus=1)],
                       {"a": series(0, 0, 60, 60 + H, 25)})
    df = gpujobs.usage(since=0, until=2 * H, by=("queue",), backend=be)
    assert df.loc["team-a", "gpu_hours_used"] == pytest.approx(0.25)
    assert df.loc["team-a", "mean_wait_s"] == 60
