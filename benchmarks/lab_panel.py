"""The JupyterLab panel's refresh: ``GET {base_url}gpujobs/api/jobs`` on a real Jupyter server
over the local backend with N jobs, and backend requests per minute while pages follow it.

For N = 10 and N = 1,000 jobs (N - 3 finished records plus 3 live jobs: one running, two
queued behind it, so every listing goes to the agent):

1. list p95: the API list with a backend listing on every request (GPUJOBS_LAB_REFRESH_S tiny,
   the worst case; the panel normally reads the shared snapshot); refresh p95: one cycle of the
   shared loop in this process (``JobFeed.refresh``: the listing, the rows, the changes), which
   is what a page following the stream waits for;
2. requests per minute: the server's shared loop (``JobFeed``, 2 s) followed by 3 subscribers
   for ``--window`` s, counting the requests that reach the agent; the alternative is the page
   polling each job's status every 2 s (one round of ``attach(id).status()`` counted, x 30).

    .venv/bin/python benchmarks/lab_panel.py
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def wait_for_file(path: str, value):
    import time as _t
    while not os.path.exists(path):
        _t.sleep(0.05)
    return value


def seed(home: Path, n: int) -> None:
    """``n`` finished jobs' records in the local store (no agent running yet)."""
    from gpujobs.backends.local.store import Store
    from gpujobs.status import JobStatus
    (home / "jobs").mkdir(parents=True, exist_ok=True)
    store = Store(home / "state.db")
    now = time.time()
    rows = []
    for i in range(n):
        st = JobStatus(job_id=f"old-{i:05d}", phase=("succeeded", "failed", "cancelled")[i % 3],
                       name=f"old-{i}", queue="default", gpus=1, gang_ready=0, gang_size=1,
                       submitted_at=now - 3600 + i, started_at=now - 3500 + i, finished_at=now - 3000 + i)
        rows.append((st.job_id, i + 1, st, {}, {}))
    store.write(rows)
    store.close()


class Counter:
    """Counts the requests this process sends to the local agent."""

    def __init__(self) -> None:
        from gpujobs.backends.local.client import AgentClient
        self.n = 0
        original = AgentClient.request

        def counted(client, msg, *a, **kw):
            self.n += 1
            return original(client, msg, *a, **kw)
        AgentClient.request = counted  # type: ignore[method-assign]


def p95(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=20)[-1]


def run(n: int, window: float, requests: int, counter: Counter) -> dict:
    import gpujobs
    from tests.browser.labserver import start_lab
    from gpujobs.backends import get_backend
    from gpujobs.backends.local import stop_agent
    from gpujobs.lab.feed import JobFeed

    work = Path(tempfile.mkdtemp(prefix="lab-bench-"))
    home = work / "home"
    os.environ.update(GPUJOBS_HOME=str(home), GPUJOBS_LOCAL_GPUS="2", GPUJOBS_BACKEND="local",
                      GPUJOBS_AGENT_IDLE_S="120")
    get_backend.cache_clear()
    seed(home, n - 3)
    gate = str(work / "gate")
    live = [gpujobs.submit(wait_for_file, gate, i, gpus=2, name=f"live-{i}") for i in range(3)]
    deadline = time.monotonic() + 60
    while live[0].status().phase != "running" and time.monotonic() < deadline:
        time.sleep(0.1)
    lab = start_lab(work / "lab", {"GPUJOBS_LAB_REFRESH_S": "0.000001"}, panel=True, app="server")
    try:
        url = lab.url("gpujobs/api/jobs")
        times, size = [], 0
        for _ in range(requests):
            t0 = time.perf_counter()
            with urllib.request.urlopen(url, timeout=60) as r:
                body = r.read()
            times.append(time.perf_counter() - t0)
            size = len(body)
        import json
        listed = len(json.loads(body))
    finally:
        lab.stop()

    async def cycles() -> list[float]:
        feed = JobFeed(interval=2.0)
        out = []
        for _ in range(requests // 2):
            t0 = time.perf_counter()
            await feed.refresh()
            out.append(time.perf_counter() - t0)
        return out
    refresh_times = asyncio.run(cycles())

    async def follow() -> int:
        feed = JobFeed(interval=2.0)
        queues = [feed.subscribe() for _ in range(3)]
        before = counter.n
        await asyncio.sleep(window)
        used = counter.n - before
        for q in queues:
            feed.unsubscribe(q)
        await feed.close()
        return used
    feed_requests = asyncio.run(follow())
    before = counter.n
    for st in gpujobs.jobs():
        gpujobs.Job(st.job_id, get_backend(None)).status()
    per_job_round = counter.n - before
    Path(gate).touch()
    stop_agent(home=home)
    return {"n": n, "listed": listed, "p50": statistics.median(times), "p95": p95(times),
            "cycle_p95": p95(refresh_times),
            "bytes": size, "feed_per_min": feed_requests * 60 / window, "poll_per_min": per_job_round * 30}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--window", type=float, default=20.0, help="seconds of following per N")
    ap.add_argument("--requests", type=int, default=100, help="API list requests per N")
    args = ap.parse_args()
    counter = Counter()
    print("jobs  listed  list p50   list p95   refresh p95  body     shared loop req/min  per-job polling req/min")
    for n in (10, 1000):
        r = run(n, args.window, args.requests, counter)
        print(f"{r['n']:>5} {r['listed']:>6}  {r['p50']:.4f} s  {r['p95']:.4f} s  {r['cycle_p95']:.4f} s"
              f"   {r['bytes'] / 1e3:6.0f} kB"
              f"  {r['feed_per_min']:>10.0f}           {r['poll_per_min']:>10.0f}")


if __name__ == "__main__":
    main()
