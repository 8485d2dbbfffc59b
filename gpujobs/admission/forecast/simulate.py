"""The forward simulation: a fresh engine plays the queue forward (ends, evictions, requeues,
``schedule()`` passes) and :func:`forecast` / :func:`plan` turn its run into answers."""
from __future__ import annotations

import bisect
import dataclasses

import heapq
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from .inputs import (AHEAD_SHOWN, HORIZON_S, RANGE_HORIZON_S, SOURCES, Forecast, Job, Snapshot, expected_end,
                     expected_runtime, stop_after)
from ...status import start_when
from .reasons import amount_text, basis_text, priority_rank, waiting_reasons, duration

#: The safety bound: at most this many ``schedule()`` passes (plus two per workload) at one
#: simulated instant; past it the run stops there (``_Run.looped``) and the jobs it has not
#: started get no start and a basis saying so. The churn detection below keeps real runs far
#: from it: it is there so that no future bug can make a forecast spin for ever.
MAX_PASSES_AT_ONE_INSTANT = 200
ARRIVAL_RUNS = 4  # runs with expected arrivals per forecast, at most (see _with_arrivals)
ARRIVALS_STATE_MAX = 200  # expected arrivals are simulated only up to this many pending jobs
OVERTAKEN_SAY = 1.5  # a reason names the start with every expected arrival from this many times the wait on


# ------------------------------------------------------------- simulation
@dataclass
class _Run:
    starts: dict[str, float]
    basis: dict[str, tuple]  # id -> counts of end sources (per SOURCES) seen before its start
    preempts: dict[str, list[str]]
    ends: dict[str, tuple[float | None, str]]  # running-at-snapshot id -> (end, source)
    reasons: dict[str, Forecast]
    unknown: dict[str, set[str]]  # group (cohort or queue) -> ids holding quota, end unknown
    cut: bool = False  # stopped at the horizon with events left
    looped: float | None = None  # the instant where preemptions repeated without end (run stopped there)
    overtaken: dict[str, float | None] = dataclasses.field(default_factory=dict)  # id -> start with every expected arrival (_with_arrivals)


def _repeats(seen: set, key: tuple) -> bool:
    """Whether the workloads admitted and stopping (``key``) are as after an earlier pass at
    this instant: preemptions there go round (see :meth:`_Sim.run`); notes ``key``."""
    again = key in seen
    seen.add(key)
    return again


