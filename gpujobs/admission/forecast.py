"""Why a workload waits and when it will start: a forward simulation with the admission engine.

The forecast builds a fresh :class:`~gpujobs.admission.Engine` from the same queue
configuration and the current workloads (running ones restored where they are, pending ones
queued in their order) and plays time forward: running workloads end at their expected end,
evicted ones stop when their grace period runs out and queue again, and every
``schedule()`` pass admits and preempts exactly as the real engine would. Only the engine's
public API is used, so the forecast follows whatever the engine decides.

Expected ends, in the order they are trusted (``basis``):

- ``progress``: the running job's own ``expected_end`` (from its reported progress rate);
- ``history``: the median runtime of finished jobs of the same user/name/queue (for a
  running job: of those that ran longer than it has so far), capped at its declared limit;
- ``limit``: its declared ``max_runtime_s`` (like ``sbatch --time``), an upper bound;
- nothing: the end is **unknown**. Quota it holds is never given back in the simulation, so
  the jobs waiting on it get ``expected_start=None`` and a ``not_before`` from a second,
  optimistic run in which unknown ends are taken as "now" (ends cannot be earlier).

Entry points: :func:`forecast` (every pending workload) and :func:`plan` (a what-if for one
more workload, nothing submitted). Both take a :class:`Snapshot`. See docs/forecast.md.
"""
from __future__ import annotations

import heapq
import math
import time
from bisect import insort
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..errors import GpuJobsError
from .engine import DEFAULT_PRIORITIES, Engine
from .model import INF, ClusterQueue, Cohort, Workload, normalize_quota

SOURCES = ("progress", "history", "limit", "unknown")
HISTORY_KEEP = 50  # runtimes kept per (user, name, queue)
AHEAD_SHOWN = 3    # pending workloads named in a reason
BLOCKED_BY_MAX = 10  # pending ids ahead listed in blocked_by (holders are all listed)
HORIZON_S = 2 * 86400.0  # how far ahead starts are simulated (SLURM's bf_window is 1 day)


# ------------------------------------------------------------------ inputs
@dataclass
class Job:
    """One workload as the forecast sees it.

    Running: ``started`` (epoch s) and its ``flavor``; ``expected_end`` when a progress rate
    gives one; ``stops_at`` when it was preempted and is stopping (its grace deadline).
    """
    workload: Workload
    user: str = ""
    name: str = ""
    max_runtime_s: float | None = None
    grace_period_s: float = 30.0
    started: float | None = None
    flavor: str | None = None
    expected_end: float | None = None
    stops_at: float | None = None
    preempted_by: str | None = None

    @property
    def id(self) -> str:
        return self.workload.id

    @property
    def label(self) -> str:
        return self.name or self.workload.id


