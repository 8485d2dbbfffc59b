"""Start-time forecasts against what happened, on a synthetic trace; and forecast speed.
(The fast second check: benchmarks/eta_replay.py runs real jobs on the real agent.)

    .venv/bin/python benchmarks/eta_accuracy.py [--jobs 600] [--seed 0] [--quick]

Accuracy. A synthetic trace is replayed through the admission engine (the local backend's
engine, the same queue configuration types): 16 GPU slots in two queues of 8 sharing a
cohort (within-queue preemption LowerPriority), Poisson arrivals at ~95 % of capacity,
8 kinds of job (user, name, GPUs 1/2/4/8, typical runtime 5 min to 2 h), each run's actual
runtime lognormal around its kind's (sigma 0.35); 10 % are high priority. Users declare
limits as they do: 1.5-4x the typical runtime rounded up to 30 min (never below the actual
runtime). 30 % of jobs report progress: once 10 % of the run is done, their expected end is
known to within 5 % (a progress rate). A preempted job resumes from its checkpoint after a
30 s grace period. The first 20 % of the trace only builds history.

For every job that waits, the start is forecast when it is submitted and again halfway
through its wait (the replay is deterministic: pass 1 records the actual starts, pass 2
forecasts at those moments) with :func:`gpujobs.admission.forecast.forecast` from what was
known then (running jobs' starts, limits, progress; the history of finished jobs). The
naive estimator is position x mean runtime / slots: its queue position, the mean runtime of
the jobs finished so far, and slots = 16 GPUs / mean GPUs per job. Target: the forecast's
median absolute error at most half the naive one's. The forecasts expect arrivals from the
trace's recent submissions, as the local agent does (``--no-arrivals``: without; a tree
without ``Arrivals`` runs without); the at-submit errors are also given per size and priority.

Speed. 10,000 pending workloads in 20 queues (4 cohorts of 5, 8 GPUs each, 4 running
jobs per queue, mixed priorities and sizes, 1,000 finished jobs of history; draining them
all takes ~9 simulated days): ``plan()`` for one more low-priority job (target < 1 s) and a
forecast of every queued job (< 2 s), with the default 48 h horizon (starts further ahead
are answered "beyond the forecast horizon", as squeue --start shows N/A past bf_window) and
with no horizon. Best and worst of 3 rounds (wall time; the build machine is shared).
"""
from __future__ import annotations

import argparse
import heapq
import math
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpujobs.admission import ClusterQueue, Cohort, Engine, PodSet, Workload  # noqa: E402
from gpujobs.admission.forecast import (HORIZON_S, History, Job, Snapshot, StartErrors, forecast,  # noqa: E402
                                        plan)
from gpujobs.admission.forecast.reasons import priority_rank  # noqa: E402

try:  # expected arrivals (issue 30, eta5); absent from older trees this script is run against
    from gpujobs.admission.forecast import Arrivals
except ImportError:  # pragma: no cover - an older tree
    Arrivals = None
ARRIVALS = Arrivals is not None  # --no-arrivals: forecasts without them (as before)
ORACLE: set[str] = set()  # --oracle: what the forecast is told that no forecast can know

SLOTS = 16
QUEUES = [ClusterQueue("team-a", {"gpu": 8}, cohort="lab"),
          ClusterQueue("team-b", {"gpu": 8}, cohort="lab")]
KINDS = [  # user, name, queue, gpus, typical runtime (s)
    ("ann", "sweep", "team-a", 1, 300), ("ann", "finetune", "team-a", 2, 1800),
    ("bob", "pretrain", "team-a", 8, 7200), ("bob", "eval", "team-a", 1, 600),
    ("cy", "train", "team-b", 4, 3600), ("cy", "ablation", "team-b", 2, 1200),
    ("dee", "bench", "team-b", 1, 900), ("dee", "bigrun", "team-b", 4, 5400)]
GRACE = 30.0