class _Sim:
    """One forward run with the runtimes of ``mode`` (see :func:`expected_runtime`): ``point``
    for the expected start, ``early``/``late`` for its range (``early``: unknown ends are now)."""

    def __init__(self, snap: Snapshot, pending: Sequence[Job], mode: str,
                 targets: set[str] | None, want_reasons: bool,
                 reasons_for: set[str] | None = None, horizon_s: float = HORIZON_S,
                 until: float | None = None, arrivals: Sequence[tuple[float, Job]] = ()):
        self.snap, self.pending, self.mode = snap, pending, mode
        self.arrivals = arrivals  # (time, job) queued at that time (see _with_arrivals)
        self.targets, self.want_reasons, self.reasons_for = targets, want_reasons, reasons_for
        self.horizon_s = horizon_s
        self.until = until  # stop past this time (the early run: past the latest expected start)

    def run(self) -> _Run:
        snap = self.snap
        clock = [snap.now]
        eng = snap.engine(lambda: clock[0])  # the engine's clock is the simulated time
        now = t = snap.now
        horizon = now + self.horizon_s
        stop = min(horizon, self.until) if self.until is not None else horizon
        cut = False
        jobs: dict[str, Job] = {}
        events: list = []
        seq = 0
        version: dict[str, int] = {}
        src_of: dict[str, str] = {}
        ran: dict[str, float] = {}
        run_start: dict[str, float] = {}
        stopping: set[str] = set()
        ends: dict[str, tuple[float | None, str]] = {}
        unknown: dict[str, set[str]] = defaultdict(set)
        group: dict[str, str] = {}  # id -> cohort (or queue) whose ends count for its basis
        groups = _groups(snap)

        def grp(j: Job) -> str:
            g = group.get(j.id)
            if g is None:
                g = group[j.id] = groups[j.workload.queue]
            return g

        def push(when: float, kind: str, wid: str) -> None:
            nonlocal seq
            seq += 1
            version[wid] = version.get(wid, 0) + 1
            heapq.heappush(events, (when, seq, kind, wid, version[wid]))

        for j in snap.running:
            jobs[j.id] = j
            # what was admitted stays admitted, even above a quota lowered since (a cluster's record)
            eng.restore_admitted(j.workload, j.flavor, check=False)
            run_start[j.id] = j.started if j.started is not None else now
            if j.stops_at is not None:
                eng.evict(j.id)  # it keeps its quota until it stops; no new preemption for it
                stopping.add(j.id)
                after, src = stop_after(j, snap.history, self.mode)  # it may exit at once
                exits = max(now, j.stops_at - j.grace_period_s + after)
                src_of[j.id] = src
                push(exits, "stop", j.id)
                ends[j.id] = (exits, "stopping")
                continue
            end, src = expected_end(j, snap.history, now, self.mode)
            ends[j.id] = (end, src)
            if end is None:
                unknown[grp(j)].add(j.id)
            if end is not None:
                src_of[j.id] = src
                push(end, "end", j.id)
        for j in self.pending:
            jobs[j.id] = j
            eng.add(j.workload)  # whether it can ever fit: asked once per queue and request shape
        if self.mode != "early":  # jobs expected to be submitted later (none in the early run)
            for at, j in self.arrivals:
                if at > now and expected_runtime(j, snap.history, 0.0, self.mode)[0] is not None:
                    jobs[j.id] = j  # one whose end nothing predicts would hold its quota for ever: left out
                    push(at, "arrive", j.id)
        arriving = {j.id for _, j in self.arrivals}
        counts: dict[str, list[int]] = defaultdict(lambda: [0] * len(SOURCES))
        starts: dict[str, float] = {}
        basis: dict[str, tuple] = {}
        preempts: dict[str, list[str]] = defaultdict(list)
        reasons: dict[str, Forecast] = {}
        targets = self.targets
        if targets is None and arriving:  # the expected arrivals matter only until the last real start
            targets = {j.id for j in self.pending}
        left = set(targets) if targets is not None else None
        first = True
        looped = None
        ended = passes = 0  # ends so far; schedule() passes at this instant
        requeues: set[float] = set()  # times a "requeue" event is pushed for
        seen: set = set()  # (ends, who is admitted or stopping) after each pass at this instant
        bound = MAX_PASSES_AT_ONE_INSTANT + 2 * len(jobs)
        while True:
            d = eng.schedule()
            passes += 1
            if passes > bound:  # the safety bound (MAX_PASSES_AT_ONE_INSTANT): stop, say so
                looped, cut = t, True
                break
            # Kueue's rules can make preemptions go round: two queues' heads each preempt their
            # own queue's lower-priority jobs to borrow the other's idle quota, which that queue's
            # jobs take back first (non-borrowing heads go first), so the victims come back and
            # are preempted again. Each turn costs the victims' stop time; with none (the early
            # run, grace_period_s=0) every turn is at this same instant. Once the same jobs are
            # admitted and stopping as after an earlier pass here, the victims issued now stop at
            # the next event instead (the churn lasts until something else changes); with no
            # next event it lasts for ever and the run ends.
            churn = bool(d.preempted) and _repeats(seen, (ended, frozenset(
                (w, eng.state(w)) for w in eng.admitted())))
            later = None
            if churn:
                later = min((e[0] for e in events if e[0] > t and version.get(e[3]) == e[4]), default=None)
                if later is None:
                    looped = t
            for vic, by in d.preempted:
                preempts[by].append(vic)
                if vic in stopping:
                    continue
                stopping.add(vic)
                after, src_of[vic] = stop_after(jobs[vic], snap.history, self.mode)
                if churn and after <= 0:
                    if later is None:
                        continue  # it never stops: the churn goes on, nothing else happens
                    after = later - t
                push(t + after, "stop", vic)  # replaces its end event
            for adm in d.admitted:
                wid = adm.id
                j = jobs[wid]
                if wid not in starts:
                    starts[wid] = t
                    basis[wid] = tuple(counts[grp(j)])
                    if wid in arriving:  # an expected arrival started ahead of those still waiting
                        counts[grp(j)][SOURCES.index("arrival")] += 1
                    if left is not None:
                        left.discard(wid)
                run_start[wid] = t
                rt, src = expected_runtime(j, snap.history, 0.0, self.mode)
                if rt is not None and wid in ran:
                    rt = max(0.0, rt - ran[wid])  # a preempted job resumes from its checkpoint
                if wid not in ends:
                    ends[wid] = (t + rt if rt is not None else None, src)
                if rt is None:
                    unknown[grp(j)].add(wid)
                if rt is not None:
                    src_of[wid] = src
                    push(t + rt, "end", wid)
            if first:
                first = False
                if self.want_reasons:
                    reasons = waiting_reasons(self.snap, eng, jobs, ends, preempts, stopping,
                                       self.reasons_for)
            if left is not None and not left:
                break
            for due in eng.requeue_times():  # parked workloads back in their queues (Kueue's batch period)
                if due > t and due not in requeues:
                    requeues.add(due)
                    push(due, "requeue", f"(requeue at {due!r})")
            if not events:
                break
            when = events[0][0]
            if when > stop:
                cut = True  # beyond the horizon: no start (see HORIZON_S)
                break
            if when > t:
                passes = 0
                seen.clear()
            t = clock[0] = when
            batch = []
            while events and events[0][0] == when:
                item = heapq.heappop(events)
                if version.get(item[3]) == item[4]:
                    batch.append(item)
            for _, _, kind, wid, _ver in batch:
                if kind == "requeue":
                    continue  # the next schedule() puts them back
                if kind == "arrive":
                    eng.add(jobs[wid].workload, check=False)  # its shape came from a submitted job
                elif kind == "end":
                    eng.finish(wid)
                    ended += 1
                    counts[grp(jobs[wid])][SOURCES.index(src_of.get(wid, "unknown"))] += 1
                else:
                    if src_of.get(wid) == "stop":  # a learned stop time (a grace period is not counted)
                        counts[grp(jobs[wid])][SOURCES.index("stop")] += 1
                    src_of.pop(wid, None)
                    stopping.discard(wid)
                    ran[wid] = ran.get(wid, 0.0) + max(0.0, t - run_start.get(wid, t))
                    eng.requeue(wid)
        return _Run(starts, basis, dict(preempts), ends, reasons, dict(unknown), cut, looped)


