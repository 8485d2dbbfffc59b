"""Start forecasts against real starts: a trace-shaped workload replayed on the real local agent.

    .venv/bin/python benchmarks/eta_replay.py [--scale 1.0] [--seed 0] [--slots 8]

Unlike benchmarks/eta_accuracy.py (the engine replays both the forecast and the "actual"
start), here the jobs are real: the local agent runs them as CPU-rank ddp gangs, so starts
come from real ends (failures, early exits, preemption grace, spawn time), time compressed
(one second stands for about a minute of a cluster trace).

Workload (of this benchmark's own design, shaped after published GPU-cluster traces: sizes and
heavy-tailed durations after Philly (ATC'19), Helios (SC'21), PAI (NSDI'22)): ``--slots`` GPU
slots in two queues of half each sharing a cohort (within-queue preemption LowerPriority,
reclaim Any), 8 kinds of job (4 users x 2 names) with typical runtimes drawn lognormal (median
10 s, sigma 0.9, 3-60 s), each run lognormal around its kind's (sigma 0.35); sizes 1/2/4/8 GPUs
(50/25/20/5 %); declared limits ~3x the typical runtime (lognormal sigma 0.3) rounded up to 5 s,
15 % of jobs without a limit; 20 % fail, mostly early (10-40 % into the run); 30 % report
progress; priorities low/normal/high 25/60/15 %; preempted runs resume from a checkpoint
(grace 2 s). First ``--warmup`` unmeasured runs of each kind (a machine in use has history);
then three scenarios, one agent (history carries over): ``steady`` (~120 % offered load
while it lasts), ``heavy`` (~160 %), ``sweeps`` (~130 %: bursts of 8 one-GPU jobs of one kind, and high-priority
4-GPU jobs that preempt).

Each job's first forecast (expected_start, its range, not_before, queue position) is read with
``status()`` right after submit, and again every 50 ms until the agent's forecaster thread has
one for it (it refreshes off the hot path; at most ``FORECAST_WAIT_S``) or the job has left the
queue, in a thread beside the submitting loop (the trace keeps its pace). ``--dump FILE`` writes
every measured job (forecast, range, basis, naive, actual start, events) as JSON;
``--scenarios`` picks scenarios; ``--pool DUMP...`` runs nothing and reports over several
dumps' jobs together (a population of one run is 10-45 jobs). Naive: position x mean runtime of finished jobs / (slots / mean
GPUs per job; no number before a job has finished). Reported per scenario, per size and per priority, over the jobs that waited
(queued when forecast): median and p90 absolute error of the forecast and of naive, their
ratio, the share of actual starts inside the stated range (+-1 s for the agent's scheduling
and spawn), jobs with no numeric forecast, and lower-bound violations (actual start before
not_before). Also the latency of those ``status()`` calls (p50/p99).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CONFIG = "".join(f"""[[local.queues]]
name = "{q}"
gpus = {{half}}
cohort = "lab"
preemption = "LowerPriority"
reclaim = "Any"