class History:
    """Runtimes of finished jobs, by (user, name, queue); the median predicts similar jobs."""

    def __init__(self) -> None:
        self._by: dict[tuple, list[float]] = defaultdict(list)  # kept sorted
        self._order: dict[tuple, list[float]] = defaultdict(list)  # insertion order (to drop old)

    def add(self, user: str, name: str, queue: str, runtime_s: float) -> None:
        if runtime_s is None or runtime_s < 0 or not math.isfinite(runtime_s):
            return
        for key in ((user, name, queue), (user, name, None)):
            order, srt = self._order[key], self._by[key]
            order.append(runtime_s)
            insort(srt, runtime_s)
            if len(order) > HISTORY_KEEP:
                old = order.pop(0)
                srt.remove(old)

    def __len__(self) -> int:
        return sum(len(v) for k, v in self._order.items() if k[2] is not None)

    def runtime(self, user: str, name: str, queue: str, elapsed: float = 0.0) -> float | None:
        """Median runtime of similar jobs that ran longer than ``elapsed``; None without any."""
        for key in ((user, name, queue), (user, name, None)):
            srt = self._by.get(key)
            if not srt:
                continue
            if elapsed > 0:
                from bisect import bisect_right
                srt = srt[bisect_right(srt, elapsed):]
                if not srt:
                    return None  # it already ran longer than every similar job
            n = len(srt)
            return srt[n // 2] if n % 2 else (srt[n // 2 - 1] + srt[n // 2]) / 2
        return None


@dataclass
class Snapshot:
    """The queue configuration (as given to :class:`Engine`) and the workloads right now.

    ``running`` holds admitted workloads (stopping ones with ``stops_at``); ``pending`` the
    queued ones in the order they were queued (their ``created`` and priority decide the
    engine's order, the list order only breaks ties)."""
    queues: Sequence[ClusterQueue]
    cohorts: Sequence[Cohort] = ()
    priorities: Mapping[str, int] | None = None
    default_priority: str | int | None = None
    running: Sequence[Job] = ()
    pending: Sequence[Job] = ()
    history: History = field(default_factory=History)
    now: float = field(default_factory=time.time)
    flavors: Sequence | None = None  # ResourceFlavor objects, as given to Engine(flavors=...)

    def engine(self, clock: Callable[[], float] | None = None) -> Engine:
        kw: dict[str, Any] = {"flavors": self.flavors} if self.flavors is not None else {}
        return Engine(self.queues, self.cohorts, self.priorities, self.default_priority,
                      clock=clock or (lambda: self.now), **kw)


# ------------------------------------------------------------------ outputs
@dataclass
class Forecast:
    """What the forecast says about one pending workload."""
    id: str
    expected_start: float | None
    basis: str
    reason: str
    blocked_by: tuple[str, ...] = ()
    not_before: float | None = None
    position: int | None = None
    admit_now: bool = False
    preempts: tuple[str, ...] = ()


# ------------------------------------------------------------- estimation
def expected_runtime(job: Job, history: History, elapsed: float = 0.0) -> tuple[float | None, str]:
    """(total runtime in s, source) for ``job`` having run ``elapsed`` s; (None, "unknown")."""
    limit = job.max_runtime_s
    q = job.workload.queue
    hist = history.runtime(job.user, job.name, q, elapsed)
    if hist is not None:
        return (min(hist, limit) if limit else hist), "history"
    if limit and limit > elapsed:
        return float(limit), "limit"
    return None, "unknown"


def expected_end(job: Job, history: History, now: float) -> tuple[float | None, str]:
    """When a running job ends (epoch s) and on what that rests."""
    if job.expected_end is not None and job.expected_end >= now:
        return float(job.expected_end), "progress"
    started = job.started if job.started is not None else now
    elapsed = max(0.0, now - started)
    rt, src = expected_runtime(job, history, elapsed)
    if rt is None:
        return None, "unknown"
    return max(now, started + rt), src


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


class _Sim:
    """One forward run. ``optimistic``: unknown ends are taken as now (a lower bound)."""

    def __init__(self, snap: Snapshot, pending: Sequence[Job], optimistic: bool,
                 targets: set[str] | None, want_reasons: bool,
                 reasons_for: set[str] | None = None, horizon_s: float = HORIZON_S):
        self.snap, self.pending, self.optimistic = snap, pending, optimistic
        self.targets, self.want_reasons, self.reasons_for = targets, want_reasons, reasons_for
        self.horizon_s = horizon_s

    def run(self) -> _Run:
        snap = self.snap
        clock = [snap.now]
        eng = snap.engine(lambda: clock[0])  # the engine's clock is the simulated time
        now = t = snap.now
        horizon = now + self.horizon_s
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
            eng.restore_admitted(j.workload, j.flavor)
            run_start[j.id] = j.started if j.started is not None else now
            if j.stops_at is not None:
                eng.evict(j.id)  # it keeps its quota until it stops; no new preemption for it
                stopping.add(j.id)
                push(max(now, j.stops_at), "stop", j.id)
                ends[j.id] = (max(now, j.stops_at), "stopping")
                continue
            end, src = expected_end(j, snap.history, now)
            ends[j.id] = (end, src)
            if end is None:
                unknown[grp(j)].add(j.id)
                if self.optimistic:
                    end = now
            if end is not None:
                src_of[j.id] = src
                push(end, "end", j.id)
        for j in self.pending:
            jobs[j.id] = j
            eng.add(j.workload)
        counts: dict[str, list[int]] = defaultdict(lambda: [0] * len(SOURCES))
        starts: dict[str, float] = {}
        basis: dict[str, tuple] = {}
        preempts: dict[str, list[str]] = defaultdict(list)
        reasons: dict[str, Forecast] = {}
        targets = self.targets
        left = set(targets) if targets is not None else None
        first = True
        while True:
            d = eng.schedule()
            for vic, by in d.preempted:
                preempts[by].append(vic)
                if vic in stopping:
                    continue
                stopping.add(vic)
                push(t + jobs[vic].grace_period_s, "stop", vic)  # replaces its end event
            for adm in d.admitted:
                wid = adm.id
                j = jobs[wid]
                if wid not in starts:
                    starts[wid] = t
                    basis[wid] = tuple(counts[grp(j)])
                    if left is not None:
                        left.discard(wid)
                run_start[wid] = t
                rt, src = expected_runtime(j, snap.history)
                if rt is not None and wid in ran:
                    rt = max(0.0, rt - ran[wid])  # a preempted job resumes from its checkpoint
                if wid not in ends:
                    ends[wid] = (t + rt if rt is not None else None, src)
                if rt is None:
                    unknown[grp(j)].add(wid)
                    if self.optimistic:
                        rt = 0.0
                if rt is not None:
                    src_of[wid] = src
                    push(t + rt, "end", wid)
            if first:
                first = False
                if self.want_reasons:
                    reasons = _reasons(self.snap, eng, jobs, ends, preempts, stopping,
                                       self.reasons_for)
            if left is not None and not left:
                break
            if not events:
                break
            when = events[0][0]
            if when > horizon:
                cut = True  # beyond the horizon: no start (see HORIZON_S)
                break
            t = clock[0] = when
            batch = []
            while events and events[0][0] == when:
                item = heapq.heappop(events)
                if version.get(item[3]) == item[4]:
                    batch.append(item)
            for _, _, kind, wid, _ver in batch:
                if kind == "end":
                    eng.finish(wid)
                    counts[grp(jobs[wid])][SOURCES.index(src_of.get(wid, "unknown"))] += 1
                else:
                    stopping.discard(wid)
                    ran[wid] = ran.get(wid, 0.0) + max(0.0, t - run_start.get(wid, t))
                    eng.requeue(wid)
        return _Run(starts, basis, dict(preempts), ends, reasons, dict(unknown), cut)


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
def _prio(snap: Snapshot, p) -> int:
    prios = DEFAULT_PRIORITIES if snap.priorities is None else snap.priorities
    if p is None:
        p = snap.default_priority
        if p is None:
            return prios.get("normal", 0)
    if isinstance(p, int):
        return p
    return prios.get(p, 0)


def _num(x: float) -> str:
    if x == INF:
        return "unlimited"
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _amount(a: float, r: str) -> str:
    if r == "gpu":
        return f"{_num(a)} GPU" + ("" if a == 1 else "s")
    return f"{_num(a)} {r}"


def duration(seconds: float) -> str:
    """'45 s', '12 min', '2.5 h' (for reasons)."""
    s = max(0.0, seconds)
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    if s < 86400 * 2:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} d"


