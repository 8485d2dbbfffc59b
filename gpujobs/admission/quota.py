"""The engine's quota tree and its arithmetic (Kueue's ``resource_node``): ClusterQueues in
cohort trees, what each may still use, what it could ever use, charging usage up the tree.

The floors of the engine, each adding one idea: :class:`Quota` (this module) <-
:class:`~.preemption.Preemption` (who would have to make room) <-
:class:`~.flavors.FlavorAssignment` (which flavor a workload gets) <- :class:`~.engine.Engine`
(scheduling cycles, admit / finish / requeue), which also takes :class:`~.queues.Queues` (the
pending queues: heaps, heads, parking, positions).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from ..errors import SpecError
from .model import (
    INF,
    Admission,
    ClusterQueue,
    Cohort,
    ResourceFlavor,
    Workload,
    normalize_quota,
)

EPS = 1e-9
Key = tuple  # (-priority, timestamp, seq, id)
FR = tuple   # (flavor, resource)

# preemption modes of one flavor/resource, worst first (Kueue flavorassigner.preemptionMode)
NOFIT, NOCAND, PREEMPT, RECLAIM, FIT = range(5)
# candidate variants (Kueue preemption/classical)
WITHIN_CQ, HIER_RECLAIM, RECLAIM_NO_BORROW, RECLAIM_WHILE_BORROW = range(4)
REASON = {WITHIN_CQ: "InClusterQueue", HIER_RECLAIM: "InCohortReclamation",
          RECLAIM_NO_BORROW: "InCohortReclamation", RECLAIM_WHILE_BORROW: "InCohortReclaimWhileBorrowing"}


@dataclass
class _Entry:
    w: Workload
    cq: "_CQ"
    prio: int
    podsets: list  # [(name, {resource: total amount})]
    shape: tuple
    key: Key
    state: str = "pending"  # pending | admitted | evicting
    version: int = 0
    admission: Admission | None = None
    usage: dict = field(default_factory=dict)   # {(flavor, resource): amount} while admitted
    reserved: tuple = (0.0, 0)                   # (quota reservation time, order)
    in_pass: bool = False                        # admitted in the running schedule() call
    pspecs: dict = field(default_factory=dict)   # pod set name -> PodSet
    # Kueue's LastAssignment: the flavor scan's progress, (tried, cq generation, cycle,
    # flavors left) with tried {(pod set, resource): index of the last flavor tried, -1 once
    # all were}; flavors left: some index is not -1 (Kueue PendingFlavors)
    last: tuple | None = None
    pin: dict | None = None                      # NominationMapping while recomputing


@dataclass
class _Asg:
    """A flavor assignment (Kueue flavorassigner.Assignment)."""
    mode: int = FIT                      # representative: NOFIT, PREEMPT or FIT
    podsets: list = field(default_factory=list)   # [(name, {resource: flavor})]
    usage: dict = field(default_factory=dict)     # {fr: amount}
    need: set = field(default_factory=set)        # frs whose mode is Preempt
    borrow: int = 0
    modes: dict = field(default_factory=dict)     # (pod set, resource) -> preemption mode
    tried: dict = field(default_factory=dict)     # (pod set, resource) -> last flavor index tried
    left: bool = False                            # a scan stopped before its last flavor


class _RG:
    def __init__(self, flavors: dict[str, dict[str, float]]):
        self.flavors = list(flavors)
        self.resources = sorted({r for res in flavors.values() for r in res})


class _CQ:
    def __init__(self, spec: ClusterQueue):
        self.spec = spec
        self.name = spec.name
        groups = list(spec.resource_groups or [])
        if spec.quota:
            groups.insert(0, spec.quota)
        self.rgs: list[_RG] = []
        self.rg_of: dict[str, _RG] = {}
        self.nominal: dict[FR, float] = {}
        for i, g in enumerate(groups):
            q = normalize_quota(g, f"queue {spec.name}: resource group {i + 1}")
            if not q:
                continue
            rg = _RG(q)
            for f, res in q.items():
                if any(f in other.flavors for other in self.rgs):
                    raise SpecError(f"queue {spec.name}: resource groups",
                                    f"flavor {f!r} is in two resource groups", "list each flavor once")
                for r, a in res.items():
                    self.nominal[(f, r)] = a
            for r in rg.resources:
                if r in self.rg_of:
                    raise SpecError(f"queue {spec.name}: resource groups",
                                    f"resource {r!r} is in two resource groups",
                                    "put each resource in one group")
                self.rg_of[r] = rg
            self.rgs.append(rg)
        if not self.rgs and spec.resource_groups is None:  # resource_groups=[]: a queue with none
            raise SpecError(f"queue {spec.name}: quota", "is empty", "give e.g. {'gpu': 4}")
        self.flavors = [f for rg in self.rgs for f in rg.flavors]
        self.blimit = _limits(self.nominal, spec.borrowing_limit, f"queue {self.name}: borrowing_limit", INF)
        llim = _limits(self.nominal, spec.lending_limit, f"queue {self.name}: lending_limit", None)
        self.subtree = self.nominal
        # guaranteed part (Kueue's localQuota): what is never lent to the cohort
        self.guaranteed = {fr: (max(0.0, n - llim[fr]) if llim[fr] is not None else 0.0)
                           for fr, n in self.nominal.items()}
        self.lq = self.guaranteed
        self.usage: dict[FR, float] = {fr: 0.0 for fr in self.nominal}
        self.cohort: _Cohort | None = None  # the parent cohort
        self.root: _CQ | _Cohort = self       # the root of its cohort tree (itself when alone)
        # the pending queue (read and written by queues.Queues; hold and sticky by the cycle too)
        self.heaps: dict[tuple, list] = {}
        self.sorted: list[Key] = []
        self.admitted: dict[str, _Entry] = {}
        self.admitted_prios: Counter = Counter()
        self.parked: dict[tuple, Key] = {}  # shape -> key of the head that could not be admitted
        self.stalled = False                 # every head is parked: skip until something changes
        self.generation = 0                  # Kueue AllocatableResourceGeneration: +1 per release
        self.bwc = spec.borrow_within_cohort != "Never"
        self.hold: dict = {}  # capacity a parked StrictFIFO head reserves each cycle
        self.potential: dict[FR, float] = {}  # filled by the Engine once cohorts are known
        self.sticky: _Entry | None = None  # BestEffortFIFO: the preemptor kept at the head
        self.inactive = False  # names a ResourceFlavor that does not exist
        self.weight = float(spec.fair_weight)
        self.nominated: tuple | None = None  # (head, cohort version, assignment, targets)
        self.version = 0  # bumped on every admission, release or eviction (when alone)



def _limits(nominal: Mapping[FR, float], spec: Mapping | None, what: str, default) -> dict:
    lim = normalize_quota(spec, what)
    out = {}
    for fr in nominal:
        f, r = fr
        if f in lim:
            out[fr] = lim[f].get(r, default)
        elif "default" in lim and len(lim) == 1 and r in lim["default"]:
            out[fr] = lim["default"][r]  # {"gpu": 2}: the same limit for every flavor
        else:
            out[fr] = default
    return out


class _Cohort:
    """A node of a cohort tree (Kueue resourceNode): its own quota, its subtree quota (own +
    what its children lend), its usage (what its children use above their guaranteed part)."""

    def __init__(self, spec: Cohort):
        self.name = spec.name
        self.spec = spec
        self.own: dict[FR, float] = {(f, r): a for f, res in
                                     normalize_quota(spec.quota, f"cohort {spec.name}: quota").items()
                                     for r, a in res.items()}
        self.members: list[_CQ] = []        # child ClusterQueues
        self.children: list[_Cohort] = []   # child cohorts
        self.parent: _Cohort | None = None
        self.root: _Cohort = self
        self.subtree: dict[FR, float] = Counter()  # type: ignore[assignment]  # Kueue SubtreeQuota (float Counter)
        self.lq: dict[FR, float] = {}       # what it keeps from its parent (lending limit)
        self.blimit: dict[FR, float] = {}
        # typeshed types Counter values as int; these are float amounts (a missing key reads 0)
        self.usage: dict[FR, float] = Counter()  # type: ignore[assignment]
        self.height = 1
        self.all_cqs: list[_CQ] = []        # every ClusterQueue of the tree (on the root)
        self.version = 0  # bumped on every admission, release or eviction in the tree
        self.weight = float(spec.fair_weight)

    def finish(self) -> None:
        """Subtree quotas, guaranteed parts and heights, children first."""
        for c in self.children:
            c.finish()
        self.subtree = Counter(self.own)  # type: ignore[assignment]  # float amounts (see __init__)
        nodes: list[_CQ | _Cohort] = [*self.members, *self.children]
        for child in nodes:
            for fr, q in child.subtree.items():
                self.subtree[fr] += q - child.lq.get(fr, 0.0)
        self.blimit = _limits(self.subtree, self.spec.borrowing_limit,
                              f"cohort {self.name}: borrowing_limit", INF)
        llim = _limits(self.subtree, self.spec.lending_limit, f"cohort {self.name}: lending_limit", None)
        self.lq = {fr: max(0.0, q - llim[fr]) if llim[fr] is not None else 0.0 for fr, q in self.subtree.items()}
        self.height = max([min(len(self.members) + len(self.children), 1)] + [c.height + 1 for c in self.children])


class Quota:
    """Quota arithmetic over the engine's queues and cohorts (the state lives in :class:`~.engine.Engine`)."""

    _cqs: dict[str, _CQ]
    _entries: dict[str, _Entry]
    _flavors: dict[str, ResourceFlavor] | None
    _oracle_hook: Callable[[str, tuple[str, str], float], tuple[str, int]] | None
    _oracle: tuple | None
    fair_sharing: bool
    fs_strategies: tuple[str, ...]


    def _available(self, cq: _CQ, fr: FR) -> float:
        """What ``cq`` may still use of ``fr`` now (its guaranteed part + what its cohorts have,
        each capped by its borrowing limit); Kueue's ClusterQueueSnapshot.Available."""
        n = cq.nominal.get(fr)
        if n is None:
            return 0.0
        coh = cq.cohort
        if coh is None:
            return max(0.0, n - cq.usage[fr])
        if coh.parent is not None:
            return max(0.0, self._avail(cq, fr))
        u, g = cq.usage[fr], cq.guaranteed[fr]  # flat cohort, inlined (the common case)
        up = coh.subtree.get(fr, 0.0) - coh.usage.get(fr, 0.0)
        bl = cq.blimit[fr]
        if bl != INF:
            up = min(n - g - max(0.0, u - g) + bl, up)
        return max(0.0, max(0.0, g - u) + up)

    @staticmethod
    def _avail(node, fr: FR) -> float:
        parent = node.cohort if isinstance(node, _CQ) else node.parent
        n = node.subtree.get(fr, 0.0)
        u = node.usage.get(fr, 0.0)
        if parent is None:
            return n - u
        g = node.lq.get(fr, 0.0)
        up = Quota._avail(parent, fr)
        bl = node.blimit.get(fr, INF)
        if bl != INF:
            up = min(n - g - max(0.0, u - g) + bl, up)
        return max(0.0, g - u) + up

    def _potential(self, cq: _CQ, fr: FR) -> float:
        """The most ``cq`` could ever use of ``fr`` (everything else idle)."""
        p = cq.potential.get(fr)
        if p is not None:
            return p
        if fr not in cq.nominal:
            return 0.0
        return self._pot(cq, fr)

    @staticmethod
    def _pot(node, fr: FR) -> float:
        parent = node.cohort if isinstance(node, _CQ) else node.parent
        n = node.subtree.get(fr, 0.0)
        if parent is None:
            return n
        avail = node.lq.get(fr, 0.0) + Quota._pot(parent, fr)
        bl = node.blimit.get(fr, INF)
        return min(n + bl, avail) if bl != INF else avail

    @staticmethod
    def _charge(cq: _CQ, usage: Mapping[FR, float], sign: float) -> None:
        """Add (sign +1) or remove (-1) usage; what exceeds a node's guaranteed part is charged
        to its parent cohort, up to the root (Kueue addUsage/removeUsage)."""
        for fr, a in usage.items():
            if fr not in cq.usage:
                continue
            before = cq.usage[fr]
            after = before + sign * a
            cq.usage[fr] = after
            node, lq = cq.cohort, cq.guaranteed[fr]
            while node is not None:
                d = max(0.0, after - lq) - max(0.0, before - lq)
                if d == 0.0:
                    break
                before = node.usage[fr]
                after = before + d
                node.usage[fr] = after
                lq = node.lq.get(fr, 0.0)
                node = node.parent

    def _borrow_level(self, cq: _CQ, fr: FR, val: float) -> tuple[int, bool]:
        """(borrowing level, may reclaim in the hierarchy) for taking ``val`` more of ``fr``:
        Kueue classical.FindHeightOfLowestSubtreeThatFits (0: within the queue's nominal quota,
        else the height of the lowest cohort whose subtree quota holds it)."""
        if cq.cohort is None:
            return 0, False
        u = cq.usage.get(fr, 0.0)
        if u + val <= cq.nominal.get(fr, 0.0) + EPS:
            return 0, True
        remaining = val - max(0.0, cq.guaranteed.get(fr, 0.0) - u)
        node: _Cohort | None = cq.cohort
        while node is not None:
            nu = node.usage.get(fr, 0.0)
            if nu + remaining <= node.subtree.get(fr, 0.0) + EPS:
                return node.height, node.parent is not None
            remaining -= max(0.0, node.lq.get(fr, 0.0) - nu)
            node = node.parent
        return cq.cohort.root.height, False

    @staticmethod
    def _within_nominal(node, frs: Iterable[FR]) -> bool:
        u, n = node.usage, node.subtree
        for fr in frs:
            if u.get(fr, 0.0) > n.get(fr, 0.0) + EPS:
                return False
        return True

    def _fits(self, cq: _CQ, usage: Mapping[FR, float], allow_borrow: bool = True) -> bool:
        for fr, v in usage.items():
            if not allow_borrow and cq.usage.get(fr, 0.0) + v > cq.nominal.get(fr, 0.0) + EPS:
                return False
            if v > self._available(cq, fr) + EPS:
                return False
        return True

    def _ensure_fr(self, cq: _CQ, fr: FR) -> None:
        """A flavor/resource the queue lists no quota for (Kueue: nominal 0; it may still be
        used by borrowing from the cohorts above): give it a zero entry."""
        if fr not in cq.nominal:
            cq.nominal[fr] = cq.guaranteed[fr] = cq.usage[fr] = 0.0
            cq.blimit[fr] = INF
            cq.potential[fr] = self._pot(cq, fr)
