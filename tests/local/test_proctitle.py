"""Rank processes show their job id and rank in ps/top (comm name and command line)."""
from __future__ import annotations

import time

import psutil
import pytest

import gpujobs


def sleeper():
    import time
    time.sleep(60)


@pytest.mark.slow
def test_rank_processes_are_titled_with_job_id_and_rank(no_leftovers):
    job = gpujobs.job(sleeper).ddp(gpus_per_node=0, procs_per_node=2).submit()
    try:
        deadline = time.monotonic() + 120
        while job.status().phase != "running" and time.monotonic() < deadline:
            time.sleep(0.1)
        pids = job.status().extra.get("pids", [])
        assert len(pids) == 2, job.status()
        titles = {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the title is set as the runner starts
            titles = {psutil.Process(p).name(): psutil.Process(p).cmdline()[0] for p in pids}
            if all(t.startswith("gpujobs ") for t in titles.values()):
                break
            time.sleep(0.1)
        assert titles == {f"r{r} {job.id}"[:15]: f"gpujobs {job.id} rank {r}" for r in (0, 1)}
    finally:
        job.cancel()
    no_leftovers(job.id, within=15)