def _ordinal(n: int) -> str:
    from ..status import ordinal
    return ordinal(n)


class _QueueFacts:
    """Free quota, cohort lending and holders of one ClusterQueue at the snapshot."""

    def __init__(self, snap: Snapshot, eng: Engine, cq: ClusterQueue):
        self.cq = cq
        self.quota = normalize_quota(cq.quota, cq.name)
        self.usage = eng.usage(cq.name)
        self.nominal = {(f, r): a for f, res in self.quota.items() for r, a in res.items()}
        self.members = [q for q in snap.queues if cq.cohort and q.cohort == cq.cohort]
        self._coh_free = self._cohort_free(snap, eng) if cq.cohort else {}

    def _cohort_free(self, snap: Snapshot, eng: Engine) -> dict:
        """Per (flavor, resource): what the cohort could lend this queue right now."""
        own = {}
        for c in snap.cohorts:
            if c.name == self.cq.cohort:
                own = {(f, r): a for f, res in normalize_quota(c.quota, c.name).items()
                       for r, a in res.items()}
        requestable = defaultdict(float, own)
        used: defaultdict[Any, float] = defaultdict(float)
        for m in self.members:
            mq = normalize_quota(m.quota, m.name)
            ll = normalize_quota(m.lending_limit, m.name)
            mu = eng.usage(m.name)
            for f, res in mq.items():
                for r, n in res.items():
                    lend = min(n, ll.get(f, {}).get(r, n)) if ll else n
                    requestable[(f, r)] += lend
                    used[(f, r)] += max(0.0, mu.get((f, r), 0.0) - (n - lend))
        bl = normalize_quota(self.cq.borrowing_limit, self.cq.name)
        ll = normalize_quota(self.cq.lending_limit, self.cq.name)
        out = {}
        for (f, r), n in self.nominal.items():
            u = self.usage.get((f, r), 0.0)
            lend = min(n, ll.get(f, {}).get(r, n)) if ll else n
            g = n - lend
            blim = bl.get(f, {}).get(r, INF) if bl else INF
            room = max(0.0, g - u) + max(0.0, requestable[(f, r)] - used[(f, r)])
            out[(f, r)] = max(0.0, min(n + blim - u, room))  # all it could take now
        return out

    def free(self, r: str) -> tuple[float, float, str]:
        """(free within nominal, cohort lends, flavor) for resource ``r``, best flavor."""
        best = (0.0, 0.0, next(iter(self.quota), "default"))
        for f in self.quota:
            if (f, r) not in self.nominal:
                continue
            fr = (f, r)
            own = max(0.0, self.nominal[fr] - self.usage.get(fr, 0.0))
            if self.cq.cohort:  # its unused nominal quota may be lent out to a borrower
                room = self._coh_free.get(fr, 0.0)
                own = min(own, room)
                cand = (own, room - own, f)
            else:
                cand = (own, 0.0, f)
            if cand[0] + cand[1] > best[0] + best[1] or best == (0.0, 0.0, best[2]):
                best = cand
        return best

    def borrowers(self, eng: Engine) -> list[tuple[str, float]]:
        """Other cohort members above their nominal quota: (queue, amount over)."""
        out = []
        for m in self.members:
            if m.name == self.cq.name:
                continue
            mq = normalize_quota(m.quota, m.name)
            mu = eng.usage(m.name)
            over = sum(max(0.0, mu.get((f, r), 0.0) - n) for f, res in mq.items() for r, n in res.items())
            if over > 0:
                out.append((m.name, over))
        return out


