"""The admission engine: Kueue-style quota, cohorts, priorities, preemption, gang admission.

Pure Python, no processes, no clock: the caller adds workloads, calls :meth:`Engine.schedule`
and reports back when admitted workloads finish or evicted ones have stopped.

Cost: pending workloads live in one heap per (queue, request shape) — Kueue's
"scheduling equivalence": every workload of one shape fits or fails alike — plus a sorted
key list per queue for positions. A schedule call looks only at queues whose situation
changed (a new workload, released quota in the queue's cohort) and, per queue, at the
head of each shape heap, so its cost grows with admissions + shapes, not with pending.
"""
from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from ..errors import QuotaError, SpecError
from .model import (INF, Admission, ClusterQueue, Cohort, Decisions, Workload,
                    normalize_quota)

EPS = 1e-9
DEFAULT_PRIORITIES = {"low": 100, "normal": 500, "high": 1000}
Key = tuple  # (-priority, created, seq, id)


@dataclass
class _Entry:
    w: Workload
    cq: "_CQ"
    prio: int
    total: dict[str, float]
    shape: tuple
    key: Key
    state: str = "pending"  # pending | admitted | evicting
    version: int = 0
    admission: Admission | None = None
    victims: set[str] = field(default_factory=set)  # preemptions issued on its behalf


class _CQ:
    def __init__(self, spec: ClusterQueue):
        self.spec = spec
        self.name = spec.name
        self.quota = normalize_quota(spec.quota, f"queue {spec.name}: quota")
        if not self.quota:
            raise SpecError(f"queue {spec.name}: quota", "is empty", "give e.g. {'gpu': 4}")
        self.flavors = list(self.quota)
        self.nominal = {(f, r): a for f, res in self.quota.items() for r, a in res.items()}
        blim = normalize_quota(spec.borrowing_limit, f"queue {spec.name}: borrowing_limit")
        llim = normalize_quota(spec.lending_limit, f"queue {spec.name}: lending_limit")
        self.blimit = {fr: blim.get(fr[0], {}).get(fr[1], INF) if blim else INF
                       for fr in self.nominal}
        self.lendable = {fr: min(n, llim.get(fr[0], {}).get(fr[1], n)) if llim else n
                         for fr, n in self.nominal.items()}
        self.guaranteed = {fr: n - self.lendable[fr] for fr, n in self.nominal.items()}
        self.usage: dict[tuple[str, str], float] = {fr: 0.0 for fr in self.nominal}
        self.cohort: _Cohort | None = None
        self.heaps: dict[tuple, list] = {}
        self.sorted: list[Key] = []
        self.admitted: dict[str, _Entry] = {}
        self.admitted_prios: Counter = Counter()
        self.quiet = False  # nothing changed since every head failed to fit

    def borrowing(self) -> bool:
        return any(self.usage[fr] > self.nominal[fr] + EPS for fr in self.nominal)


class _Cohort:
    def __init__(self, name: str, own: Mapping):
        self.name = name
        self.members: list[_CQ] = []
        self.requestable: Counter = Counter()
        for f, res in normalize_quota(own, f"cohort {name}: quota").items():
            for r, a in res.items():
                self.requestable[(f, r)] += a
        self.used: Counter = Counter()  # sum over members of usage above their guaranteed part