def make_trace(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    mean_gpu_s = sum(k[3] * k[4] for k in KINDS) / len(KINDS)
    rate = 0.95 * SLOTS / mean_gpu_s  # arrivals per second
    t, out = 0.0, []
    for i in range(n):
        t += rng.expovariate(rate)
        user, name, queue, gpus, typical = rng.choice(KINDS)
        actual = typical * math.exp(rng.gauss(0, 0.35))
        limit = math.ceil(typical * rng.uniform(1.5, 4.0) / 1800) * 1800
        limit = max(limit, math.ceil(actual / 1800) * 1800)
        out.append(dict(id=f"j{i}", user=user, name=name, queue=queue, gpus=gpus, arrive=t,
                        actual=actual, limit=float(limit),
                        prio="high" if rng.random() < 0.10 else "normal",
                        progress=rng.random() < 0.30, noise=rng.gauss(0, 0.05)))
    return out


def replay(trace: list[dict], probes: dict[str, list[float]] | None = None):
    """Play the trace through the engine. Returns {id: first start}; with ``probes``
    ({id: [times]}) also the forecasts made at those times: {id: [(t, forecast, naive)]}."""
    eng = Engine(QUEUES, [Cohort("lab")])
    jobs = {j["id"]: j for j in trace}
    ev: list = []
    seq = 0

    def push(when, kind, wid, ver=0):
        nonlocal seq
        seq += 1
        heapq.heappush(ev, (when, seq, kind, wid, ver))

    for j in trace:
        push(j["arrive"], "arrive", j["id"])
    if probes:
        for wid, times in probes.items():
            for pt in times:
                push(pt, "probe", wid)
    first: dict[str, float] = {}
    started: dict[str, float] = {}   # current run's start
    left: dict[str, float] = {}      # remaining actual runtime
    ver: dict[str, int] = {}
    stopping: dict[str, float] = {}  # victim -> when its grace period ends
    history = History()
    arrivals = Arrivals() if ARRIVALS else None  # recent submissions, as the local agent keeps them
    errors = StartErrors()  # first forecasts against first starts, as the local agent keeps them
    first_fc: dict[str, tuple[float, float]] = {}  # id -> (when, expected start) of its first forecast
    finished_rt: list[float] = []
    pending: list[str] = []  # in arrival order (ids still queued)
    out: dict[str, list] = {}
    t = 0.0
    while ev:
        t, _, kind, wid, v = heapq.heappop(ev)
        j = jobs[wid]
        if kind == "arrive":
            eng.add(Workload(wid, j["queue"], [PodSet("ranks", j["gpus"], {"gpu": 1})],
                             priority=j["prio"], created=t))
            left[wid] = j["actual"]
            pending.append(wid)
            if arrivals is not None:
                arrivals.add(t, _job(j, wid))
        elif kind == "end":
            if ver.get(wid) != v:
                continue
            eng.finish(wid)
            history.add(j["user"], j["name"], j["queue"], j["actual"], j["limit"], GRACE)
            finished_rt.append(j["actual"])
        elif kind == "stop":
            eng.requeue(wid)
            stopping.pop(wid, None)
            left[wid] = max(0.0, left[wid] - (t - started[wid]))
            pending.append(wid)
        elif kind == "probe":
            if eng.state(wid) == "pending":
                row = (t, *_predict(eng, jobs, wid, t, started, left, stopping, pending, history,
                                    finished_rt, errors, arrivals))
                out.setdefault(wid, []).append(row)
                if row[1] is not None and wid not in first_fc:
                    first_fc[wid] = (t, row[1])
            continue
        # schedule after every change (events at the same instant are rare: continuous times)
        d = eng.schedule()
        for vic, _by in d.preempted:
            if vic in stopping:
                continue
            stopping[vic] = t + GRACE
            ver[vic] = ver.get(vic, 0) + 1  # its end event is void
            push(t + GRACE, "stop", vic)
        for adm in d.admitted:
            a = adm.id
            if a not in first and a in first_fc:
                at, exp = first_fc.pop(a)
                errors.add(jobs[a]["gpus"], priority_rank(Snapshot(QUEUES), jobs[a]["prio"]), exp - at, t - at)
            first.setdefault(a, t)
            started[a] = t
            ver[a] = ver.get(a, 0) + 1
            push(t + left[a], "end", a, ver[a])
            if a in pending:
                pending.remove(a)
    return first, out


def _job(j: dict, wid: str) -> Job:
    return Job(Workload(wid, j["queue"], [PodSet("ranks", j["gpus"], {"gpu": 1})], priority=j["prio"],
                        created=j["arrive"]),
               user=j["user"], name=j["name"], max_runtime_s=j["limit"], grace_period_s=GRACE)


def _predict(eng, jobs, wid, now, started, left, stopping, pending, history, finished_rt, errors, arrivals=None):
    running = []
    for rid in eng.admitted():
        j = jobs[rid]
        done_before = j["actual"] - left[rid]  # run time before a preemption
        job = Job(Workload(rid, j["queue"], [PodSet("ranks", j["gpus"], {"gpu": 1})],
                           priority=j["prio"], created=j["arrive"]),
                  user=j["user"], name=j["name"], max_runtime_s=j["limit"], grace_period_s=GRACE,
                  started=started[rid] - done_before, flavor=eng.admission(rid).flavor)
        ran = now - started[rid]
        if j["progress"] and ran >= 0.1 * left[rid]:
            job.expected_end = started[rid] + left[rid] * (1 + j["noise"])
        if rid in stopping:
            job.stops_at = stopping[rid]
        running.append(job)
    pend = [_job(jobs[pid], pid) for pid in pending]
    snap = Snapshot(QUEUES, [Cohort("lab")], running=running, pending=pend, history=history, now=now,
                    start_errors=errors)
    if arrivals is not None:
        snap.arrivals = arrivals.expected(now)
    if ORACLE:
        snap = _oracle(snap, jobs, now, started, left, stopping)
    fc = forecast(snap, ids=[wid], reasons=False)[wid]
    pos = eng.position(wid) or 1
    mean_rt = statistics.fmean(finished_rt) if finished_rt else 1800.0
    mean_gpus = statistics.fmean(k[3] for k in KINDS)
    naive = now + pos * mean_rt / (SLOTS / mean_gpus)
    return fc.expected_start, naive, fc.expected_start_range, fc.not_before


def _oracle(snap: Snapshot, jobs: dict, now: float, started: dict, left: dict, stopping: dict) -> Snapshot:
    """``snap`` with what only the trace knows (``--oracle``): ``runtimes``, every job's true
    remaining runtime (running: its end as a progress rate; queued: its limit with no grace and
    no history, so the limit predictor gives it); ``arrivals``, the trace's real next
    submissions (24 h of them, true runtimes) instead of the expected ones. What is left of the
    error then comes from the other unknown, and from the forecast's own rules (the arrivals
    that come before a job's start without them, ``_with_arrivals``)."""
    import dataclasses as dc
    true = "runtimes" in ORACLE

    def told(job: Job, remaining: float) -> Job:
        return dc.replace(job, max_runtime_s=remaining, grace_period_s=0.0) if true else job

    running = []
    for job in snap.running:
        if true and job.id not in stopping:
            job = dc.replace(job, expected_end=started[job.id] + left[job.id], max_runtime_s=None)
        running.append(job)
    pending = [told(job, max(left[job.id], 1e-3)) for job in snap.pending]
    arrivals = snap.arrivals
    if "arrivals" in ORACLE:
        arrivals = [(j["arrive"], told(_job(j, j["id"]), j["actual"])) for j in jobs.values()
                    if now < j["arrive"] <= now + 86400]
        arrivals.sort(key=lambda a: a[0])
    return dc.replace(snap, running=running, pending=pending, arrivals=arrivals,
                      history=History() if true else snap.history)


def accuracy(n: int, seed: int) -> dict:
    """Absolute errors (s) of the forecast and the naive estimator, at submit and halfway."""
    trace = make_trace(n, seed)
    first, _ = replay(trace)
    warm = int(0.2 * n)
    probes = {}
    for j in trace[warm:]:
        s = first.get(j["id"])
        if s is not None and s > j["arrive"] + 1e-6:
            probes[j["id"]] = [j["arrive"] + 1e-6, j["arrive"] + (s - j["arrive"]) / 2]
    t0 = time.perf_counter()
    first2, got = replay(trace, probes)
    took = time.perf_counter() - t0
    assert first2 == first, "the replay is not deterministic"
    arrive = {j["id"]: j["arrive"] for j in trace}
    res: dict = {"waited": len(probes), "forecasts": sum(len(v) for v in got.values()),
                 "replay_s": took,
                 "mean_wait": statistics.fmean(first[w] - arrive[w] for w in probes) if probes else 0.0}
    byid = {j["id"]: j for j in trace}
    res["pops"] = pops = {}  # (kind of population, value) -> [(forecast error, naive error, inside)] at submit
    for label, k in (("at submit", 0), ("halfway", 1)):
        fe, ne, unknown, inside, ranged, viol = [], [], 0, 0, 0, 0
        for wid, rows in got.items():
            if len(rows) <= k:
                continue
            _, fc, nv, rng_, nb = rows[k]
            if fc is None:
                unknown += 1
            else:
                fe.append(abs(fc - first[wid]))
                if k == 0:
                    j = byid[wid]
                    ins = None if rng_ is None else rng_[0] <= first[wid] <= rng_[1]
                    for key in (("GPUs", j["gpus"]), ("priority", j["prio"])):
                        pops.setdefault(key, []).append((abs(fc - first[wid]), abs(nv - first[wid]), ins))
            ne.append(abs(nv - first[wid]))
            if rng_ is not None:
                ranged += 1
                inside += rng_[0] <= first[wid] <= rng_[1]
            viol += nb is not None and first[wid] < nb
        res[label] = dict(fe=fe, ne=ne, unknown=unknown, inside=inside, ranged=ranged, viol=viol)
    return res


def summarize(fe: list[float], ne: list[float]) -> dict:
    return dict(n=len(ne), f_med=statistics.median(fe), f_p90=_p90(fe),
                n_med=statistics.median(ne), n_p90=_p90(ne))


def _p90(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(math.ceil(0.9 * len(xs))) - 1)] if xs else float("nan")