def _reasons(snap: Snapshot, eng: Engine, jobs: dict[str, Job], ends: dict,
             preempts: Mapping[str, list[str]], stopping: set[str],
             only: set[str] | None) -> dict[str, Forecast]:
    now = snap.now
    cqs = {q.name: q for q in snap.queues}
    facts: dict[str, _QueueFacts] = {}
    victims_of: dict[str, list[str]] = defaultdict(list)
    for j in snap.running:
        if j.preempted_by and j.stops_at is not None:
            victims_of[j.preempted_by].append(j.id)
    for by, vs in preempts.items():
        for v in vs:
            if v not in victims_of[by]:
                victims_of[by].append(v)

    def holder(wid: str) -> str:
        j = jobs[wid]
        end, src = ends.get(wid, (None, "unknown"))
        if wid in stopping:
            return f"{j.label} (stopping, preempted)"
        if end is None:
            ran = now - (j.started if j.started is not None else now)
            return f"{j.label} (running {duration(ran)}, end unknown)"
        return f"{j.label} (running, ~{duration(end - now)} left)"

    def holders_sorted(ids: Iterable[str]) -> list[str]:
        return sorted(ids, key=lambda w: (ends.get(w, (None,))[0] is None, ends.get(w, (INF,))[0] or INF, w))

    out: dict[str, Forecast] = {}
    for name, cq in cqs.items():
        order = eng.pending(name)
        if not order:
            continue
        if only is not None and not (only & set(order)):
            continue
        f = facts.setdefault(name, _QueueFacts(snap, eng, cq))
        running_here = holders_sorted(eng.admitted(name))
        borrow = f.borrowers(eng)
        borrow_ids = {b: holders_sorted(eng.admitted(b)) for b, _ in borrow}
        head = order[0]
        # the same for every job of this queue: computed once
        running_txt = [holder(x) for x in running_here[:AHEAD_SHOWN]]
        if len(running_here) > AHEAD_SHOWN:
            running_txt.append(f"+{len(running_here) - AHEAD_SHOWN} more running")
        borrow_txt = {}
        for b, over in borrow:
            who = ", ".join(holder(x) for x in borrow_ids[b][:AHEAD_SHOWN])
            borrow_txt[b] = f"{b} borrows {_num(over)} from cohort {cq.cohort}" + (f": {who}" if who else "")
        free_of = {}
        amt_of: dict[str, str] = {}
        prio_of: dict[str, int] = {}

        def amt(x: str) -> str:
            t_ = amt_of.get(x)
            if t_ is None:
                t_ = amt_of[x] = ", ".join(_amount(v, r) for r, v in jobs[x].workload.total().items())
            return t_

        def prio_(x: str) -> int:
            p_ = prio_of.get(x)
            if p_ is None:
                p_ = prio_of[x] = _prio(snap, jobs[x].workload.priority)
            return p_
        for i, wid in enumerate(order):
            if only is not None and wid not in only:
                continue
            j = jobs[wid]
            need = j.workload.total()
            parts = []
            blocked: list[str] = []
            needs = []
            fits_alone = True
            for r, a in sorted(need.items(), key=lambda kv: kv[0] != "gpu"):
                if r not in free_of:
                    free_of[r] = f.free(r)
                free, lends, _ = free_of[r]
                if a > free + lends + 1e-9:
                    fits_alone = False
                coh = f" (cohort {cq.cohort} lends {_num(lends)})" if cq.cohort else ""
                needs.append(f"needs {_amount(a, r)}, {_num(free)} free in {name}{coh}")
            parts.append("; ".join(needs) if needs else "needs nothing")
            vics = [v for v in victims_of.get(wid, ()) if v in stopping]
            if vics:
                parts.append("waiting for " + ", ".join(
                    f"{jobs[v].label} to stop (preempted for it)" for v in vics))
                blocked += vics
            if cq.strategy == "StrictFIFO" and i > 0 and wid not in victims_of:
                msg = f"{name} is StrictFIFO: its head {jobs[head].label} ({amt(head)}) must start first"
                if fits_alone:
                    msg = "it would fit now, but " + msg
                parts.append(msg)
                blocked.append(head)
            if borrow and not fits_alone:
                for b, _over in borrow:
                    rec = cq.reclaim_within_cohort
                    parts.append(borrow_txt[b]
                                 + (f" ({name} does not reclaim: reclaim_within_cohort=Never)"
                                    if rec == "Never" else
                                    " (not reclaimable: it would need to borrow itself, or "
                                    "their priority is not lower)" if not vics else ""))
                    blocked += borrow_ids[b]
            ahead = []
            if not fits_alone or vics:
                ahead += running_txt
                blocked += running_here
            prio = prio_(wid)
            for k in range(max(0, i - AHEAD_SHOWN), i):
                x = order[k]
                other = jobs[x]
                ap = prio_(x)
                tag = f", {other.workload.priority}" if ap > prio and other.workload.priority is not None else \
                    (", higher priority" if ap > prio else "")
                ahead.append(f"{other.label} ({_ordinal(k + 1)}{tag}, {amt(x)})")
            if i > AHEAD_SHOWN:
                ahead.insert(len(ahead) - AHEAD_SHOWN, f"{i - AHEAD_SHOWN} more queued ahead")
            blocked += order[max(0, i - BLOCKED_BY_MAX):i]
            if ahead:
                parts.append("ahead: " + ", ".join(ahead))
            seen: dict[str, None] = {}
            for x in blocked:
                seen.setdefault(x, None)
            out[wid] = Forecast(wid, None, "", "; ".join(parts), tuple(seen), position=i + 1)
    return out