def _groups(snap: Snapshot) -> dict[str, str]:
    """LocalQueue or ClusterQueue name -> the cohort (or queue) that shares its quota."""
    parent = {c.name: getattr(c, "parent", None) for c in snap.cohorts}

    def root(c: str) -> str:  # hierarchical cohorts share quota up to the root of the tree
        seen = set()
        while (up := parent.get(c)) and c not in seen:
            seen.add(c)
            c = up
        return c
    out = {}
    for q in snap.queues:
        for name in (q.name, *q.local_queues):
            out[name] = root(q.cohort) if q.cohort else q.name
    return out


# ----------------------------------------------------------------- reasons


def _calibrated(snap: Snapshot, jobs: Iterable[Job], starts: dict[str, float]) -> dict[str, tuple]:
    """(early, late, pairs, own size) from past forecasts' errors (:mod:`.calibration`) for the
    jobs with an expected start within ``RANGE_HORIZON_S`` whose population has enough of them.
    A job whose size has too few (``own size`` False) also gets the early and late runs, and its
    range is both together (:func:`_finish`)."""
    errs = snap.start_errors
    out: dict[str, tuple] = {}
    if errs is None or not len(errs):
        return out
    for j in jobs:
        s = starts.get(j.id)
        if s is not None and s <= snap.now + RANGE_HORIZON_S:
            r = errs.range(j.workload.total().get("gpu", 0.0), priority_rank(snap, j.workload.priority), snap.now, s)
            if r is not None:
                out[j.id] = r
    return out


def _own(calibrated: dict[str, tuple], wid: str) -> bool:
    """Whether ``wid``'s range comes from its own size's past errors alone (no range runs)."""
    return wid in calibrated and calibrated[wid][3]