class Engine:
    """Admit workloads to ClusterQueues (see docs/admission.md for the Kueue mapping)."""

    def __init__(self, queues: Sequence[ClusterQueue], cohorts: Sequence[Cohort] = (),
                 priorities: Mapping[str, int] | None = None,
                 default_priority: str | int | None = None):
        self.priorities = dict(DEFAULT_PRIORITIES if priorities is None else priorities)
        if default_priority is None:
            default_priority = "normal" if "normal" in self.priorities else 0
        self.default_priority = self._prio_value(default_priority)
        self._cqs: dict[str, _CQ] = {}
        self._lq: dict[str, str] = {}
        self._cohorts: dict[str, _Cohort] = {c.name: _Cohort(c.name, c.quota) for c in cohorts}
        for spec in queues:
            if spec.name in self._cqs:
                raise SpecError("queues", f"queue {spec.name!r} is defined twice", "rename one")
            cq = _CQ(spec)
            self._cqs[spec.name] = cq
            for lq in (spec.name, *spec.local_queues):
                if self._lq.get(lq, spec.name) != spec.name:
                    raise SpecError("local_queues", f"{lq!r} points to two queues", "rename one")
                self._lq[lq] = spec.name
            if spec.cohort:
                coh = self._cohorts.setdefault(spec.cohort, _Cohort(spec.cohort, {}))
                coh.members.append(cq)
                cq.cohort = coh
                for fr, a in cq.lendable.items():
                    coh.requestable[fr] += a
        self._entries: dict[str, _Entry] = {}
        self._nominated: dict[str, None] = {}  # preemptors waiting for their victims, in order
        self._seq = 0
        self._order = 0

    # ------------------------------------------------------------ lookups
    def _prio_value(self, p: int | str | None) -> int:
        if p is None:
            return self.default_priority
        if isinstance(p, bool):
            raise SpecError("priority", f"{p!r} is not a priority", "use a class name or an int")
        if isinstance(p, int):
            return p
        if p in self.priorities:
            return self.priorities[p]
        known = ", ".join(f"{k}={v}" for k, v in sorted(self.priorities.items(), key=lambda kv: kv[1]))
        raise SpecError("priority", f"unknown priority class {p!r}; known: {known or 'none'}",
                        "use one of the known classes or configure it under [priorities]")

    def cluster_queue_of(self, queue: str) -> str:
        """The ClusterQueue a LocalQueue (or ClusterQueue) name points to; SpecError if unknown."""
        if queue not in self._lq:
            raise SpecError("queue", f"unknown queue {queue!r}; known: {', '.join(sorted(self._lq))}",
                            "use a known queue, or define it in a [[local.queues]] table of the config "
                            "file (docs/configuration.md)")
        return self._lq[queue]

    @property
    def queue_names(self) -> list[str]:
        return sorted(self._lq)

    def __contains__(self, wid: str) -> bool:
        return wid in self._entries

    def state(self, wid: str) -> str | None:
        e = self._entries.get(wid)
        return e.state if e else None

    def admission(self, wid: str) -> Admission | None:
        e = self._entries.get(wid)
        return e.admission if e else None

    def usage(self, queue: str) -> dict[tuple[str, str], float]:
        return dict(self._cqs[self.cluster_queue_of(queue)].usage)

    # ------------------------------------------------------------- fitting
    def _capacity(self, cq: _CQ, fr: tuple[str, str]) -> float:
        """The most ``cq`` could ever use of ``fr`` (everything else idle)."""
        n = cq.nominal.get(fr)
        if n is None:
            return 0.0
        if cq.cohort is None:
            return n
        return min(n + cq.blimit[fr], cq.guaranteed[fr] + cq.cohort.requestable[fr])

    def _fits_fr(self, cq: _CQ, fr: tuple[str, str], amount: float) -> bool:
        n = cq.nominal.get(fr)
        if n is None:
            return False
        use = cq.usage[fr] + amount
        if cq.cohort is None:
            return use <= n + EPS
        if use > n + cq.blimit[fr] + EPS:
            return False
        g = cq.guaranteed[fr]
        extra = max(0.0, use - g) - max(0.0, cq.usage[fr] - g)
        coh = cq.cohort
        return coh.used[fr] + extra <= coh.requestable[fr] + EPS

    def _borrows(self, cq: _CQ, total: Mapping[str, float]) -> bool:
        """Whether admitting ``total`` now would take ``cq`` above its nominal quota in every
        flavor (Kueue orders such heads after those that fit their own quota)."""
        for f in cq.flavors:
            if all((f, r) in cq.nominal and cq.usage[(f, r)] + a <= cq.nominal[(f, r)] + EPS
                   for r, a in total.items()):
                return False
        return True

    def _flavor_for(self, cq: _CQ, total: Mapping[str, float]) -> str | None:
        for f in cq.flavors:
            if all(self._fits_fr(cq, (f, r), a) for r, a in total.items()):
                return f
        return None

    def _charge(self, cq: _CQ, flavor: str, total: Mapping[str, float], sign: float) -> None:
        for r, a in total.items():
            fr = (flavor, r)
            before = cq.usage[fr]
            cq.usage[fr] = before + sign * a
            if cq.cohort is not None:
                g = cq.guaranteed[fr]
                cq.cohort.used[fr] += max(0.0, cq.usage[fr] - g) - max(0.0, before - g)

    def can_ever_fit(self, w: Workload) -> tuple[bool, str]:
        """Whether ``w`` fits its queue when everything else is idle, and why not (with numbers)."""
        cq = self._cqs[self.cluster_queue_of(w.queue)]
        total = w.total()
        shape = ", ".join(f"{ps.count}×{dict(ps.requests)}" for ps in w.podsets)
        problems = []
        for f in cq.flavors:
            short = []
            for r, a in total.items():
                cap = self._capacity(cq, (f, r))
                if a > cap + EPS:
                    n = cq.nominal.get((f, r), 0.0)
                    short.append(f"needs {_num(a)} {r}, queue {cq.name!r} flavor {f!r} has "
                                 f"nominal {_num(n)} + borrowable {_num(cap - n)} = {_num(cap)}")
            if not short:
                return True, f"fits flavor {f!r} of queue {cq.name!r}"
            problems.append("; ".join(short))
        return False, (f"workload {w.id!r} ({shape}) can never be admitted: " + " | ".join(problems))

    # ------------------------------------------------------- queue structures
    def _push_pending(self, e: _Entry) -> None:
        e.state = "pending"
        e.version += 1
        heapq.heappush(e.cq.heaps.setdefault(e.shape, []), (e.key, e.version))
        insort(e.cq.sorted, e.key)
        e.cq.quiet = False

    def _drop_pending(self, e: _Entry) -> None:
        lst = e.cq.sorted
        i = bisect_left(lst, e.key)
        if i < len(lst) and lst[i] == e.key:
            del lst[i]
        e.version += 1  # its heap item becomes stale

    def _head(self, cq: _CQ, shape: tuple) -> _Entry | None:
        heap = cq.heaps.get(shape)
        while heap:
            key, version = heap[0]
            e = self._entries.get(key[3])
            if e is not None and e.state == "pending" and e.version == version:
                return e
            heapq.heappop(heap)
        cq.heaps.pop(shape, None)
        return None

    def _candidate(self, cq: _CQ, blocked: set) -> _Entry | None:
        best = None
        for shape in list(cq.heaps):
            if shape in blocked:
                continue
            e = self._head(cq, shape)
            if e is not None and (best is None or e.key < best.key):
                best = e
        return best

    # ----------------------------------------------------------------- API
    def add(self, w: Workload) -> None:
        """Queue ``w``. SpecError for an unknown queue/priority, QuotaError if it can never fit."""
        if w.id in self._entries:
            raise SpecError("id", f"workload {w.id!r} already exists", "use a new id")
        cq = self._cqs[self.cluster_queue_of(w.queue)]
        prio = self._prio_value(w.priority)
        ok, why = self.can_ever_fit(w)
        if not ok:
            raise QuotaError(f"{why} (fix: ask for fewer GPUs or ranks, or use a queue with more "
                             f"nominal or borrowable quota)")
        total = w.total()
        self._seq += 1
        e = _Entry(w=w, cq=cq, prio=prio, total=total, shape=tuple(sorted(total.items())),
                   key=(-prio, w.created, self._seq, w.id))
        self._entries[w.id] = e
        self._push_pending(e)

    def schedule(self) -> Decisions:
        """One scheduling pass: admit what fits, in order; issue preemptions for heads that
        could fit by evicting others. Victims keep their quota until :meth:`requeue`."""
        out = Decisions()
        reserved: list = []
        # Preemptors first: the quota their victims gave back is theirs (otherwise a
        # borrower could take it and be preempted again, forever).
        for wid in list(self._nominated):
            e = self._entries.get(wid)
            if e is None or e.state != "pending":
                del self._nominated[wid]
                continue
            e.victims = {v for v in e.victims if self.state(v) == "evicting"}
            flavor = self._flavor_for(e.cq, e.total)
            if flavor is not None:
                self._admit(e, flavor)
                out.admitted.append(e.admission)  # type: ignore[arg-type]
                del self._nominated[wid]
            elif e.victims:
                flavor = e.cq.flavors[0]
                self._charge(e.cq, flavor, e.total, +1)
                reserved.append((e.cq, flavor, e.total, wid))
            else:
                del self._nominated[wid]  # victims gone and still no room: compete again
        blocked: dict[str, set] = {}
        heap: list = []
        for cq in self._cqs.values():
            if cq.quiet or not cq.heaps:
                continue
            blocked[cq.name] = set()
            e = self._candidate(cq, blocked[cq.name])
            if e is not None:
                heap.append((self._borrows(cq, e.total), e.key, cq.name))
        heapq.heapify(heap)
        while heap:
            _, _, name = heapq.heappop(heap)
            cq = self._cqs[name]
            bl = blocked[name]
            e = self._candidate(cq, bl)
            if e is None:
                continue
            if e.w.id in self._nominated:  # already holds its reservation this cycle
                bl.add(e.shape)
                if cq.spec.strategy != "StrictFIFO" and (nxt := self._candidate(cq, bl)):
                    heapq.heappush(heap, (self._borrows(cq, nxt.total), nxt.key, name))
                continue
            rank = (self._borrows(cq, e.total), e.key)
            if heap and rank > heap[0][:2]:  # it now needs to borrow: others go first
                heapq.heappush(heap, (*rank, name))
                continue
            flavor = self._flavor_for(cq, e.total)
            if flavor is not None:
                self._admit(e, flavor)
                out.admitted.append(e.admission)  # type: ignore[arg-type]
            else:
                e.victims = {v for v in e.victims if self.state(v) == "evicting"}
                if not e.victims:
                    targets = self._preemption_targets(e)
                    for v in targets:
                        self._entries[v].state = "evicting"
                        e.victims.add(v)
                        out.preempted.append((v, e.w.id))
                if e.victims:  # hold the quota it waits for, so later heads cannot take it
                    flavor = cq.flavors[0]
                    self._charge(cq, flavor, e.total, +1)
                    reserved.append((cq, flavor, e.total, e.w.id))
                    self._nominated[e.w.id] = None
                if cq.spec.strategy == "StrictFIFO":
                    continue  # the head blocks the queue
                bl.add(e.shape)
            nxt = self._candidate(cq, bl)
            if nxt is not None:
                heapq.heappush(heap, (self._borrows(cq, nxt.total), nxt.key, name))
        for cq, flavor, total, _ in reserved:
            self._charge(cq, flavor, total, -1)
        for name in blocked:
            self._cqs[name].quiet = True
        return out

    def _admit(self, e: _Entry, flavor: str) -> None:
        cq = e.cq
        self._drop_pending(e)
        heap = cq.heaps.get(e.shape)
        if heap and heap[0][0] == e.key:
            heapq.heappop(heap)
        self._charge(cq, flavor, e.total, +1)
        self._order += 1
        e.state = "admitted"
        e.victims.clear()
        e.admission = Admission(e.w.id, cq.name, flavor, dict(e.total), self._order)
        cq.admitted[e.w.id] = e
        cq.admitted_prios[e.prio] += 1

    def restore_admitted(self, w: Workload, flavor: str | None = None) -> Admission:
        """Re-enter a workload that is already running (e.g. re-adopted after a restart) and
        charge its quota without waiting for room; raises like :meth:`add` when its queue is
        unknown or it could never fit."""
        self.add(w)
        e = self._entries[w.id]
        self._admit(e, flavor or e.cq.flavors[0])
        return e.admission  # type: ignore[return-value]

    def _release(self, e: _Entry) -> None:
        cq = e.cq
        if e.admission is not None:
            self._charge(cq, e.admission.flavor, e.total, -1)
        cq.admitted.pop(e.w.id, None)
        cq.admitted_prios[e.prio] -= 1
        if cq.admitted_prios[e.prio] <= 0:
            del cq.admitted_prios[e.prio]
        e.admission = None
        for member in (cq.cohort.members if cq.cohort else (cq,)):
            member.quiet = False

    def finish(self, wid: str) -> None:
        """An admitted (or evicting) workload ended: free its quota and forget it."""
        e = self._entries.pop(wid, None)
        if e is None:
            return
        if e.state in ("admitted", "evicting"):
            self._release(e)
        elif e.state == "pending":
            self._drop_pending(e)
            e.state = "gone"

    def remove(self, wid: str) -> None:
        """Cancel: drop a pending workload, or free an admitted one's quota."""
        self.finish(wid)

    def requeue(self, wid: str) -> None:
        """An evicted (preempted) workload has stopped: free its quota, queue it again
        (same priority and creation time, so it keeps its place)."""
        e = self._entries.get(wid)
        if e is None or e.state not in ("admitted", "evicting"):
            return
        self._release(e)
        self._push_pending(e)

    # ------------------------------------------------------------ preemption
    def _may_preempt(self, e: _Entry, cand: _Entry) -> bool:
        if cand.cq is e.cq:
            pol = e.cq.spec.within_queue
            if pol == "LowerPriority":
                return cand.prio < e.prio
            if pol == "LowerOrNewerEqualPriority":
                return cand.prio < e.prio or (cand.prio == e.prio and cand.key > e.key)
            return False
        pol = e.cq.spec.reclaim_within_cohort
        if pol == "Any":
            return True
        return pol == "LowerPriority" and cand.prio < e.prio

    def _preemption_targets(self, e: _Entry) -> list[str]:
        cq = e.cq
        cands: list[_Entry] = []
        if cq.spec.within_queue != "Never" and cq.admitted_prios and min(cq.admitted_prios) <= e.prio:
            cands += [c for c in cq.admitted.values() if c.state == "admitted" and self._may_preempt(e, c)]
        # Reclaim: other queues' workloads may go only if the preemptor then fits within
        # its own nominal quota (Kueue's borrowWithinCohort unset).
        if cq.cohort is not None and cq.spec.reclaim_within_cohort != "Never" \
                and not self._borrows(cq, e.total):
            for other in cq.cohort.members:
                if other is not cq and other.admitted and other.borrowing():
                    cands += [c for c in other.admitted.values()
                              if c.state == "admitted" and self._may_preempt(e, c)]
        if not cands:
            return []
        # Kueue's order: other queues' (borrowing) workloads first, lower priority first,
        # most recently admitted first.
        cands.sort(key=lambda c: (c.cq is cq, c.prio, -c.admission.order))  # type: ignore[union-attr]
        removed: list[_Entry] = []
        fitted = False
        for c in cands:
            if c.cq is not cq and not c.cq.borrowing():
                continue
            self._charge(c.cq, c.admission.flavor, c.total, -1)  # type: ignore[union-attr]
            removed.append(c)
            if self._flavor_for(cq, e.total) is not None:
                fitted = True
                break
        if fitted:  # fill back: keep only the victims that are needed
            for c in reversed(removed[:-1]):
                self._charge(c.cq, c.admission.flavor, c.total, +1)  # type: ignore[union-attr]
                if self._flavor_for(cq, e.total) is not None:
                    removed.remove(c)
                else:
                    self._charge(c.cq, c.admission.flavor, c.total, -1)  # type: ignore[union-attr]
        for c in removed:
            self._charge(c.cq, c.admission.flavor, c.total, +1)  # type: ignore[union-attr]
        return [c.w.id for c in removed] if fitted else []

    # -------------------------------------------------------------- positions
    def positions(self, queue: str) -> dict[str, int]:
        """Pending workloads of a queue by id -> 1-based position (1 = next). A LocalQueue
        name gives positions within that LocalQueue, a ClusterQueue name within the CQ."""
        cq = self._cqs[self.cluster_queue_of(queue)]
        if queue == cq.name and queue not in cq.spec.local_queues:
            return {k[3]: i for i, k in enumerate(cq.sorted, 1)}
        ids = (k[3] for k in cq.sorted)
        return {wid: i for i, wid in enumerate((x for x in ids if self._entries[x].w.queue == queue), 1)}

    def position(self, wid: str) -> int | None:
        """1-based position of a pending workload in its ClusterQueue (None unless pending)."""
        e = self._entries.get(wid)
        if e is None or e.state != "pending":
            return None
        return bisect_left(e.cq.sorted, e.key) + 1

    def pending(self, queue: str | None = None) -> list[str]:
        cqs: Iterable[_CQ] = self._cqs.values() if queue is None else \
            [self._cqs[self.cluster_queue_of(queue)]]
        return [k[3] for cq in cqs for k in cq.sorted]

    def admitted(self, queue: str | None = None) -> list[str]:
        cqs: Iterable[_CQ] = self._cqs.values() if queue is None else \
            [self._cqs[self.cluster_queue_of(queue)]]
        return [wid for cq in cqs for wid in cq.admitted]


def _num(x: float) -> str:
    if x == INF:
        return "unlimited"
    return str(int(x)) if float(x).is_integer() else f"{x:g}"