# ---------------------------------------------------------------- basis text
def _basis_text(counts: tuple, start: float, now: float) -> str:
    if start <= now + 1e-9:
        return "quota free now"
    parts = []
    names = {"progress": "progress rate", "history": "history of similar jobs",
             "limit": "declared limit"}
    for src, n in zip(SOURCES, counts):
        if n and src in names:
            parts.append(f"{names[src]} ({n})" if n > 1 else names[src])
    if not parts:
        return "victims' grace periods"
    return "expected ends from " + ", ".join(parts)


def _clock(t: float) -> str:
    lt = time.localtime(t)
    same_day = lt[:3] == time.localtime()[:3]
    return time.strftime("%H:%M:%S" if same_day else "%b %d %H:%M", lt)


def _finish(snap: Snapshot, pess: _Run, opt: _Run | None, ids: Iterable[str],
            unknown_labels: Callable[[str], str], horizon_s: float) -> dict[str, Forecast]:
    out = {}
    now = snap.now
    edge = now + horizon_s
    for wid in ids:
        fc = pess.reasons.get(wid) or Forecast(wid, None, "", "")
        start = pess.starts.get(wid)
        if start is not None:
            fc.expected_start = start
            fc.basis = _basis_text(pess.basis.get(wid, ()), start, now)
            if fc.reason and start > now:
                fc.reason += f"; expected to start in ~{duration(start - now)}"
        elif not unknown_labels(wid):  # nothing unknown: it starts beyond the horizon
            fc.not_before = edge
            fc.basis = (f"beyond the forecast horizon ({duration(horizon_s)} ahead): "
                        f"not before {_clock(edge)}")
            fc.reason += ("; " if fc.reason else "") + f"starts more than {duration(horizon_s)} from now"
        else:
            nb = opt.starts.get(wid) if opt is not None else None
            if nb is None and (pess.cut or (opt is not None and opt.cut)):
                nb = edge
            fc.not_before = nb
            who = unknown_labels(wid)
            fc.basis = ("unknown: it waits on jobs with no declared limit, progress or history"
                        + (f" ({who})" if who else "")
                        + (f"; not before {_clock(nb)}" if nb is not None and nb > now else ""))
            fc.reason += ("; " if fc.reason else "") + "start unknown" + (
                f" ({who}: end unknown)" if who else "")
        fc.preempts = tuple(pess.preempts.get(wid, ()))
        out[wid] = fc
    return out


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
    return Snapshot(snap.queues, snap.cohorts, snap.priorities, snap.default_priority,
                    [j for j in snap.running if groups.get(j.workload.queue) in keep],
                    [j for j in snap.pending if groups.get(j.workload.queue) in keep],
                    snap.history, snap.now, snap.flavors)


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
    pess = _Sim(snap, pending, False, None if ids is None else want, reasons,
                None if ids is None else want, horizon_s).run()
    labels = _unknown_labels(snap, pess)
    missing = {w for w in want if w not in pess.starts and labels(w)}
    opt = _Sim(snap, pending, True, missing, False, None, horizon_s).run() if missing else None
    return _finish(snap, pess, opt, [j.id for j in pending if j.id in want], labels, horizon_s)


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
    pess = _Sim(snap, pending, False, {job.id}, True, {job.id}, horizon_s).run()
    labels = _unknown_labels(snap, pess, [job])
    opt = _Sim(snap, pending, True, {job.id}, False, None, horizon_s).run() \
        if job.id not in pess.starts and labels(job.id) else None
    fc = _finish(snap, pess, opt, [job.id], labels, horizon_s)[job.id]
    start = pess.starts.get(job.id)
    if start is not None and start <= snap.now + 1e-9:
        fc.admit_now = True
        fc.position = None
        fc.blocked_by = ()
        fc.reason = "fits now" + (f" ({_fits_text(snap, job)})" if _fits_text(snap, job) else "")
    elif fc.preempts and not fc.reason.startswith("would"):
        vics = ", ".join(fc.preempts)
        fc.reason = f"would preempt {vics} and start once they stop; " + fc.reason
    return fc


def _fits_text(snap: Snapshot, job: Job) -> str:
    need = job.workload.total()
    return ", ".join(_amount(a, r) for r, a in need.items()) + f" in {job.workload.queue}"


__all__ = ["Job", "History", "Snapshot", "Forecast", "forecast", "plan", "expected_runtime",
           "expected_end", "duration", "GpuJobsError"]