""" for q in ("qa", "qb"))
GRACE = 2.0
FORECAST_WAIT_S = 5.0  # s: how long a new job's first forecast is waited for
TOL = 1.0  # s: the agent's scheduling pass and the gang's spawn, allowed around the range
SIZES = ((1, 0.50), (2, 0.25), (4, 0.20), (8, 0.05))
PRIOS = (("low", 0.25), ("normal", 0.60), ("high", 0.15))


def work(seconds: float, fail_at: float | None, report: bool):
    """Sleeps ``seconds`` in 0.1 s steps (resumable: a preemption saves and requeues it)."""
    import time as _t
    import gpujobs as _g
    import gpujobs.checkpoint as ck
    ctx = _g.context()
    steps = max(1, int(seconds / 0.1))
    loop = ck.resumable(steps, state={"n": 0})
    for i in loop:
        if fail_at is not None and i >= fail_at * steps:
            raise RuntimeError("planned early failure")
        if report and ctx.rank == 0:
            ctx.progress(i, total=steps)
        _t.sleep(0.1)
    return steps


def _pick(rng: random.Random, table) -> object:
    x, acc = rng.random(), 0.0
    for v, p in table:
        acc += p
        if x < acc:
            return v
    return table[-1][0]


def kinds(rng: random.Random) -> list[dict]:
    out = []
    for u in ("ann", "bob", "cy", "dee"):
        for n in ("train", "eval"):
            out.append({"user": u, "name": f"{u}-{n}", "queue": "qa" if u in ("ann", "bob") else "qb",
                        "typical": min(60.0, max(3.0, rng.lognormvariate(math.log(10.0), 0.9)))})
    return out


def make_jobs(scenario: str, kinds_: list[dict], rng: random.Random, slots: int, scale: float) -> list[dict]:
    mean_gpu_s = sum(g * p for g, p in SIZES) * statistics.mean(k["typical"] for k in kinds_)
    load = {"steady": 1.2, "heavy": 1.6, "sweeps": 1.3}[scenario]
    rate = load * slots / mean_gpu_s
    n = max(10, int(60 * scale))
    jobs, t = [], 0.0
    while len(jobs) < n:
        if scenario == "sweeps" and rng.random() < 0.15:
            k = rng.choice(kinds_)
            for _ in range(8):
                jobs.append(_job(k, rng, t, gpus=1, prio="low"))
            jobs.append(_job(rng.choice(kinds_), rng, t + 0.5, gpus=4, prio="high"))
            t += 8 / rate
            continue
        t += rng.expovariate(rate)
        jobs.append(_job(rng.choice(kinds_), rng, t))
    return jobs[:n]


def draw_run(k: dict, rng: random.Random) -> float:
    """A run's length (s) if it does not fail: log-normal around its kind's typical one."""
    return max(1.0, k["typical"] * rng.lognormvariate(0, 0.35))


def draw_limit(k: dict, run: float, rng: random.Random) -> int:
    """A declared limit: ~3x the kind's typical run, rounded up to 5 s, never under 1.1x ``run``."""
    limit = 5 * math.ceil(k["typical"] * 3 * rng.lognormvariate(0, 0.3) / 5)
    return max(limit, 5 * math.ceil(run * 1.1 / 5))


def draw_fail(rng: random.Random) -> float | None:
    """The share of its run after which a job fails (20 % do, 10-40 % in), or None."""
    return rng.uniform(0.1, 0.4) if rng.random() < 0.2 else None


def _job(k: dict, rng: random.Random, t: float, gpus: int | None = None, prio: str | None = None) -> dict:
    run = draw_run(k, rng)
    limit = draw_limit(k, run, rng) if rng.random() >= 0.15 else None  # 15 % declare none
    fail = draw_fail(rng)
    return {"t": t, "kind": k, "run": run, "limit": limit, "fail": fail, "report": rng.random() < 0.3,
            "gpus": gpus or _pick(rng, SIZES), "prio": prio or _pick(rng, PRIOS)}


def trace(seed: int, slots: int, scale: float, warmup: int, scenarios: list[str]) -> tuple[list[dict], dict]:
    """The jobs a run submits: ``warmup`` runs of each kind (none fail), then each scenario's."""
    rng = random.Random(seed)
    ks = kinds(rng)
    warm = [_job(k, rng, 0.0, gpus=1, prio="normal") for k in ks for _ in range(warmup)]
    for w in warm:
        w["fail"] = None
    return warm, {sc: make_jobs(sc, ks, rng, slots, scale) for sc in scenarios}


class Finished:
    """Runtimes of finished jobs for the naive estimator, read every 2 s by one ``jobs()`` call in
    a thread (so the submitting loop keeps the trace's pace)."""

    def __init__(self) -> None:
        import threading
        self.runtimes: dict[str, float] = {}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)
        self._t.start()

    def _loop(self) -> None:
        from gpujobs.backends import get_backend
        while not self._stop.wait(2.0):
            try:
                for st in get_backend("local").jobs():
                    if st.terminal and st.started_at and st.finished_at:
                        self.runtimes[st.job_id] = st.finished_at - st.started_at
            except Exception:  # noqa: BLE001 - the agent may be between starts
                pass

    def values(self) -> list[float]:
        return list(self.runtimes.values())

    def stop(self) -> None:
        self._stop.set()
        self._t.join()