def _finish(snap: Snapshot, pess: _Run, early: _Run | None, late: _Run | None, ids: Iterable[str],
            unknown_labels: Callable[[str], str], horizon_s: float,
            calibrated: dict[str, tuple] | None = None) -> dict[str, Forecast]:
    out = {}
    now = snap.now
    edge = now + horizon_s
    calibrated = calibrated or {}
    for wid in ids:
        fc = pess.reasons.get(wid) or Forecast(wid, None, "", "")
        fc.not_before = now  # any job holding quota may end at any moment: nothing later is certain
        start = pess.starts.get(wid)
        if start is not None:
            fc.expected_start = start
            fc.basis = basis_text(pess.basis.get(wid, ()), start, now)
            if _own(calibrated, wid):
                lo, hi, n, _ = calibrated[wid]
                fc.expected_start_range = (lo, hi)
                fc.basis += f"; range from the errors of {n} past forecasts"
            elif start <= now + RANGE_HORIZON_S:
                lo = early.starts.get(wid, start) if early is not None else start
                hi = late.starts.get(wid, edge) if late is not None else start
                if wid in calibrated:  # other sizes' errors, and the runs
                    cal_lo, cal_hi, n, _ = calibrated[wid]
                    lo, hi = min(lo, cal_lo), max(hi, cal_hi)
                    fc.basis += f"; range from the errors of {n} past forecasts of other sizes, and the early and late runs"
                if wid in pess.overtaken:  # later arrivals pass it while they come: as late as with all of them
                    hi = max(hi, edge if pess.overtaken[wid] is None else pess.overtaken[wid])
                    fc.basis += "; late end with every expected arrival"
                fc.expected_start_range = (min(lo, start), max(hi, start))
            else:
                fc.basis += f" (no range beyond {duration(RANGE_HORIZON_S)})"
            if fc.reason and start > now:
                fc.reason += f"; expected to start {start_when(start, now)}"
            if wid in pess.overtaken:
                fc.reason += _overtaken_text(snap, pess.overtaken[wid], start, horizon_s)
        elif pess.looped is not None and (pess.cut or not unknown_labels(wid)):  # the safety bound
            at = "now" if pess.looped <= now + 1 else start_when(pess.looped, now)
            fc.basis = ("unknown: the simulation stopped where its preemptions repeat without end "
                        f"(victims readmitted and preempted again), {at}")
            fc.reason += ("; " if fc.reason else "") + "start unknown (preemptions repeat)"
        elif not unknown_labels(wid):  # nothing unknown: it starts beyond the horizon
            fc.basis = f"beyond the forecast horizon ({duration(horizon_s)} ahead) on expected ends"
            fc.reason += ("; " if fc.reason else "") + f"starts more than {duration(horizon_s)} from now"
        else:
            who = unknown_labels(wid)
            fc.basis = ("unknown: it waits on jobs with no declared limit, progress or history"
                        + (f" ({who})" if who else ""))
            fc.reason += ("; " if fc.reason else "") + "start unknown" + (
                f" ({who}: end unknown)" if who else "")
        fc.preempts = tuple(pess.preempts.get(wid, ()))
        out[wid] = fc
    return out


def _overtaken_text(snap: Snapshot, late: float | None, start: float, horizon_s: float) -> str:
    """The reason's words for a job later arrivals keep passing (``late``: its start with every
    expected arrival), from ``OVERTAKEN_SAY`` times its wait on; else nothing."""
    now = snap.now
    if late is not None and late - now < OVERTAKEN_SAY * (start - now):
        return ""
    span = duration(max((t for t, _ in snap.arrivals), default=now) - now)  # W: the last expected arrival
    when = start_when(late, now) if late is not None else f"more than {duration(horizon_s)} from now"
    return f"; later jobs can go first: if the next {span} bring as many as the last {span}, it starts {when}"


def _unknown_labels(snap: Snapshot, run: _Run, extra: Sequence[Job] = ()) -> Callable[[str], str]:
    """For a pending id: the jobs of its cohort (or queue) whose end is unknown, named."""
    cache: dict[str, str] = {}
    groups = _groups(snap)
    jobs = {j.id: j for j in (*snap.running, *snap.pending, *extra)}

    def labels(wid: str) -> str:
        g = groups.get(jobs[wid].workload.queue, "")
        if g not in cache:
            ids = sorted(run.unknown.get(g, ()))
            shown = [jobs[i].label if i in jobs else i for i in ids[:AHEAD_SHOWN]]
            more = f" +{len(ids) - AHEAD_SHOWN} more" if len(ids) > AHEAD_SHOWN else ""
            cache[g] = ", ".join(shown) + more
        return cache[g]
    return labels