def big_state(seed: int = 0, pending_n: int = 10_000, queues: int = 20) -> Snapshot:
    rng = random.Random(seed)
    now = 1e6
    qs = [ClusterQueue(f"q{i}", {"gpu": 8}, cohort=f"c{i % 4}", reclaim_within_cohort="LowerPriority")
          for i in range(queues)]
    h = History()
    names = [f"exp{k}" for k in range(10)]
    for _ in range(1000):
        h.add(f"u{rng.randrange(5)}", rng.choice(names), f"q{rng.randrange(queues)}", rng.uniform(60, 7200))
    running = []
    for i in range(queues):
        for k in range(4):
            running.append(Job(Workload(f"r{i}-{k}", f"q{i}", [PodSet("r", 2, {"gpu": 1})],
                                        created=now - 5000), user=f"u{k}", name=rng.choice(names),
                               started=now - rng.uniform(0, 3000),
                               max_runtime_s=rng.choice([3600, 7200, 14400]),
                               expected_end=now + rng.uniform(60, 3600) if k == 0 else None))
    pending = []
    for n in range(pending_n):
        pending.append(Job(Workload(f"p{n}", f"q{n % queues}",
                                    [PodSet("r", rng.choice([1, 2, 4, 8]), {"gpu": 1})],
                                    priority=rng.choice(["low", "normal", "normal", "high"]),
                                    created=now - pending_n + n),
                           user=f"u{rng.randrange(5)}", name=rng.choice(names),
                           max_runtime_s=rng.choice([1800, 3600, 7200])))
    return Snapshot(qs, running=running, pending=pending, history=h, now=now)