def observe(row: dict, slots: int, finished: Finished, gpus_seen: list[int]) -> None:
    """The job's first forecast: ``status()`` until the agent's forecaster has one for it (it
    refreshes off the hot path, so the status right after submit may not have it yet), or until
    the job left the queue (it started at once). The naive estimate is taken at the same moment."""
    h = row["handle"]
    c0 = time.perf_counter()
    st = h.status()
    row["latency"] = time.perf_counter() - c0
    deadline = time.time() + FORECAST_WAIT_S
    while st.phase == "queued" and not st.expected_start_basis and time.time() < deadline:
        time.sleep(0.05)
        st = h.status()
    now = time.time()
    naive = None
    done = finished.values()
    if st.phase == "queued" and st.queue_position and done:
        mean_rt = statistics.mean(done)
        per = slots / (statistics.mean(gpus_seen) if gpus_seen else 1.8)
        naive = now + st.queue_position * mean_rt / per
    row.update(at=now, phase=st.phase, expected=st.expected_start, range=st.expected_start_range,
               not_before=st.not_before, naive=naive, basis=st.expected_start_basis,
               position=st.queue_position, reason=st.reason)


def replay(jobs: list[dict], slots: int, finished: Finished, gpus_seen: list[int]) -> list[dict]:
    import gpujobs
    from concurrent.futures import ThreadPoolExecutor
    t0 = time.time()
    out = []
    with ThreadPoolExecutor(4) as pool:  # the forecasts are read beside the trace's pace, not in its way
        for j in jobs:
            delay = t0 + j["t"] - time.time()
            if delay > 0:
                time.sleep(delay)
            k = j["kind"]
            b = (gpujobs.job(work, j["run"], j["fail"], j["report"]).ddp(gpus=j["gpus"]).queue(k["queue"])
                 .name(k["name"]).priority(j["prio"]).options(grace_period_s=GRACE))
            if j["limit"]:
                b = b.max_runtime(j["limit"])
            row = {**j, "handle": b.submit(), "submitted": time.time()}
            pool.submit(observe, row, slots, finished, list(gpus_seen))
            out.append(row)
            gpus_seen.append(j["gpus"])
    for r in out:
        s = r["handle"].status()
        while not s.terminal:
            time.sleep(0.5)
            s = r["handle"].status()
        firsts = [e.time for e in s.events if e.kind == "started"]
        r["actual"] = firsts[0] if firsts else None
        r["final"] = s.phase
        r["events"] = [(e.time, e.kind) for e in s.events]
    return out


def load_dump(path: str) -> list[dict]:
    """A ``--dump`` file's jobs (gzipped when it ends in .gz: benchmarks/dumps/)."""
    import gzip
    raw = Path(path).read_bytes()
    return json.loads(gzip.decompress(raw) if path.endswith(".gz") else raw)


def _q(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, math.ceil(q * len(xs)) - 1))] if xs else float("nan")


