"""The panel's job feed: one listing per refresh shared by every caller, rows in panel order,
changes only, and the loop only while someone listens."""
from __future__ import annotations

import asyncio

import pytest

import gpujobs
from gpujobs.lab.feed import JobFeed, changes, job_row, ordered, refresh_interval

from gpujobs.status import GpuSample, JobStatus, Progress


def make(n: int) -> list[JobStatus]:
    out = []
    for i in range(n):
        phase = ("queued", "running", "succeeded", "failed")[i % 4]
        out.append(JobStatus(job_id=f"j{i}", phase=phase, name=f"n{i}", queue="q", gang_size=2,
                             gang_ready=2 if phase == "running" else 0, submitted_at=1000.0 + i,
                             queue_position=(i // 4 + 1) if phase == "queued" else None,
                             finished_at=2000.0 + i if phase in ("succeeded", "failed") else None))
    return out


class Source:
    def __init__(self, statuses: list[JobStatus]):
        self.statuses = statuses
        self.calls = 0

    def __call__(self) -> list[JobStatus]:
        self.calls += 1
        return list(self.statuses)


def test_one_listing_per_refresh_whatever_the_number_of_jobs_and_callers():
    for n in (1, 1000):
        src = Source(make(n))
        feed = JobFeed(src, interval=60)

        async def many():
            return await asyncio.gather(*(feed.current() for _ in range(20)))
        results = asyncio.run(many())
        assert src.calls == 1, n
        assert all(len(r) == n for r in results)


def test_rows_are_running_then_queued_in_queue_order_then_newest_finished():
    rows = ordered([job_row(st) for st in make(12)])
    assert [r["phase"] for r in rows[:6]] == ["running"] * 3 + ["queued"] * 3
    assert [r["job_id"] for r in rows[:3]] == ["j1", "j5", "j9"]  # by submission
    assert [r["queue_position"] for r in rows[3:6]] == [1, 2, 3]
    finished = [r["finished_at"] for r in rows[6:]]
    assert finished == sorted(finished, reverse=True) and len(finished) == 6


def test_job_row_carries_progress_and_gang():
    st = JobStatus(job_id="a", phase="running", gang_ready=1, gang_size=2,
                   progress=Progress(step=5, total=20, rate=1.0, expected_end=None))
    row = job_row(st)
    assert (row["gang_ready"], row["gang_size"]) == (1, 2)
    assert row["progress"]["fraction"] == 0.25 and row["progress"]["text"].startswith("step 5/20")
    done = job_row(st.with_(phase="succeeded", progress=Progress(step=20, total=20, rate=1.0,
                                                                  expected_end=0.0)))
    assert done["progress"]["text"] == "100%"  # no "0 s left" once it has ended


def test_a_row_says_when_its_status_is_not_current():
    st = JobStatus(job_id="ml/a", phase="running", backend="kubernetes", message="epoch 2")
    assert job_row(st)["stale"] == ""
    row = job_row(st.not_current(1000.0, "you may not list workloads in namespace 'ml' (HTTP 403 Forbidden)"))
    assert row["stale"].startswith("not current: no news from the cluster since ")
    assert row["stale"].endswith("(HTTP 403 Forbidden))") and "epoch 2" not in row["stale"]


def test_a_queued_row_says_when_it_starts_and_its_range():
    import time
    now = time.time()
    st = JobStatus(job_id="q", phase="queued", queue_position=1, expected_start=now + 600,
                   expected_start_range=(now + 300, now + 1200))
    row = job_row(st)
    assert row["expected_start_range"] == [now + 300, now + 1200]
    assert row["start"].startswith("starts in ~10 min") and ", between " in row["start"], row["start"]
    assert job_row(st.with_(phase="running"))["start"] == ""


def test_changes_name_only_changed_and_removed_jobs():
    old = {r["job_id"]: r for r in map(job_row, make(3))}
    new = dict(old)
    new["j1"] = dict(old["j1"], phase="succeeded", terminal=True, finished_at=3000.0)
    del new["j2"]
    assert changes(old, new) == {"upsert": [new["j1"]], "removed": ["j2"], "order": ["j0", "j1"]}
    assert changes(old, dict(old)) is None


def test_subscribers_get_changes_from_one_loop_that_stops_when_they_leave():
    src = Source(make(2))
    feed = JobFeed(src, interval=0.01)

    async def scenario():
        a, b = feed.subscribe(), feed.subscribe()
        first = await asyncio.wait_for(a.get(), 5)
        assert {r["job_id"] for r in first["upsert"]} == {"j0", "j1"}
        assert await asyncio.wait_for(b.get(), 5) == first  # the same refresh, not one each
        src.statuses = [src.statuses[0].with_(phase="admitted")]
        diff = await asyncio.wait_for(a.get(), 5)
        assert diff["upsert"][0]["phase"] == "admitted" and diff["removed"] == ["j1"]
        feed.unsubscribe(a)
        feed.unsubscribe(b)
        await asyncio.sleep(0.1)
        calls = src.calls
        await asyncio.sleep(0.1)
        assert src.calls == calls  # nobody listens: no more listings
        await feed.close()
    asyncio.run(scenario())


def test_a_backend_error_is_reported_not_raised_into_the_loop():
    def broken():
        raise gpujobs.BackendUnavailable("agent gone")
    feed = JobFeed(broken, interval=60)
    with pytest.raises(gpujobs.BackendUnavailable, match="agent gone"):
        asyncio.run(feed.current())
    assert feed.error == "agent gone"


@pytest.mark.parametrize("raw", ["soon", "0", "-1"])
def test_a_bad_refresh_interval_names_the_variable(monkeypatch, raw):
    monkeypatch.setenv("GPUJOBS_LAB_REFRESH_S", raw)
    with pytest.raises(gpujobs.SpecError, match="GPUJOBS_LAB_REFRESH_S") as err:
        refresh_interval()
    assert "export GPUJOBS_LAB_REFRESH_S=2" in str(err.value)


def test_rows_carry_a_utilisation_history_one_point_per_new_sample():
    def sample(t: float, util: float, rank: int) -> GpuSample:
        return GpuSample(time=t, rank=rank, device=0, util=util, mem_used=None, mem_total=None,
                         source="psutil")
    job = JobStatus(job_id="r", phase="running", metrics=(sample(1, 10, 0), sample(1, 30, 1)))
    src = Source([job])
    feed = JobFeed(src, interval=60)

    async def refreshes():
        await feed.refresh()
        await feed.refresh()  # the same samples again: no new point
        src.statuses = [job.with_(metrics=(sample(2, 50, 0), sample(2, 70, 1)))]
        await feed.refresh()
        src.statuses = []
        await feed.refresh()
    asyncio.run(refreshes())
    assert src.calls == 4
    assert feed._util == {}  # forgotten with the job
    feed2 = JobFeed(Source([job, job.with_(job_id="q", phase="queued", metrics=())]), interval=60)
    rows = {r["job_id"]: r for r in asyncio.run(feed2.current())}
    assert rows["r"]["util"] == [20.0] and rows["r"]["util_kind"] == "CPU"
    assert rows["q"]["util"] == [] and rows["q"]["util_kind"] == ""


def test_the_history_grows_by_new_samples_only():
    def sample(t: float, util: float) -> GpuSample:
        return GpuSample(time=t, rank=0, device=0, util=util, mem_used=None, mem_total=None)
    job = JobStatus(job_id="r", phase="running", metrics=(sample(1, 10),))
    src = Source([job])
    feed = JobFeed(src, interval=0)

    async def run():
        await feed.refresh()
        await feed.refresh()
        src.statuses = [job.with_(metrics=(sample(2, 90),))]
        await feed.refresh()
        return feed.snapshot_list()
    rows = asyncio.run(run())
    assert rows[0]["util"] == [10.0, 90.0] and rows[0]["util_kind"] == "GPU"