def speed(repeat: int = 3) -> dict:
    """Best and worst of ``repeat`` rounds, with the default horizon and with none."""
    snap = big_state()
    newcomer = Job(Workload("new", "q7", [PodSet("r", 4, {"gpu": 1})], priority="low",
                            created=snap.now), user="u1", name="exp3", max_runtime_s=3600)
    import dataclasses
    errs = StartErrors()  # a machine in use: 200 past forecasts scored (the ranges need no more runs)
    rng = random.Random(1)
    for _ in range(200):
        e = rng.uniform(0, 7200)
        errs.add(rng.choice([1, 2, 4, 8]), rng.choice([100, 500, 500, 1000]), e, e * rng.lognormvariate(0, 0.5))
    out = {}
    for label, hz, st in (("48 h horizon", HORIZON_S, snap),
                          ("48 h horizon, ranges from past errors", HORIZON_S,
                           dataclasses.replace(snap, start_errors=errs)),
                          ("no horizon", 1e12, snap)):
        plan_s, all_s = [], []
        for _ in range(repeat):
            t = time.perf_counter()
            p = plan(st, newcomer, horizon_s=hz)
            plan_s.append(time.perf_counter() - t)
            t = time.perf_counter()
            fcs = forecast(st, horizon_s=hz)
            all_s.append(time.perf_counter() - t)
        out[label] = dict(plan_s=min(plan_s), plan_max=max(plan_s), all_s=min(all_s),
                          all_max=max(all_s), n=len(fcs),
                          known=sum(f.expected_start is not None for f in fcs.values()),
                          position=p.position,
                          plan_start=(f"in {(p.expected_start - snap.now) / 3600:.1f} h"
                                      if p.expected_start else p.basis.split(":")[0]))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=600, help="jobs per trace")
    ap.add_argument("--seeds", default="0,1,2,3,4", help="one trace per seed; errors pooled")
    ap.add_argument("--quick", action="store_true", help="one 200-job trace, one speed round")
    ap.add_argument("--no-arrivals", action="store_true", help="forecasts without expected arrivals")
    ap.add_argument("--no-speed", action="store_true", help="accuracy only")
    ap.add_argument("--oracle", choices=("runtimes", "arrivals", "both"),
                    help="tell the forecast the trace's true runtimes and/or its real next arrivals "
                         "(what is left of the error comes from the rest)")
    a = ap.parse_args(argv)
    global ARRIVALS
    ARRIVALS = ARRIVALS and not a.no_arrivals
    if a.oracle:
        ORACLE.update(("runtimes", "arrivals") if a.oracle == "both" else (a.oracle,))
    n = 200 if a.quick else a.jobs
    seeds = [0] if a.quick else [int(x) for x in a.seeds.split(",")]
    pooled = {"at submit": ([], [], 0), "halfway": ([], [], 0)}
    pops: dict = {}
    cover = {"at submit": [0, 0, 0], "halfway": [0, 0, 0]}  # inside the range, with a range, bound violated
    for seed in seeds:
        r = accuracy(n, seed)
        line = [f"seed {seed}: {r['waited']} of {n} waited (mean {r['mean_wait'] / 60:.0f} min), "
                f"{r['forecasts']} forecasts in {r['replay_s']:.1f} s"]
        for label in pooled:
            x = r[label]
            fe, ne, unk = pooled[label]
            pooled[label] = (fe + x["fe"], ne + x["ne"], unk + x["unknown"])
            cover[label] = [cover[label][0] + x["inside"], cover[label][1] + x["ranged"],
                            cover[label][2] + x["viol"]]
            sm = summarize(x["fe"], x["ne"])
            line.append(f"{label} median {sm['f_med'] / 60:.1f} vs naive {sm['n_med'] / 60:.1f} min")
        print("; ".join(line))
        for key, v in r["pops"].items():
            pops.setdefault(key, []).extend(v)
    for key in sorted(pops, key=str):
        v = pops[key]
        f, nv = statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)
        rg = [x[2] for x in v if x[2] is not None]
        print(f"  at submit, {key[0]} {key[1]}: n={len(v)} forecast median {f / 60:.1f} min, naive "
              f"{nv / 60:.1f} min, ratio {f / nv if nv else float('nan'):.2f}, inside the range "
              f"{sum(rg)}/{len(rg)}")
    ok = True
    for label, (fe, ne, unk) in pooled.items():
        x = summarize(fe, ne)
        ratio = x["f_med"] / x["n_med"] if x["n_med"] else float("nan")
        ok &= ratio <= 0.5
        print(f"pooled {label:>9}: n={x['n']} (no forecast: {unk})  forecast median "
              f"{x['f_med'] / 60:5.1f} min, p90 {x['f_p90'] / 60:6.1f} min | naive median "
              f"{x['n_med'] / 60:5.1f} min, p90 {x['n_p90'] / 60:6.1f} min | median ratio "
              f"{ratio:.2f} (target <= 0.5) | inside the range {cover[label][0]}/{cover[label][1]} "
              f"({100 * cover[label][0] / max(1, cover[label][1]):.0f} %), lower-bound violations "
              f"{cover[label][2]}")
        ok &= cover[label][2] == 0
    if a.no_speed:
        return 0 if ok else 1
    sp = speed(1 if a.quick else 3)
    for label, s in sp.items():
        print(f"[{label}] plan() behind {s['n']:,} pending in 20 queues: best {s['plan_s']:.3f} s, "
              f"worst {s['plan_max']:.3f} s (target < 1 s; position {s['position']}, start "
              f"{s['plan_start']})")
        print(f"[{label}] forecast of every queued job ({s['n']:,}; {s['known']:,} get a start, the "
              f"others 'beyond the horizon'): best {s['all_s']:.3f} s, worst {s['all_max']:.3f} s "
              f"(target < 2 s)")
    s = sp["48 h horizon"]
    ok &= s["plan_s"] < 1.0 and s["all_s"] < 2.0
    print("targets met (speed: best of the rounds)" if ok else "TARGETS NOT MET")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