# -------------------------------------------------------------------- API
def _restrict(snap: Snapshot, queues: Iterable[str]) -> Snapshot:
    """Only the workloads sharing quota (same cohort, or same queue) with ``queues``: the
    others cannot change when these start, so the simulation leaves them out."""
    groups = _groups(snap)
    keep = {groups[q] for q in queues if q in groups}
    if len(keep) == len(set(groups.values())):
        return snap
    return dataclasses.replace(snap, running=[j for j in snap.running if groups.get(j.workload.queue) in keep],
                               pending=[j for j in snap.pending if groups.get(j.workload.queue) in keep],
                               arrivals=[a for a in snap.arrivals if groups.get(a[1].workload.queue) in keep])


def forecast(snap: Snapshot, ids: Iterable[str] | None = None, reasons: bool = True,
             horizon_s: float = HORIZON_S) -> dict[str, Forecast]:
    """A :class:`Forecast` for every pending workload of ``snap`` (or those in ``ids``).
    Starts more than ``horizon_s`` ahead are not simulated: those get ``expected_start=None``
    and ``not_before`` = now + horizon (as squeue --start shows N/A beyond bf_window)."""
    if ids is not None:
        ids = set(ids)
        snap = _restrict(snap, {j.workload.queue for j in snap.pending if j.id in ids})
    pending = list(snap.pending)
    want = {j.id for j in pending} if ids is None else set(ids)
    pess = _Sim(snap, pending, "point", None if ids is None else want, reasons,
                None if ids is None else want, horizon_s).run()
    base = dict(pess.starts)
    pess = _with_arrivals(snap, pending, pess, want, horizon_s)
    labels = _unknown_labels(snap, pess)
    cal = _calibrated(snap, (j for j in pending if j.id in want), pess.starts)
    early, late = _range_runs(snap, pending, {w: s for w in want if (s := pess.starts.get(w)) is not None
                                              and s <= snap.now + RANGE_HORIZON_S and not _own(cal, w)}, horizon_s,
                              base)
    return _finish(snap, pess, early, late, [j.id for j in pending if j.id in want], labels, horizon_s, cal)


def _future(snap: Snapshot) -> list[tuple[float, Job]]:
    """The expected arrivals after now, in time order."""
    return sorted((a for a in snap.arrivals if a[0] > snap.now), key=lambda a: a[0])


def _due_before(future: Sequence[tuple[float, Job]], t: float) -> int:
    """How many of the expected arrivals ``future`` (in time order) come before ``t``."""
    return bisect.bisect_left(future, t, key=lambda a: a[0])


def _before(snap: Snapshot, t: float) -> list[tuple[float, Job]]:
    """The expected arrivals that come after now and before ``t``, in time order."""
    future = _future(snap)
    return future[:_due_before(future, t)]


def _with_arrivals(snap: Snapshot, pending: Sequence[Job], run: _Run, ids: Iterable[str],
                   horizon_s: float) -> _Run:
    """``run`` (without arrivals) with the starts of ``ids`` moved by the expected arrivals that
    come before each would start without them (those that can go ahead of it; the later ones
    cannot, and letting them in too would count each arrival's delay again, for ever under a
    full load). Jobs with the same number of such arrivals share one more run; at most
    ``ARRIVAL_RUNS`` more runs (a job's count rounded down to the nearest run's), none with
    more than ``ARRIVALS_STATE_MAX`` pending jobs."""
    if not snap.arrivals or len(pending) > ARRIVALS_STATE_MAX:
        return run
    future = _future(snap)
    count = {w: k for w in ids if (s := run.starts.get(w)) is not None and (k := _due_before(future, s))}
    if not count:
        return run
    levels = sorted(set(count.values()))
    if len(levels) > ARRIVAL_RUNS:  # evenly spread over the distinct counts, the largest kept
        levels = sorted({levels[round(i * (len(levels) - 1) / (ARRIVAL_RUNS - 1))] for i in range(ARRIVAL_RUNS)})
    starts, basis = dict(run.starts), dict(run.basis)
    for i, k in enumerate(levels):
        nxt = levels[i + 1] if i + 1 < len(levels) else None
        who = {w for w, c in count.items() if c >= k and (nxt is None or c < nxt)}
        got = _Sim(snap, pending, "point", who, False, None, horizon_s,
                   arrivals=future[:k]).run()
        for w in who:
            if got.starts.get(w) is not None:
                starts[w], basis[w] = got.starts[w], got.basis[w]
    return dataclasses.replace(run, starts=starts, basis=basis,
                               overtaken=_overtaken(snap, pending, future, starts, count, horizon_s))


