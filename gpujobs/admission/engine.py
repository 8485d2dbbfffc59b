"""The admission engine: Kueue's scheduler, cohort trees included, without an API server, as
the Kueue version chosen for it runs it (its feature gates' defaults: :mod:`.gates`).

Pure Python, no processes: the caller adds workloads, calls :meth:`Engine.schedule` and
reports back when admitted workloads finish or evicted ones have stopped.

One :meth:`Engine.schedule` call runs Kueue scheduling *cycles* until one makes no progress.
A cycle is Kueue's ``schedule()``: take the head of every ClusterQueue, assign flavors to
each against the same snapshot (``flavorassigner``: per pod set and resource group, flavors
in order, ``flavorFungibility``), find preemption targets for heads that need them
(``preemption``: the classical candidate generator, fill-back), order the heads (fit within
nominal before borrowing, then priority, then FIFO) and process them in that order: a head
is admitted or issues its preemptions only if it still fits once every victim of this cycle
is taken out, and a head whose targets were already claimed in this cycle waits (or, with
RecomputeAssignmentUponPreemptionTargetsOverlap, is assigned again without those victims).

Cost: pending workloads live in one heap per (queue, request shape) (Kueue's scheduling
equivalence: equal shapes fit or fail alike); a head that cannot be admitted is parked until
quota is released in its cohort, so a cycle looks only at heads that may move.

The engine is composed of four parts, each given what it uses: the quota tree
(:class:`~.quota.QuotaTree`: ClusterQueues, cohorts, their arithmetic), the pending queues
(:class:`~.queues.Queues`: heaps, heads, parking, positions, as Kueue keeps its queue manager,
``pkg/cache/queue``, apart from its scheduler, ``pkg/scheduler``), a
:class:`~.preemption.Preemptor` and a :class:`~.flavors.FlavorAssigner`; the engine runs the
cycles and keeps the workloads.
"""
from __future__ import annotations

import time
from collections import Counter
from typing import Callable, Iterable, Mapping, Sequence

from ..errors import QuotaError, SpecError
from . import fairsharing
from . import gates as kueue_gates
from .flavors import FIT, NOFIT, PREEMPT, Assignment, FlavorAssigner
from .model import (
    INF,
    REQUEUING,
    Admission,
    ClusterQueue,
    Cohort,
    Decisions,
    ResourceFlavor,
    Workload,
)
from .preemption import Preemptor
from .queues import Queues
from .quota import EPS, Entry, QueueNode, QuotaTree
from .victims import Targets

DEFAULT_PRIORITIES = {"low": 100, "normal": 500, "high": 1000}
NO_HOLD: dict = {}  # a queue's hold when it reserves nothing (shared, never written)


