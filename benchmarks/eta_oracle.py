"""Where the real agent's start-forecast error comes from: dumps of ``benchmarks/eta_replay.py``
replayed offline, told what no forecast can know.

    .venv/bin/python benchmarks/eta_oracle.py DUMP.json [DUMP.json ...]

For every measured job that waited (queued when its first forecast was read), the first start
it got (its "started" event) against four estimates made at the same moment:

- **recorded**: the agent's own forecast, as eta_replay read it;
- **rebuilt, predicted**: :func:`gpujobs.admission.forecast.forecast` on the queue as it was
  at that moment (who ran since when, who waited, who was stopping: rebuilt from the jobs'
  events) with a history of the dump's runs that ended before it (the warm-up's are not in the
  dump; no progress rates, no expected arrivals): the baseline of the columns below;
- **kinds' typical runs known**: the same, every job told its kind's true typical run time
  (a running one: the median given how long it has run), nothing about its own run;
- **exact progress rates**: the same, every running job that reports progress (eta_replay's
  ``report``, 30 %) told the end a perfect rate gives once it has reported for
  ``RATE_AFTER_S``: its true end, or for a run that fails the end of its full run (a rate
  cannot see the failure coming); the others predicted;
- **running jobs' ends known**, **queued jobs' runtimes known**, **both known**: the same,
  those jobs told their true remaining run time (the sum of its runs' lengths from the events);
- **sampled runtimes, median start**: the rebuilt forecast run ``SAMPLES`` times, each job's
  runtime drawn from its predictor's distribution (``expected_runtime(..., q=u)``, ``u``
  uniform: a draw from the history of similar runs, given how long it has run, or from the
  user's shares of their limits), and the median of the starts: the start distribution's
  median, where the rebuilt forecast plugs each job's median runtime into one run;
- **arrivals known**: the rebuilt forecast given, in place of the agent's expected arrivals,
  the jobs really submitted later (their times, queues, sizes, priorities; their run times
  predicted as any queued job's), under the agent's own rule for arrivals: what a perfect
  arrival model would give;
- **all known**: the scenario replayed through the admission engine with the true
  submissions and run times, preempted runs stopping after the dump's median stop time: what
  a forecast that knew everything (runtimes, arrivals) would say. Its error is the floor the
  agent itself leaves (its scheduling passes, process spawn, events' timing);
- **naive** (as eta_replay computed it: position x mean runtime / slots).

With ``--floor``, three more columns ask what *any* forecast could do on these traces. Each is
the median start of ``SAMPLES`` runs in which every job's work is drawn from eta_replay's own
generator given what a forecast sees (its kind and true typical run, its declared limit or none,
how long it has run: :func:`posterior_work`), so the runtime model is the true one:

- **generator known, no arrivals**: nothing about the jobs not yet submitted;
- **generator known, arrivals drawn**: each run also draws the jobs still to come from the
  scenario's own arrival process (rate, sizes, priorities, sweeps' bursts: eta_replay's
  ``make_jobs``, as many as the scenario has left), their work drawn too;
- **generator known, real arrivals**: the jobs really submitted later (times, sizes,
  priorities), their work drawn: a forecast that knew the future submissions.

Printed per scenario, size and priority: the median absolute error of each against the
naive one's (the ratio eta_replay reports); with several dumps, also over all their jobs
pooled (as ``eta_replay.py --pool``). The offline part takes seconds.
"""
from __future__ import annotations

import argparse
import heapq
import math
import random
import statistics
import sys
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpujobs.admission import DEFAULT_PRIORITIES, ClusterQueue, Cohort, Engine, PodSet, Workload  # noqa: E402
from gpujobs.admission.forecast import History, Job, Snapshot, forecast  # noqa: E402
from gpujobs.admission.forecast.inputs import expected_end, expected_runtime  # noqa: E402
from gpujobs.admission.forecast.runtimes import lognormal_given  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eta_replay import draw_fail, draw_limit, draw_run, load_dump, make_jobs  # noqa: E402  (its generator; its dumps)