def report(label: str, rows: list[dict]) -> str:
    waited = [r for r in rows if r["phase"] == "queued" and r["actual"] is not None]
    fc = [r for r in waited if r["expected"] is not None and r["naive"] is not None]
    if not waited:
        return f"| {label} | 0 | | | | | | | |"
    err = [abs(r["expected"] - r["actual"]) for r in fc]
    nav = [abs(r["naive"] - r["actual"]) for r in fc]
    ranged = [r for r in fc if r["range"]]
    inside = sum(1 for r in ranged if r["range"][0] - TOL <= r["actual"] <= r["range"][1] + TOL)
    viol = sum(1 for r in waited if r["not_before"] is not None and r["actual"] < r["not_before"] - 0.05)
    med, mnav = statistics.median(err) if err else float("nan"), statistics.median(nav) if nav else float("nan")
    return (f"| {label} | {len(waited)} | {len(waited) - len(fc)} | {med:.1f} / {_q(err, 0.9):.1f} | "
            f"{mnav:.1f} / {_q(nav, 0.9):.1f} | {med / mnav if mnav else float('nan'):.2f} | "
            f"{inside}/{len(ranged)} ({100 * inside / len(ranged) if ranged else float('nan'):.0f} %) | {viol} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=1.0, help="jobs per scenario: 60 x scale")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2, help="unmeasured runs of each kind first (history)")
    ap.add_argument("--scenarios", default="steady,heavy,sweeps", help="which scenarios, in this order")
    ap.add_argument("--dump", help="write every measured job (forecast, actual, basis) to this JSON file")
    ap.add_argument("--pool", nargs="+", metavar="DUMP",
                    help="run nothing: report over these dumps' jobs together (populations of several runs)")
    a = ap.parse_args()
    if a.pool:
        print_report([r for path in a.pool for r in load_dump(path)], pooled=len(a.pool))
        return
    home = Path(tempfile.mkdtemp(prefix="gpujobs-eta-replay-"))
    (home / "config.toml").write_text(CONFIG.format(half=a.slots // 2))
    os.environ.update(GPUJOBS_HOME=str(home), GPUJOBS_LOCAL_GPUS=str(a.slots), GPUJOBS_AGENT_IDLE_S="120")
    os.environ.pop("GPUJOBS_CONFIG", None)
    from gpujobs.backends import get_backend
    from gpujobs.backends.local import stop_agent
    get_backend.cache_clear()
    warm, scenarios = trace(a.seed, a.slots, a.scale, a.warmup, a.scenarios.split(","))
    finished = Finished()
    gpus_seen: list[int] = []
    allrows: list[dict] = []
    try:
        t_start = time.time()
        if warm:  # history exists on a machine in use: each kind ran a.warmup times before
            replay(warm, a.slots, finished, gpus_seen)
            print(f"warm-up: {len(warm)} jobs (not measured), done at +{time.time() - t_start:.0f} s", flush=True)
        for sc, jobs in scenarios.items():
            rows = replay(jobs, a.slots, finished, gpus_seen)
            for r in rows:
                r["scenario"] = sc
            allrows += rows
            print(f"scenario {sc}: {len(rows)} jobs, done at +{time.time() - t_start:.0f} s", flush=True)
    finally:
        finished.stop()
        stop_agent()
        shutil.rmtree(home, ignore_errors=True)  # the agent's job directories (logs, results)
    if a.dump:
        keep = [{k: v for k, v in r.items() if k != "handle"} for r in allrows]
        Path(a.dump).write_text(json.dumps(keep, default=str, indent=1))
    print_report(allrows)


def print_report(allrows: list[dict], pooled: int = 0) -> None:
    """The table (per scenario, size, priority and all), the status() latency and the bases."""
    head = ("| population | waited | no number | forecast median / p90 (s) | naive median / p90 (s) | "
            "median ratio | starts inside range | lower-bound violations |\n|---|---|---|---|---|---|---|---|")
    if pooled:
        print(f"{pooled} runs pooled: {len(allrows)} jobs")
    print(head)
    for sc in ("steady", "heavy", "sweeps"):
        print(report(f"scenario {sc}", [r for r in allrows if r["scenario"] == sc]))
    for g, _ in SIZES:
        print(report(f"{g} GPU{'s' if g > 1 else ''}", [r for r in allrows if r["gpus"] == g]))
    for p, _ in PRIOS:
        print(report(f"priority {p}", [r for r in allrows if r["prio"] == p]))
    print(report("**all**", allrows))
    lat = sorted(r["latency"] for r in allrows)
    print(f"status() right after submit (a cached forecast, or none yet): p50 {1000 * _q(lat, 0.5):.0f} ms, "
          f"p99 {1000 * _q(lat, 0.99):.0f} ms over {len(lat)} calls"
          + ("" if pooled else f"; load average {os.getloadavg()[0]:.1f}"))
    srcs: dict[str, int] = {}
    for r in allrows:
        if r["phase"] == "queued":
            for s in ("progress rate", "history of similar jobs", "usual share", "declared limit + grace", "unknown"):
                if s in (r["basis"] or ""):
                    srcs[s] = srcs.get(s, 0) + 1
    print("bases of the forecasts (a forecast may rest on several):", srcs)


if __name__ == "__main__":
    main()