def _overtaken(snap: Snapshot, pending: Sequence[Job], future: Sequence[tuple[float, Job]],
               starts: dict[str, float], count: dict[str, int], horizon_s: float) -> dict[str, float | None]:
    """The jobs more expected arrivals would still pass: some come after the job's start without
    them but before its start with them (a big job in ``BestEffortFIFO``, which smaller jobs keep
    passing while they come). Its point keeps its count (each later arrival's delay counted
    again would run on while the load lasts); this says how late it gets if the recent rate goes
    on: id -> its start with every expected arrival (one more run; None: beyond the horizon),
    where that is later."""
    who = {w for w, k in count.items() if w in starts and _due_before(future, starts[w]) > k}
    if not who:
        return {}
    got = _Sim(snap, pending, "point", who, False, None, horizon_s, arrivals=future).run()
    return {w: s for w in who if (s := got.starts.get(w)) is None or s > starts[w] + 1.0}


def _range_runs(snap: Snapshot, pending: Sequence[Job], starts: dict[str, float],
                horizon_s: float, base: dict[str, float] | None = None) -> tuple[_Run | None, _Run | None]:
    """The ``early`` and ``late`` runs for the ids that got an expected start (``starts``;
    none: no runs). The early run stops past the latest of those starts (an early end later
    than the expected start is the expected start) and leaves the expected arrivals out; the
    late one queues those that come before the latest start without them (``base``)."""
    if not starts:
        return None, None
    last = max((base or starts).get(w, s) or s for w, s in starts.items())
    if len(pending) > ARRIVALS_STATE_MAX:
        last = snap.now  # no arrivals there (see _with_arrivals)
    return (_Sim(snap, pending, "early", set(starts), False, None, horizon_s, max(starts.values())).run(),
            _Sim(snap, pending, "late", set(starts), False, None, horizon_s,
                 arrivals=_before(snap, last)).run())


def plan(snap: Snapshot, job: Job, horizon_s: float = HORIZON_S) -> Forecast:
    """What would happen to ``job`` if it were queued now (nothing is changed).

    ``admit_now`` when it would be admitted in the next pass (possibly after preempting
    ``preempts``), else its ``position`` and forecast. A workload that can never fit gets
    the engine's explanation and no start. Unknown queues/priorities raise SpecError, as
    submit would."""
    eng = snap.engine()
    ok, why = eng.can_ever_fit(job.workload)  # SpecError for an unknown queue
    if not ok:
        return Forecast(job.id, None, "never: it can never fit its queue", why)
    eng.add(job.workload)  # SpecError for an unknown priority class, as submit would
    snap = _restrict(snap, [job.workload.queue])
    pending = [*snap.pending, job]
    pess = _Sim(snap, pending, "point", {job.id}, True, {job.id}, horizon_s).run()
    base = dict(pess.starts)
    pess = _with_arrivals(snap, pending, pess, [job.id], horizon_s)
    labels = _unknown_labels(snap, pess, [job])
    start = pess.starts.get(job.id)
    cal = _calibrated(snap, [job], pess.starts)
    early, late = _range_runs(snap, pending, {job.id: start} if start is not None and not _own(cal, job.id) and
                              snap.now + 1e-9 < start <= snap.now + RANGE_HORIZON_S else {}, horizon_s, base)
    fc = _finish(snap, pess, early, late, [job.id], labels, horizon_s, cal)[job.id]
    if start is not None and start <= snap.now + 1e-9:
        fc.admit_now = True
        fc.position = None
        fc.blocked_by = ()
        fc.reason = "fits now" + (f" ({_fits_text(snap, job)})" if _fits_text(snap, job) else "")
    elif fc.preempts and not fc.reason.startswith("would"):
        vics = ", ".join(fc.preempts)
        they = "they stop" if len(fc.preempts) > 1 else "it stops"
        fc.reason = f"would preempt {vics} and start once {they}; " + fc.reason
    return fc


def _fits_text(snap: Snapshot, job: Job) -> str:
    need = job.workload.total()
    need = {"gpu": need["gpu"]} if need.get("gpu") else need  # GPUs say it; else every resource
    return ", ".join(amount_text(a, r) for r, a in need.items()) + f" in {job.workload.queue}"