GRACE = 2.0  # eta_replay's grace period
RATE_AFTER_S = 2.0  # s of reports (20 of eta_replay's 0.1 s steps: progress.RATE_WINDOW) before a rate is known
RUN_SIGMA = 0.35  # eta_replay's spread of a run's length around its kind's typical one (log-normal)
RUN_ENDS = ("preempted", "finished", "cancelled")  # what ends a run's work (a preempted one stops)
SIZES = (1, 2, 4, 8)
SAMPLES = 21  # runs of the "sampled" column
MODES = {"predicted": set(), "typical_known": {"typical"}, "rates_known": {"rates"}, "running_known": {"running"},
         "queued_known": {"queued"}, "runtimes_known": {"running", "queued"}, "arrivals_known": {"arrivals"}}  # column -> whose true runtimes forecast_at is told
PRIOS = ("low", "normal", "high")


def queues(slots: int) -> list[ClusterQueue]:
    """eta_replay's CONFIG: two queues of half the slots sharing a cohort."""
    return [ClusterQueue(q, {"gpu": float(slots // 2)}, cohort="lab", within_queue="LowerPriority",
                         reclaim_within_cohort="Any") for q in ("qa", "qb")]


def runs(row: dict) -> list[tuple[float, float, float | None]]:
    """(start, end of its work, when its quota came back) of each run, from the events (a
    preempted run's work ends at "preempted", its quota at "requeued")."""
    out, start, ended = [], None, None
    for t, kind in row["events"]:
        if kind == "started":
            start = t
        elif kind in RUN_ENDS and start is not None:
            if kind == "preempted":
                ended = t
                continue
            out.append((start, t, t))
            start = None
        elif kind == "requeued" and start is not None:
            out.append((start, ended if ended is not None else t, t))
            start, ended = None, None
    return out


def workload(row: dict) -> Workload:
    return Workload(row["id"], row["kind"]["queue"], [PodSet("ranks", row["gpus"], {"gpu": 1})],
                    priority=row["prio"], created=row["submitted"])


def tell(job: Job, work: float) -> Job:
    """``job`` told its run time ``work`` (the limit predictor says it: grace 0, and no history
    for user "(told)")."""
    job.user, job.max_runtime_s, job.grace_period_s = "(told)", max(1e-3, work), 0.0
    return job


def current_run(row: dict, t: float) -> tuple[float, float, float | None]:
    """The last of its runs that started by ``t`` (:func:`runs`), or one starting at ``t``."""
    return ([x for x in runs(row) if x[0] <= t] or [(t, t, t)])[-1]


def state_at(row: dict, t: float) -> str:
    """"pending", "running", "stopping" or "gone" (not submitted yet, or ended) at ``t``."""
    if row["submitted"] > t:
        return "gone"
    state = "pending"
    for when, kind in row["events"]:
        if when > t:
            break
        state = {"admitted": "running", "started": "running", "preempted": "stopping",
                 "requeued": "pending", "queued": "pending", "finished": "gone",
                 "cancelled": "gone"}.get(kind, state)
    return state


def work_left(row: dict, t: float) -> float:
    """Run time still to come after ``t`` (its runs' work, the part after ``t``)."""
    return sum(max(0.0, end - max(start, t)) for start, end, _ in runs(row))


def history_at(every: list[dict], t: float) -> History:
    """The runs of the dump's jobs that ended before ``t`` (the final run of each: its length
    and declared limit), as the agent's history would hold them (less the warm-up's)."""
    h = History()
    done = []
    for r in every:
        rr = runs(r)
        if rr and rr[-1][2] is not None and rr[-1][2] <= t and r["final"] in ("succeeded", "failed"):
            done.append((rr[-1][2], r, rr[-1][2] - rr[-1][0]))
    for _, r, length in sorted(done, key=lambda x: x[0]):
        h.add(r["kind"]["user"], r["kind"]["name"], r["kind"]["queue"], length, r["limit"], GRACE)
    return h


def typical_given(typical: float, elapsed: float) -> float:
    """The median run of a kind whose runs are log-normal around ``typical`` (eta_replay's
    sigma), given it has run ``elapsed``."""
    return lognormal_given(math.log(typical), RUN_SIGMA, elapsed)


def forecast_at(rows: list[dict], row: dict, slots: int, known: set[str], every: list[dict],
                draw: random.Random | None = None) -> float | None:
    """forecast() at the row's moment (the queue rebuilt from the events, no expected
    arrivals); the jobs in ``known`` ("running", "queued") are told their true remaining run
    time, the others are predicted from ``history_at`` and their declared limits; with
    "arrivals", the jobs submitted after the moment are its arrivals. With ``draw``, every job
    is told a runtime drawn from its predictor's distribution instead (see "sampled")."""
    t = row["at"]
    # told everything of every job, no history: a run the simulation preempts must not fall back
    # to it either
    history = History() if "typical" in known or {"running", "queued"} <= known else history_at(every, t)
    running, pending = [], []
    for r in rows:
        st = state_at(r, t)
        if st == "gone":
            continue
        job = Job(workload(r), user=r["kind"]["user"], name=r["kind"]["name"],
                  max_runtime_s=r["limit"], grace_period_s=GRACE)
        if "typical" in known:  # the kind's true typical run, nothing of this run
            job.user, job.grace_period_s, job.max_runtime_s = "(told)", 0.0, None
        if st == "pending":
            if draw is not None:  # a drawn runtime, told as a limit without grace (see "queued")
                rt, _src = expected_runtime(job, history, 0.0, q=draw.random())
                if rt is not None:
                    tell(job, rt)
            elif "typical" in known:
                job.max_runtime_s = r["kind"]["typical"]
            elif "queued" in known:
                tell(job, work_left(r, t))
            pending.append(job)
            continue
        start, _end, back = current_run(r, t)
        job.started = start
        if st == "stopping":
            job.stops_at = back if back is not None else t
            job.grace_period_s = 0.0  # the stop comes at stops_at (it did)
        elif draw is not None:
            rt, _src = expected_runtime(job, history, t - start, q=draw.random())
            if rt is not None:
                job.expected_end = max(t, start + rt)
        elif "running" in known:
            job.expected_end, job.max_runtime_s = t + work_left(r, t), None
        elif "rates" in known and r["report"] and t - start >= RATE_AFTER_S:
            job.expected_end = t + work_left(r, t) + (r["run"] * (1 - r["fail"]) if r["fail"] else 0.0)
        elif "typical" in known:
            job.expected_end = start + typical_given(r["kind"]["typical"], t - start)
        running.append(job)
    arrivals = sorted(((r["submitted"], Job(workload(r), user=r["kind"]["user"], name=r["kind"]["name"],
                                            max_runtime_s=r["limit"], grace_period_s=GRACE))
                       for r in rows if r["submitted"] > t), key=lambda a: a[0]) if "arrivals" in known else []
    snap = Snapshot(queues(slots), [Cohort("lab")], DEFAULT_PRIORITIES, None, running, pending, history, t,
                    arrivals=arrivals)
    fc = forecast(snap, ids=[row["id"]], reasons=False).get(row["id"])
    return None if fc is None else fc.expected_start  # None: its events say it had left the queue


def median_start(row: dict, start: Callable[[random.Random], float | None]) -> float | None:
    """The median of ``SAMPLES`` starts ``start(rng)`` (None: no start, later than any), each
    run's rng seeded by the job and the run, so a rerun gives the same number."""
    starts = sorted(math.inf if (s := start(random.Random(f"{row['id']}:{i}"))) is None else s
                    for i in range(SAMPLES))
    mid = starts[(len(starts) - 1) // 2]
    return None if mid == math.inf else mid


def sampled_at(rows: list[dict], row: dict, slots: int, every: list[dict]) -> float | None:
    """The median start of ``SAMPLES`` rebuilt forecasts with drawn runtimes."""
    return median_start(row, lambda rng: forecast_at(rows, row, slots, set(), every, rng))


def all_known(rows: list[dict], slots: int, stop_s: float) -> dict[str, float]:
    """First admission of each job in an engine replay of the scenario with the true
    submissions and run lengths; a preempted run stops ``stop_s`` after its preemption."""
    eng = Engine(queues(slots), [Cohort("lab")], DEFAULT_PRIORITIES)
    by = {r["id"]: r for r in rows}
    left = {r["id"]: sum(end - start for start, end, _ in runs(r)) for r in rows}
    ev: list = []
    seq = 0

    def push(when: float, kind: str, wid: str, ver: int = 0) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(ev, (when, seq, kind, wid, ver))

    for r in rows:
        push(r["submitted"], "arrive", r["id"])
    first: dict[str, float] = {}
    started: dict[str, float] = {}
    ver: dict[str, int] = {}
    stopping: set[str] = set()
    while ev:
        t, _, kind, wid, v = heapq.heappop(ev)
        if kind == "arrive":
            eng.add(workload(by[wid]))
        elif kind == "end":
            if ver.get(wid) != v:
                continue
            eng.finish(wid)
        elif kind == "stop":
            eng.requeue(wid)
            stopping.discard(wid)
        d = eng.schedule()
        for vic, _by in d.preempted:
            if vic in stopping:
                continue
            stopping.add(vic)
            left[vic] = max(0.0, left[vic] - (t - started[vic]))
            ver[vic] = ver.get(vic, 0) + 1  # its end is void
            push(t + stop_s, "stop", vic)
        for adm in d.admitted:
            a = adm.id
            first.setdefault(a, t)
            started[a] = t
            ver[a] = ver.get(a, 0) + 1
            push(t + left[a], "end", a, ver[a])
    return first


def _stop_time(rows: list[dict]) -> float:
    """The median time from "preempted" to "requeued" in the dump (2 s, the grace, without any)."""
    gaps = []
    for r in rows:
        last = None
        for t, kind in r["events"]:
            if kind == "preempted":
                last = t
            elif kind == "requeued" and last is not None:
                gaps.append(t - last)
                last = None
    return statistics.median(gaps) if gaps else 2.0


def line(label: str, rows: list[dict], columns: tuple[str, ...]) -> str:
    got = [r for r in rows if r["naive"] is not None and r["expected"] is not None]
    if not got:
        return f"| {label} | 0 |" + " |" * (len(columns) + 1)
    med = {k: statistics.median([abs(r[k] - r["actual"]) for r in got if r.get(k) is not None] or [math.nan])
           for k in ("naive", *columns)}
    n = med["naive"]
    return (f"| {label} | {len(got)} | {n:.1f} | " + " | ".join(
        f"{med[k]:.1f} ({med[k] / n:.2f})" if n else f"{med[k]:.1f}" for k in columns) + " |")


COLUMNS = ("expected", "predicted", "sampled", "typical_known", "rates_known", "running_known", "queued_known",
           "runtimes_known", "arrivals_known", "all_known")
FLOOR = {"floor_none": "generator known, no arrivals", "floor_drawn": "generator known, arrivals drawn",
         "floor_real": "generator known, real arrivals"}  # --floor's columns


def posterior_work(row: dict, done: float, rng: random.Random, tries: int = 5000) -> float:
    """A draw of the row's whole work (its run, or the part before its failure) from
    eta_replay's generator, given what a forecast can see: its kind's typical run, its declared
    limit (or none: 15 % of any run) and that it has worked ``done`` s already (rejection
    sampling; past ``tries`` draws, a run already longer than the model allows ends in 0.5 s)."""
    k, limit = row["kind"], row["limit"]
    for _ in range(tries):
        run = draw_run(k, rng)
        if limit is not None and draw_limit(k, run, rng) != limit:
            continue
        fail = draw_fail(rng)
        work = run * fail if fail is not None else run
        if work > done:
            return work
    return done + 0.5


def worked(row: dict, t: float) -> float:
    """The work its runs did before ``t``."""
    return sum(max(0.0, min(end, t) - start) for start, end, _ in runs(row) if start <= t)


def drawn_arrivals(rows: list[dict], t: float, slots: int, rng: random.Random) -> list[tuple[float, Job]]:
    """The jobs the row's scenario has still to submit after ``t``, drawn from its own process."""
    kinds = list({r["kind"]["name"]: r["kind"] for r in rows}.values())  # those seen in the scenario
    left = sum(1 for r in rows if r["submitted"] > t)
    if not left:
        return []
    jobs = make_jobs(rows[0]["scenario"], kinds, rng, slots, (left + 0.5) / 60)[:left]  # 60 x scale jobs
    out = []
    for i, j in enumerate(jobs):
        j.update(id=f"(drawn {i})", submitted=t + j["t"])
        out.append((t + j["t"], tell(Job(workload(j)), j["run"] * (j["fail"] or 1.0))))
    return out


def floor_at(rows: list[dict], row: dict, slots: int, arrivals: str, rng: random.Random) -> float | None:
    """One start of the row in a rebuilt queue whose every job's work is a draw of
    :func:`posterior_work`; ``arrivals``: "none", "drawn" or "real" (see the docstring)."""
    t = row["at"]
    running, pending = [], []
    for r in rows:
        st = state_at(r, t)
        if st == "gone":
            continue
        done = worked(r, t)
        if st == "pending":
            pending.append(tell(Job(workload(r)), posterior_work(r, done, rng) - done))
            continue
        start, _end, back = current_run(r, t)
        job = Job(workload(r), grace_period_s=GRACE, started=start)  # a victim stops in eta_replay's grace
        if st == "stopping":
            job.stops_at, job.grace_period_s = (back if back is not None else t), 0.0
        else:
            job.expected_end = t + posterior_work(r, done, rng) - done
        running.append(job)
    later: list[tuple[float, Job]] = []
    if arrivals == "real":
        later = sorted(((r["submitted"], tell(Job(workload(r)), posterior_work(r, 0.0, rng))) for r in rows
                        if r["submitted"] > t), key=lambda a: a[0])
    elif arrivals == "drawn":
        later = drawn_arrivals(rows, t, slots, rng)
    snap = Snapshot(queues(slots), [Cohort("lab")], DEFAULT_PRIORITIES, None, running, pending, History(), t,
                    arrivals=later)
    fc = forecast(snap, ids=[row["id"]], reasons=False).get(row["id"])
    return None if fc is None else fc.expected_start


def floor_sampled(rows: list[dict], row: dict, slots: int, arrivals: str) -> float | None:
    """The median of ``SAMPLES`` :func:`floor_at` starts."""
    return median_start(row, lambda rng: floor_at(rows, row, slots, arrivals, rng))


def end_errors(rows: list[dict]) -> dict[tuple[str, bool], list[float]]:
    """For every running job at every waiting job's forecast moment: its predicted end (from
    ``history_at``, as the rebuilt forecast predicts it) minus its real one, by (source, whether
    it had already run longer than every similar run)."""
    out: dict[tuple[str, bool], list[float]] = {}
    for row in rows:
        if row["phase"] != "queued":
            continue
        t = row["at"]
        scen = [r for r in rows if r["scenario"] == row["scenario"]]
        history = history_at([r for r in rows if r["scenario"] != row["scenario"]] + scen, t)
        for r in scen:
            current = [x for x in runs(r) if x[0] <= t]
            if state_at(r, t) != "running" or not current:
                continue
            start, _end, back = current[-1]
            job = Job(workload(r), user=r["kind"]["user"], name=r["kind"]["name"], max_runtime_s=r["limit"],
                      grace_period_s=GRACE, started=start)
            end, src = expected_end(job, history, t)
            if end is None or back is None:
                continue
            similar = history.runtime(r["kind"]["user"], r["kind"]["name"], r["kind"]["queue"], 0.0, 1.0)
            out.setdefault((src, similar is not None and t - start > similar), []).append(end - back)
    return out


def populations(waited: list[dict], columns: tuple[str, ...]) -> None:
    for sc in dict.fromkeys(r["scenario"] for r in waited):
        print(line(f"scenario {sc}", [r for r in waited if r["scenario"] == sc], columns))
    for g in SIZES:
        print(line(f"{g} GPU{'s' if g > 1 else ''}", [r for r in waited if r["gpus"] == g], columns))
    for p in PRIOS:
        print(line(f"priority {p}", [r for r in waited if r["prio"] == p], columns))
    print(line("all", waited, columns))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("dumps", nargs="+", help="files written by eta_replay.py --dump")
    ap.add_argument("--slots", type=int, default=8, help="as given to eta_replay.py")
    ap.add_argument("--ends", action="store_true",
                    help="also the running jobs' predicted ends against their real ones, by source")
    ap.add_argument("--floor", action="store_true",
                    help=f"also the generator-known columns ({SAMPLES} drawn runs each; minutes)")
    a = ap.parse_args(argv)
    columns = COLUMNS + (tuple(FLOOR) if a.floor else ())
    print("| population | waited | naive median (s) | recorded (ratio) | rebuilt, predicted | sampled runtimes, "
          f"median start ({SAMPLES} runs) | kinds' typical runs known | exact progress rates | running jobs' ends known | queued jobs' runtimes known | "
          "both known | arrivals known | all known |" + "".join(f" {FLOOR[k]} |" for k in columns if k in FLOOR)
          + "\n|" + "---|" * (len(columns) + 3))
    pooled: list[dict] = []
    for path in a.dumps:
        rows = load_dump(path)
        for i, r in enumerate(rows):
            r.setdefault("id", f"j{i}")
        stop_s = _stop_time(rows)
        waited = []
        for sc in dict.fromkeys(r["scenario"] for r in rows):
            scen = [r for r in rows if r["scenario"] == sc and r["submitted"] is not None]
            first = all_known(scen, a.slots, stop_s)
            for r in scen:
                if r["phase"] != "queued" or r["actual"] is None:
                    continue
                done_before = [x for x in rows if x["scenario"] != sc] + scen
                for key, known in MODES.items():
                    r[key] = forecast_at(scen, r, a.slots, known, done_before)
                r["sampled"] = sampled_at(scen, r, a.slots, done_before)
                r["all_known"] = first.get(r["id"])
                for key in columns:
                    if key in FLOOR:
                        r[key] = floor_sampled(scen, r, a.slots, key.removeprefix("floor_"))
                waited.append(r)
        print(f"| **{Path(path).name}** (preempted runs stop in {stop_s:.2f} s) |" + " |" * (len(columns) + 2))
        populations(waited, columns)
        pooled += waited
        if a.ends:
            for (src, past), errs in sorted(end_errors(rows).items()):
                print(f"  running jobs' ends from {src}{' (ran longer than every similar run)' if past else ''}: "
                      f"n={len(errs)}, predicted - real: median {statistics.median(errs):+.1f} s")
    if len(a.dumps) > 1:
        print(f"| **{len(a.dumps)} dumps pooled** |" + " |" * (len(columns) + 2))
        populations(pooled, columns)
    return 0


if __name__ == "__main__":
    sys.exit(main())