class Engine:
    """Admit workloads to ClusterQueues (see docs/admission.md for the Kueue mapping).

    ``requeuing_strategy`` is Kueue's ``waitForPodsReady.requeuingStrategy.timestamp``:
    ``Eviction`` (default) orders a workload requeued after a PodsReady timeout (or an
    admission check) by its eviction time, ``Creation`` by its creation time. A preempted
    workload keeps its creation time in both, as in Kueue. ``clock`` gives eviction times
    when :meth:`requeue` is not told one (default ``time.time``). ``preemption_oracle``, if
    given, replaces the preemption simulation inside flavor assignment (Kueue's
    ``preemptionOracle``): ``(queue, (flavor, resource), amount) -> (possibility, borrowing
    level)`` with possibility ``Preempt``, ``Reclaim`` or ``NoCandidates`` (the conformance
    suite replays Kueue's flavorassigner tests, which mock it, through this). ``flavors``
    (ResourceFlavor objects) gives flavors node labels and taints; with it, a ClusterQueue
    naming a flavor that is not there is inactive (its workloads wait), as in Kueue.
    ``fair_sharing`` turns on Kueue's fair sharing (``fairSharing`` in its configuration): heads
    of a cohort tree are taken by a tournament on dominant resource shares (weights
    ``fair_weight``), and preemption follows ``fair_sharing_strategies``
    (``LessThanOrEqualToFinalShare``, ``LessThanInitialShare``). ``kueue_version`` (default:
    the newest supported, :data:`~.gates.NEWEST`) picks the Kueue release whose feature-gate
    defaults the cycle follows, ``feature_gates`` overrides single gates (:mod:`.gates`).
    """

    def __init__(self, queues: Sequence[ClusterQueue], cohorts: Sequence[Cohort] = (),
                 priorities: Mapping[str, int] | None = None,
                 default_priority: str | int | None = None,
                 requeuing_strategy: str = "Eviction", clock: Callable[[], float] | None = None,
                 preemption_oracle: Callable[[str, tuple[str, str], float], tuple[str, int]] | None = None,
                 flavors: Sequence[ResourceFlavor] | None = None, fair_sharing: bool = False,
                 fair_sharing_strategies: Sequence[str] = ("LessThanOrEqualToFinalShare", "LessThanInitialShare"),
                 kueue_version: str | None = None, feature_gates: Mapping[str, bool] | None = None,
                 requeue_delay_s: float = 0.0):
        # the Kueue version decides, through its feature gates' defaults (gates.py), which
        # behaviour the cycle has; ``feature_gates`` overrides them as Kueue's --feature-gates
        self.kueue_version = kueue_gates.kueue_version(kueue_version)
        self.gates = kueue_gates.feature_gates(self.kueue_version, feature_gates)
        self._preserve_scan = self.gates["FlavorFungibilityPreserveScanProgress"]
        self._recompute_overlap = self.gates["RecomputeAssignmentUponPreemptionTargetsOverlap"]
        self._cycle_no = 0
        self.priorities = dict(DEFAULT_PRIORITIES if priorities is None else priorities)
        if default_priority is None:
            default_priority = "normal" if "normal" in self.priorities else 0
        self.default_priority = self._prio_value(default_priority)
        if requeuing_strategy not in REQUEUING:
            raise SpecError("requeuing_strategy", f"unknown {requeuing_strategy!r}",
                            f"use one of {', '.join(REQUEUING)}")
        self.requeuing_strategy = requeuing_strategy
        self.clock = clock or time.time
        # after quota is released, parked (inadmissible) workloads go back to their queues this
        # long after (Kueue's requeueBatchPeriod, kueue_gates.REQUEUE_BATCH_S; StrictFIFO heads
        # are retried every cycle regardless); 0: at once, as the local agent does
        self.requeue_delay_s = float(requeue_delay_s)
        self._requeue_due: dict[int, tuple[float, QueueNode]] = {}  # cohort tree -> (when, a member)
        self.fair_sharing = bool(fair_sharing)
        for st in fair_sharing_strategies:
            if st not in ("LessThanOrEqualToFinalShare", "LessThanInitialShare"):
                raise SpecError("fair_sharing_strategies", f"unknown {st!r}",
                                "use LessThanOrEqualToFinalShare and/or LessThanInitialShare")
        self.fs_strategies = tuple(fair_sharing_strategies) or ("LessThanOrEqualToFinalShare",
                                                                "LessThanInitialShare")
        # the parts, each given what it uses: the workloads by id (the engine's, read by the
        # queues), the quota tree, the pending queues over its ClusterQueues, the preemptor and
        # the flavor assigner that simulates it
        by_name = None if flavors is None else {f.name: f for f in flavors}
        self._entries: dict[str, Entry] = {}
        self._tree = QuotaTree(cohorts)
        self._cqs = self._tree.cqs
        self._queues = Queues(self._cqs, self._entries)
        for spec in queues:
            self._tree.add_queue(spec)
            self._queues.map_local_queues(spec)
        self._tree.build(by_name)
        self._strict = [cq for cq in self._cqs.values() if cq.spec.strategy == "StrictFIFO"]  # those that may hold
        self._preemptor = Preemptor(self.fs_strategies if self.fair_sharing else None)
        self._assigner = FlavorAssigner(self._preemptor, by_name, preemption_oracle, self.fair_sharing)
        self._order = 0
        self._fit: set[tuple[str, int]] = set()  # (ClusterQueue, request shape) found to fit when all is idle

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

    def weighted_share(self, name: str) -> float:
        """Kueue's weighted share of a ClusterQueue or Cohort (its dominant resource share over
        its fair weight, x1000: the metrics ``cluster_queue_weighted_share`` /
        ``cohort_weighted_share``); SpecError for an unknown name."""
        node = self._tree.node(name)
        if node is None:
            raise SpecError("name", f"no ClusterQueue or Cohort {name!r}",
                            f"use one of {', '.join(sorted({*self._cqs, *self._tree.cohorts}))}")
        return fairsharing.drs(node).share()

    # ----------------------------------------------------------- can it ever fit
    def can_ever_fit(self, w: Workload) -> tuple[bool, str]:
        """Whether ``w`` fits its queue when everything else is idle, and why not (with numbers)."""
        cq = self._cqs[self.cluster_queue_of(w.queue)]
        short, problems = self._never_fits(cq, w)
        if not problems:
            return True, f"fits queue {cq.name!r}"
        shape = ", ".join(f"{ps.count}×{dict(ps.requests)}" for ps in w.podsets)
        return False, f"workload {w.id!r} ({shape}) can never be admitted: " + " | ".join(problems)

    def _never_fits(self, cq: QueueNode, w: Workload) -> tuple[list[str], list[str]]:
        """(the resources ``w`` asks more of than ``cq`` could ever give, the problems in numbers)."""
        used: Counter = Counter()
        problems = []
        lacking: list[str] = []
        for _, reqs in self._podset_totals(cq, w):
            done: set = set()
            for r in sorted(reqs):
                if r in done:
                    continue
                rg = cq.rg_of.get(r)
                if rg is None and not reqs[r]:
                    continue  # a zero request for a resource the queue does not cover
                if rg is None:
                    problems.append(f"needs {_num(reqs[r])} {r}, which queue {cq.name!r} has no quota for")
                    lacking.append(r)
                    break
                group = {rr: reqs[rr] for rr in rg.resources if rr in reqs}
                short_all = []
                for f in rg.flavors:
                    short = []
                    for rr, a in group.items():
                        cap = cq.capacity((f, rr))
                        if used[(f, rr)] + a > cap + EPS:
                            lacking.append(rr)
                            n = cq.nominal.get((f, rr), 0.0)
                            short.append(f"needs {_num(used[(f, rr)] + a)} {rr}, queue {cq.name!r} flavor "
                                         f"{f!r} has nominal {_num(n)} + borrowable {_num(cap - n)} = {_num(cap)}")
                    if not short:
                        for rr, a in group.items():
                            used[(f, rr)] += a
                        done.update(group)
                        break
                    short_all.append("; ".join(short))
                else:
                    problems.append(" | ".join(short_all))
                    done.update(group)  # one line per resource group, not one per resource of it
        return sorted(set(lacking)), problems

    @staticmethod
    def _podset_totals(cq: QueueNode, w: Workload) -> list:
        """[(pod set, {resource: total})]; a queue with quota for ``pods`` counts each pod set's
        pods as a request too (Kueue adds corev1.ResourcePods when a resource group covers it)."""
        out = []
        for ps in w.podsets:
            reqs = {r: a * ps.count for r, a in ps.requests.items()}
            if "pods" in cq.rg_of and "pods" not in reqs:
                reqs["pods"] = float(ps.count)
            out.append((ps.name, reqs))
        return out

    # ----------------------------------------------------------------- API
    def add(self, w: Workload, check: bool = True) -> None:
        """Queue ``w``. SpecError for an unknown queue/priority, QuotaError if it can never fit
        (``check=False``: queue it anyway, e.g. replaying a cluster's state)."""
        if w.id in self._entries:
            raise SpecError("id", f"workload {w.id!r} already exists", "use a new id")
        cq = self._cqs[self.cluster_queue_of(w.queue)]
        prio = self._prio_value(w.priority)
        podsets = self._podset_totals(cq, w)
        shape = self._queues.shape(w, podsets)
        lacking: list[str] = []
        problems: list[str] = []
        if check and (cq.name, shape) not in self._fit:  # asked once per queue and request shape
            lacking, problems = self._never_fits(cq, w)
            if not problems:
                self._fit.add((cq.name, shape))
        if problems:  # a plain sentence first; no id: nothing was created
            what = " and ".join(lacking) or "resources"
            raise QuotaError(
                f"this job can never start in queue {w.queue!r}: it asks for more {what} than the "
                f"queue has, even when nothing else runs. In detail: {' | '.join(problems)} (fix: ask "
                f"for fewer ranks or less {what} per rank, or use a queue with more quota)")
        e = Entry(w=w, cq=cq, prio=prio, podsets=podsets, shape=shape,
                  key=self._queues.key(prio, w.created, w.id), pspecs={ps.name: ps for ps in w.podsets})
        self._entries[w.id] = e
        self._queues.push(e)

    def schedule(self, cycles: int | None = None) -> Decisions:
        """Run Kueue scheduling cycles until one makes no progress (or ``cycles`` of them):
        admit what fits, issue preemptions for heads that fit once others are evicted. Victims
        keep their quota until :meth:`requeue`. A workload admitted earlier in the same call
        that becomes a victim is put back in its queue instead (it never started), so no id is
        both admitted and preempted; one admitted again after that is listed once, with the
        admission the engine holds."""
        out = Decisions()
        if self._requeue_due:
            now = self.clock()
            for tree, (due, cq) in list(self._requeue_due.items()):
                if due <= now + 1e-9:
                    del self._requeue_due[tree]
                    self._queues.unpark(cq)
        self._queues.retry_strict()
        limit = 4 * len(self._entries) + 16 if cycles is None else cycles
        while limit > 0 and self._cycle(out):
            limit -= 1
        for a in out.admitted:
            e = self._entries.get(a.id)
            if e is not None:
                e.in_pass = False
        entries = self._entries
        out.admitted = [a for a in out.admitted if (e := entries.get(a.id)) is not None
                        and e.state == "admitted" and e.admission is a]  # its last admission only
        return out

    # ------------------------------------------------ flavor scan progress (LastAssignment)
    def _outdated(self, e: Entry) -> bool:
        """Kueue lastAssignmentOutdated: with FlavorFungibilityPreserveScanProgress progress
        recorded in this or the previous cycle is kept; otherwise it goes once quota was
        released in the queue (its AllocatableResourceGeneration advanced)."""
        last = e.last
        assert last is not None
        if self._preserve_scan and self._cycle_no - last[2] <= 1:
            return False
        return e.cq.generation > last[1]

    def _record(self, e: Entry, asg: Assignment) -> None:
        """Kueue recordAssignment: the assignment's scan progress becomes the entry's."""
        e.last = (asg.tried, e.cq.generation, self._cycle_no, asg.left)

    def _skipped(self, e: Entry) -> None:
        """Kueue markSkipped: the progress is dropped unless PreserveScanProgress keeps it."""
        if not self._preserve_scan:
            e.last = None

    @staticmethod
    def _scan_from(e: Entry) -> frozenset | None:
        """Where the next flavor scan starts (None: from the first flavor everywhere)."""
        last = e.last
        if last is None or not last[3]:
            return None
        return frozenset((k, i) for k, i in last[0].items() if i >= 0)

    def _nominate(self, e: Entry) -> tuple[Assignment, Targets]:
        """Kueue getAssignments: the flavor assignment and, if it preempts, the targets."""
        assigner = self._assigner
        assigner.simulated = None
        asg = assigner.assign(e)
        sim = assigner.simulated
        if asg.mode != PREEMPT:
            targets = Targets()
        elif sim is not None and sim[0] is e and len(asg.usage) == 1 and \
                asg.need == {sim[1]} and asg.usage.get(sim[1]) == sim[2]:
            targets = sim[3]  # the flavor assigner's simulation asked the same question
        else:
            targets = self._preemptor.targets(e, asg.need, asg.usage)
        return asg, targets

    def _lift(self, gone: Iterable[Entry], sign: int) -> None:
        """Take admitted workloads out of the snapshot (-1: as if they had stopped, not
        candidates any more) or put them back (+1): Kueue SimulateWorkloadRemoval."""
        for v in gone:
            v.cq.charge(v.usage, sign)
            v.cq.root.admitted_version += 1
            if sign < 0:
                v.cq.admitted.pop(v.w.id, None)
                v.cq.admitted_prios[v.prio] -= 1
                if v.cq.admitted_prios[v.prio] <= 0:
                    del v.cq.admitted_prios[v.prio]
            else:
                v.cq.admitted[v.w.id] = v
                v.cq.admitted_prios[v.prio] += 1

    def _recompute(self, e: Entry, asg: Assignment, victims: dict) -> tuple[Assignment, Targets]:
        """RecomputeAssignmentUponPreemptionTargetsOverlap (scheduler.go
        updateAssignmentIfNeeded): the head's targets overlap this cycle's victims, so its
        assignment is computed again, from the first flavor but only on the flavors it was
        nominated with, as if those victims were gone."""
        e.last = None
        e.pin = {(ps, r): f for ps, fl in asg.podsets for r, f in fl.items()}
        gone = list(victims.values())
        self._lift(gone, -1)
        try:
            asg, targets = self._nominate(e)
        finally:
            self._lift(gone, +1)
            e.pin = None
        self._record(e, asg)
        e.cq.nominated = None
        return asg, targets

    def _cycle(self, out: Decisions) -> bool:
        self._cycle_no += 1
        cycle_no = self._cycle_no
        heads = []
        head_of = self._queues.head
        for cq in self._cqs.values():
            if cq.stalled or not cq.heaps or cq.inactive:
                continue
            e = head_of(cq)
            if e is None:
                cq.stalled = True
                continue
            cq.hold = NO_HOLD
            last = e.last
            if last is not None and cq.generation > last[1] and self._outdated(e):
                e.last = last = None
            scan_from = None if last is None or not last[3] else self._scan_from(e)
            version = cq.root.version
            cached = cq.nominated
            if cached is not None and cached[0] is e and cached[1] == version and cached[4] == scan_from:
                asg, targets = cached[2], cached[3]  # nothing changed in its cohort since it was nominated
            else:
                asg, targets = self._nominate(e)
                cq.nominated = (e, version, asg, targets, scan_from)
            e.last = (asg.tried, cq.generation, cycle_no, asg.left)  # Kueue recordAssignment (_record)
            key = e.key
            heads.append(((asg.borrow, key[0], key[1], key[2]), e, asg, targets))
        held: list = []  # (cq, usage) charged for this cycle only
        for cq in self._strict:
            if cq.hold and cq.stalled:  # a StrictFIFO head waiting without candidates
                cq.charge(cq.hold, +1)
                held.append((cq, cq.hold))
        if not heads:
            for cq, res in held:
                cq.charge(res, -1)
            return False
        if self.fair_sharing:  # Kueue fairSharingIterator: a DRS tournament per cohort tree
            remaining = {h[1].cq: h for h in heads}

            def tournament():
                while remaining:
                    yield fairsharing.pop_fair(remaining)
            seq: Iterable = tournament()
        else:
            heads.sort()  # by the first item alone: it ends with the queue key's unique sequence number
            seq = heads
        progress = False
        victims: dict[str, Entry] = {}
        undo: list = []
        for _, e, asg, targets in seq:
            cq = e.cq
            deferred = False
            if targets and victims and self._recompute_overlap and any(t.w.id in victims for t in targets):
                asg, targets = self._recompute(e, asg, victims)
                deferred = asg.mode == FIT  # Kueue DeferredFit: it fits once those victims are gone
            pending_flavors = e.last is not None and e.last[3]
            if asg.mode == NOFIT:
                if not pending_flavors:  # Kueue requeues it at once while flavors are left to try
                    self._queues.park(e)
                progress = True  # the next cycle looks at the next head (or flavor)
                continue
            if asg.mode == PREEMPT and not targets:
                if cq.spec.reclaim_within_cohort != "Any":  # Kueue CanAlwaysReclaim
                    res = self._to_reserve(cq, asg)
                    cq.charge(res, +1)
                    held.append((cq, res))
                    if cq.spec.strategy == "StrictFIFO":
                        cq.hold = res  # it stays the head and reserves again every cycle
                if not pending_flavors:
                    self._queues.park(e)
                progress = True
                continue
            if deferred:  # waits for this cycle's preemptions, holding what it will take
                e.last = None
                cq.charge(asg.usage, +1)
                held.append((cq, asg.usage))
                if cq.spec.strategy == "BestEffortFIFO":
                    cq.sticky = e
                continue
            if targets and victims and any(t.w.id in victims for t in targets):
                self._skipped(e)
                continue  # overlapping targets: wait for the next cycle
            gone = [v for v in victims.values()] + [t for t in targets if t.w.id not in victims]
            for v in gone:
                v.cq.charge(v.usage, -1)
            fits = cq.fits(asg.usage)
            for v in gone:
                v.cq.charge(v.usage, +1)
            if not fits:
                self._skipped(e)
                continue  # no longer fits after an earlier head of this cycle
            for t in targets:
                victims[t.w.id] = t
            if asg.mode == PREEMPT:
                e.last = None  # Kueue markPreemptionOutcome: the next cycle scans every flavor
                cq.charge(asg.usage, +1)
                held.append((cq, asg.usage))
                if cq.spec.strategy == "BestEffortFIFO":
                    cq.sticky = e
                for t in targets:
                    if t.state == "evicting":
                        continue  # already stopping (issued earlier): nothing new to issue
                    progress = True
                    t.state = "evicting"
                    t.cq.root.version += 1
                    if t.in_pass:
                        undo.append(t)
                    else:
                        out.preempted.append((t.w.id, e.w.id))
                        out.reasons[t.w.id] = targets.reasons.get(t.w.id, "InClusterQueue")
                continue
            self._admit(e, asg)
            e.in_pass = True
            out.admitted.append(e.admission)
            progress = True
        for cq, res in held:
            cq.charge(res, -1)
        for t in undo:  # admitted earlier in this call, never started: back to its queue
            t.in_pass = False
            self._release(t)
            self._queues.push(t)
        return progress

    def _to_reserve(self, cq: QueueNode, asg: Assignment) -> dict:
        """Kueue quotaResourcesToReserve for a head that needs preemption but found no targets."""
        out = {}
        for fr, v in asg.usage.items():
            n, u = cq.nominal.get(fr, 0.0), cq.usage.get(fr, 0.0)
            if asg.borrow > 0:
                bl = cq.blimit.get(fr, INF)
                out[fr] = v if bl == INF else min(v, n + bl - u)
            else:
                out[fr] = max(0.0, min(v, n - u))
        return out

    def _admit(self, e: Entry, asg: Assignment) -> None:
        cq = e.cq
        self._queues.take(e)
        e.usage = dict(asg.usage)
        cq.charge(e.usage, +1)
        cq.root.version += 1
        self._order += 1
        e.reserved = (float(self._order), self._order)
        e.state = "admitted"
        flavors = {name: dict(fl) for name, fl in asg.podsets}
        first = next((f for fl in flavors.values() for f in fl.values()), cq.flavors[0] if cq.flavors else "")
        total: dict[str, float] = {}
        for _, reqs in e.podsets:
            for r, a in reqs.items():
                if a:
                    total[r] = total.get(r, 0.0) + a
        e.admission = Admission(e.w.id, cq.name, first, total, self._order, flavors)
        cq.admitted[e.w.id] = e
        cq.admitted_prios[e.prio] += 1
        cq.root.admitted_version += 1

    def restore_admitted(self, w: Workload, flavor: str | Mapping | None = None,
                         reserved_at: float | None = None, check: bool = True) -> Admission:
        """Re-enter a workload that is already running (re-adopted after a restart, or read
        from a cluster) and charge its quota without waiting for room. ``flavor`` is one flavor
        for every resource, or ``{pod set: {resource: flavor}}`` (Kueue podSetAssignments: a
        resource it gives no flavor is charged to no quota, as in Kueue);
        None picks the first flavor of each resource group. ``reserved_at`` is when its quota
        was reserved (preemption takes the most recently admitted first). Raises like
        :meth:`add` when its queue is unknown or (unless ``check=False``: a cluster's record of
        what it admitted) it could never fit."""
        self.add(w, check)
        e = self._entries[w.id]
        cq = e.cq
        asg = Assignment()
        for ps_name, reqs in e.podsets:
            fl: dict[str, str] = {}
            for r in reqs:
                rg = cq.rg_of.get(r)
                if rg is None and not isinstance(flavor, Mapping):
                    continue
                f: str | None
                if isinstance(flavor, str):
                    f = flavor
                elif isinstance(flavor, Mapping):
                    f = (flavor.get(ps_name) or {}).get(r)
                    if f is None:
                        continue  # no flavor assigned: Kueue charges it to no quota (flavor "")
                else:
                    assert rg is not None  # (no flavor given and no resource group: skipped above)
                    f = rg.flavors[0]
                fl[r] = f
                cq.ensure((f, r))
                asg.usage[(f, r)] = asg.usage.get((f, r), 0.0) + reqs[r]
            asg.podsets.append((ps_name, fl))
        self._admit(e, asg)
        e.reserved = (reserved_at if reserved_at is not None else float(self._order), self._order)
        return e.admission  # type: ignore[return-value]

    def _release(self, e: Entry) -> None:
        cq = e.cq
        if e.admission is not None:
            cq.charge(e.usage, -1)
        e.usage = {}
        cq.root.version += 1
        cq.generation += 1  # Kueue clusterQueue.deleteWorkload
        cq.admitted.pop(e.w.id, None)
        cq.admitted_prios[e.prio] -= 1
        if cq.admitted_prios[e.prio] <= 0:
            del cq.admitted_prios[e.prio]
        cq.root.admitted_version += 1
        e.admission = None
        if self.requeue_delay_s <= 0:
            self._queues.unpark(cq)
            return
        # Kueue's requeuer (a delaying work queue per cohort tree: an earlier due time wins)
        tree = id(cq.cohort.root) if cq.cohort else id(cq)
        due = self.clock() + self.requeue_delay_s
        if tree not in self._requeue_due or due < self._requeue_due[tree][0]:
            self._requeue_due[tree] = (due, cq)

    def requeue_due(self) -> float | None:
        """When parked workloads next go back to their queues (a :meth:`schedule` is due then),
        or None; only with ``requeue_delay_s``. Each cohort tree has its own time:
        :meth:`requeue_times`."""
        return min(self.requeue_times(), default=None)

    def requeue_times(self) -> list[float]:
        """Every time a cohort tree's parked workloads go back to their queues, in order."""
        return sorted({due for due, _ in self._requeue_due.values()})

    def finish(self, wid: str) -> None:
        """An admitted (or evicting) workload ended: free its quota and forget it."""
        e = self._entries.pop(wid, None)
        if e is None:
            return
        if e.state in ("admitted", "evicting"):
            self._release(e)
        elif e.state == "pending":
            self._queues.drop(e)
            e.state = "gone"

    def remove(self, wid: str) -> None:
        """Cancel: drop a pending workload, or free an admitted one's quota."""
        self.finish(wid)

    def evict(self, wid: str) -> None:
        """Mark an admitted workload as being evicted (e.g. a PodsReady timeout): it keeps its
        quota until :meth:`requeue`, and preemptors take it first."""
        e = self._entries.get(wid)
        if e is not None and e.state == "admitted":
            e.state = "evicting"
            e.cq.root.version += 1

    def requeue(self, wid: str, reason: str = "Preempted", at: float | None = None) -> None:
        """An evicted workload has stopped: free its quota, queue it again. A preempted one
        keeps its place (creation time); one evicted for ``PodsReadyTimeout`` or
        ``AdmissionCheck`` is ordered by its eviction time ``at`` (default: the engine's clock)
        under the ``Eviction`` requeuing strategy, as in Kueue."""
        e = self._entries.get(wid)
        if e is None or e.state not in ("admitted", "evicting"):
            return
        self._release(e)
        if self.requeuing_strategy == "Eviction" and reason in ("PodsReadyTimeout", "AdmissionCheck"):
            e.key = self._queues.key(e.prio, self.clock() if at is None else at, e.w.id)
        self._queues.push(e)

    def admitted(self, queue: str | None = None) -> list[str]:
        cqs: Iterable[QueueNode] = self._cqs.values() if queue is None else \
            [self._cqs[self.cluster_queue_of(queue)]]
        return [wid for cq in cqs for wid in cq.admitted]


    # ------------------------------------------------ queues, flavors, preemption (delegated)
    def cluster_queue_of(self, queue: str) -> str:
        """The ClusterQueue a LocalQueue (or ClusterQueue) name points to; SpecError if unknown."""
        return self._queues.cluster_queue_of(queue)

    @property
    def queue_names(self) -> list[str]:
        """Every LocalQueue and ClusterQueue name, sorted."""
        return self._queues.queue_names

    def positions(self, queue: str) -> dict[str, int]:
        """Pending workloads of a queue by id -> 1-based position (1 = next). A LocalQueue
        name gives positions within that LocalQueue, a ClusterQueue name within the CQ."""
        return self._queues.positions(queue)

    def position(self, wid: str) -> int | None:
        """1-based position of a pending workload in its ClusterQueue (None unless pending)."""
        return self._queues.position(wid)

    def pending_counts(self, queue: str) -> tuple[int, int]:
        """(active, inadmissible) pending workloads of a queue's ClusterQueue: Kueue's
        ``pending_workloads`` metric; inadmissible ones are set aside with their shape."""
        return self._queues.pending_counts(queue)

    def pending(self, queue: str | None = None) -> list[str]:
        """Ids of the pending workloads (of one queue's ClusterQueue), in queue order."""
        return self._queues.pending(queue)

    def flavor_assignment(self, wid: str) -> dict:
        """The flavor assignment the pending workload ``wid`` would get now (Kueue
        ``FlavorAssigner.Assign``): ``{"mode": "Fit"|"Preempt"|"NoFit", "borrowing": level,
        "podsets": {pod set: {resource: {"flavor": f, "mode": "Fit"|"Preempt"}}}}``."""
        return self._assigner.describe(self._entries[wid])

    def preemption_targets(self, wid: str, flavors: Mapping[str, Mapping[str, str]],
                           preempt: Iterable[tuple[str, str]]) -> dict[str, str]:
        """The victims (id -> Kueue Preempted reason) that the pending workload ``wid`` would
        evict with the given flavor assignment ({pod set: {resource: flavor}}) when the
        (flavor, resource) pairs in ``preempt`` need preemption: Kueue's
        ``Preemptor.GetTargets`` (the conformance suite replays TestPreemption through it)."""
        return self._preemptor.for_assignment(self._entries[wid], flavors, preempt)

def _num(x: float) -> str:
    if x == INF:
        return "unlimited"
    return str(int(x)) if float(x).is_integer() else f"{x:g}"
