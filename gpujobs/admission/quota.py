"""The engine's quota tree (Kueue's ``resource_node``): ClusterQueues in cohort trees, what each
may still use, what it could ever use, charging usage up the tree; and :class:`Entry`, a
workload as the engine holds it.

The engine (:class:`~.engine.Engine`) holds one :class:`QuotaTree` and hands its nodes to the
parts it is composed of: :class:`~.queues.Queues` (the pending queues), a
:class:`~.preemption.Preemptor` (who would have to make room) and a
:class:`~.flavors.FlavorAssigner` (which flavor a workload gets). Nodes do their own arithmetic
(:meth:`QueueNode.available`, :meth:`QueueNode.charge`, ...); the walks that work on a queue or
a cohort alike are the module's functions (:func:`available_above`, :func:`potential`,
:func:`within_nominal`, :func:`parent_of`).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Collection, Iterable, Mapping, Sequence, Union

from ..errors import SpecError
from .model import (
    INF,
    Admission,
    ClusterQueue,
    Cohort,
    Workload,
    normalize_quota,
)

EPS = 1e-9
Key = tuple  # (-priority, timestamp, seq, id)
FR = tuple   # (flavor, resource)

@dataclass(slots=True)
class Entry:
    """A workload in the engine: its queue node, priority, per-pod-set totals, queue key and
    state; while admitted, the usage it is charged for."""
    w: Workload
    cq: "QueueNode"
    prio: int
    podsets: list  # [(name, {resource: total amount})]
    shape: int  # the request shape's number (Queues.shape)
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


class ResourceGroup:
    """A resource group of a ClusterQueue: its flavors in order and the resources they cover."""

    def __init__(self, flavors: dict[str, dict[str, float]]):
        self.flavors = list(flavors)
        self.resources = sorted({r for res in flavors.values() for r in res})


class QueueNode:
    """A ClusterQueue in the quota tree: its quota per (flavor, resource), limits, usage, and its
    pending queue's state (kept by :class:`~.queues.Queues`)."""

    def __init__(self, spec: ClusterQueue):
        self.spec = spec
        self.name = spec.name
        groups = list(spec.resource_groups or [])
        if spec.quota:
            groups.insert(0, spec.quota)
        self.rgs: list[ResourceGroup] = []
        self.rg_of: dict[str, ResourceGroup] = {}
        self.nominal: dict[FR, float] = {}
        for i, g in enumerate(groups):
            q = normalize_quota(g, f"queue {spec.name}: resource group {i + 1}")
            if not q:
                continue
            rg = ResourceGroup(q)
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
        self.cohort: CohortNode | None = None  # the parent cohort
        self.root: QueueNode | CohortNode = self       # the root of its cohort tree (itself when alone)
        # the pending queue (read and written by queues.Queues; hold and sticky by the cycle too)
        self.heaps: dict[int, list] = {}
        self.sorted: list[Key] = []
        self.tops: list | None = None  # [(key, shape, entry)] of the heaps' tops, first first (None: stale)
        self.admitted: dict[str, Entry] = {}
        self.admitted_prios: Counter = Counter()
        self.parked: dict[int, Key] = {}  # shape -> key of the head that could not be admitted
        self.stalled = False                 # every head is parked: skip until something changes
        self.generation = 0                  # Kueue AllocatableResourceGeneration: +1 per release
        self.bwc = spec.borrow_within_cohort != "Never"
        self.hold: dict = {}  # capacity a parked StrictFIFO head reserves each cycle
        self.potential: dict[FR, float] = {}  # filled by QuotaTree.build once cohorts are known
        self.sticky: Entry | None = None  # BestEffortFIFO: the preemptor kept at the head
        self.inactive = False  # names a ResourceFlavor that does not exist
        self.weight = float(spec.fair_weight)
        self.nominated: tuple | None = None  # (head, cohort version, assignment, targets)
        self.version = 0  # bumped on every admission, release or eviction (when alone)
        self.admitted_version = 0  # bumped whenever a queue of its tree admits or lets go (when alone)

    # ------------------------------------------------------------ arithmetic
    def available(self, fr: FR) -> float:
        """What this queue may still use of ``fr`` now (its guaranteed part + what its cohorts
        have, each capped by its borrowing limit); Kueue's ClusterQueueSnapshot.Available."""
        n = self.nominal.get(fr)
        if n is None:
            return 0.0
        coh = self.cohort
        if coh is None:
            return max(0.0, n - self.usage[fr])
        if coh.parent is not None:
            return max(0.0, available_above(self, fr))
        u, g = self.usage[fr], self.guaranteed[fr]  # flat cohort, inlined (the common case)
        up = coh.subtree.get(fr, 0.0) - coh.usage.get(fr, 0.0)
        bl = self.blimit[fr]
        if bl != INF:
            up = min(n - g - max(0.0, u - g) + bl, up)
        x = (g - u if g - u > 0.0 else 0.0) + up  # max(0.0, max(0.0, g - u) + up), without the calls
        return x if x > 0.0 else 0.0

    def capacity(self, fr: FR) -> float:
        """The most this queue could ever use of ``fr`` (everything else idle)."""
        p = self.potential.get(fr)
        if p is not None:
            return p
        if fr not in self.nominal:
            return 0.0
        return potential(self, fr)

    def charge(self, usage: Mapping[FR, float], sign: float) -> None:
        """Add (sign +1) or remove (-1) usage; what exceeds a node's guaranteed part is charged
        to its parent cohort, up to the root (Kueue addUsage/removeUsage)."""
        own = self.usage
        for fr, a in usage.items():
            before = own.get(fr)
            if before is None:
                continue
            after = before + sign * a
            own[fr] = after
            node, lq = self.cohort, self.guaranteed[fr]
            while node is not None:
                # max(0.0, after - lq) - max(0.0, before - lq), without the calls
                x, y = after - lq, before - lq
                d = (x if x > 0.0 else 0.0) - (y if y > 0.0 else 0.0)
                if d == 0.0:
                    break
                nu = node.usage
                before = nu[fr]
                after = before + d
                nu[fr] = after
                lq = node.lq.get(fr, 0.0)
                node = node.parent

    def borrow_level(self, fr: FR, val: float) -> tuple[int, bool]:
        """(borrowing level, may reclaim in the hierarchy) for taking ``val`` more of ``fr``:
        Kueue classical.FindHeightOfLowestSubtreeThatFits (0: within the queue's nominal quota,
        else the height of the lowest cohort whose subtree quota holds it)."""
        if self.cohort is None:
            return 0, False
        u = self.usage.get(fr, 0.0)
        if u + val <= self.nominal.get(fr, 0.0) + EPS:
            return 0, True
        remaining = val - max(0.0, self.guaranteed.get(fr, 0.0) - u)
        node: CohortNode | None = self.cohort
        while node is not None:
            nu = node.usage.get(fr, 0.0)
            if nu + remaining <= node.subtree.get(fr, 0.0) + EPS:
                return node.height, node.parent is not None
            remaining -= max(0.0, node.lq.get(fr, 0.0) - nu)
            node = node.parent
        return self.cohort.root.height, False

    def fits(self, usage: Mapping[FR, float], allow_borrow: bool = True) -> bool:
        """Whether ``usage`` more fits now (within nominal quota only, unless ``allow_borrow``)."""
        for fr, v in usage.items():
            if not allow_borrow and self.usage.get(fr, 0.0) + v > self.nominal.get(fr, 0.0) + EPS:
                return False
            if v > self.available(fr) + EPS:
                return False
        return True

    def ensure(self, fr: FR) -> None:
        """A flavor/resource the queue lists no quota for (Kueue: nominal 0; it may still be
        used by borrowing from the cohorts above): give it a zero entry."""
        if fr not in self.nominal:
            self.nominal[fr] = self.guaranteed[fr] = self.usage[fr] = 0.0
            self.blimit[fr] = INF
            self.potential[fr] = potential(self, fr)


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


class CohortNode:
    """A cohort, a node of a cohort tree (Kueue resourceNode): its own quota, its subtree quota
    (own + what its children lend), its usage (what its children use above their guaranteed
    part)."""

    def __init__(self, spec: Cohort):
        self.name = spec.name
        self.spec = spec
        self.own: dict[FR, float] = {(f, r): a for f, res in
                                     normalize_quota(spec.quota, f"cohort {spec.name}: quota").items()
                                     for r, a in res.items()}
        self.members: list[QueueNode] = []        # child ClusterQueues
        self.children: list[CohortNode] = []   # child cohorts
        self.parent: CohortNode | None = None
        self.root: CohortNode = self
        self.subtree: dict[FR, float] = Counter()  # type: ignore[assignment]  # Kueue SubtreeQuota (float Counter)
        self.lq: dict[FR, float] = {}       # what it keeps from its parent (lending limit)
        self.blimit: dict[FR, float] = {}
        # typeshed types Counter values as int; these are float amounts (a missing key reads 0)
        self.usage: dict[FR, float] = Counter()  # type: ignore[assignment]
        self.height = 1
        self.all_cqs: list[QueueNode] = []        # every ClusterQueue of the tree (on the root)
        self.version = 0  # bumped on every admission, release or eviction in the tree
        # bumped whenever a queue of the tree admits or lets go of a workload (simulated ones
        # too); the lowest admitted priorities of its queues are kept for it (``lows``)
        self.admitted_version = 0
        self.lows: tuple = (-1, 0, ())  # (admitted_version, queues with admitted, two lowest (prio, queue))
        self.weight = float(spec.fair_weight)

    def finish(self) -> None:
        """Subtree quotas, guaranteed parts and heights, children first."""
        for c in self.children:
            c.finish()
        self.subtree = Counter(self.own)  # type: ignore[assignment]  # float amounts (see __init__)
        nodes: list[QueueNode | CohortNode] = [*self.members, *self.children]
        for child in nodes:
            for fr, q in child.subtree.items():
                self.subtree[fr] += q - child.lq.get(fr, 0.0)
        self.blimit = _limits(self.subtree, self.spec.borrowing_limit,
                              f"cohort {self.name}: borrowing_limit", INF)
        llim = _limits(self.subtree, self.spec.lending_limit, f"cohort {self.name}: lending_limit", None)
        self.lq = {fr: max(0.0, q - llim[fr]) if llim[fr] is not None else 0.0 for fr, q in self.subtree.items()}
        self.height = max([min(len(self.members) + len(self.children), 1)] + [c.height + 1 for c in self.children])


Node = Union[QueueNode, CohortNode]


def parent_of(node: Node) -> CohortNode | None:
    """The cohort above a queue or a cohort (None at the top)."""
    return node.cohort if isinstance(node, QueueNode) else node.parent


def available_above(node: Node, fr: FR) -> float:
    """What ``node`` may still use of ``fr``, walking up its cohorts (the general case of
    :meth:`QueueNode.available`)."""
    parent = parent_of(node)
    n = node.subtree.get(fr, 0.0)
    u = node.usage.get(fr, 0.0)
    if parent is None:
        return n - u
    g = node.lq.get(fr, 0.0)
    up = available_above(parent, fr)
    bl = node.blimit.get(fr, INF)
    if bl != INF:
        up = min(n - g - max(0.0, u - g) + bl, up)
    return max(0.0, g - u) + up


def potential(node: Node, fr: FR) -> float:
    """The most ``node`` could ever use of ``fr`` (everything else in its tree idle)."""
    parent = parent_of(node)
    n = node.subtree.get(fr, 0.0)
    if parent is None:
        return n
    avail = node.lq.get(fr, 0.0) + potential(parent, fr)
    bl = node.blimit.get(fr, INF)
    return min(n + bl, avail) if bl != INF else avail


def within_nominal(node: Node, frs: Iterable[FR]) -> bool:
    """Whether ``node`` uses no more than its subtree quota of each of ``frs``."""
    u, n = node.usage, node.subtree
    for fr in frs:
        if u.get(fr, 0.0) > n.get(fr, 0.0) + EPS:
            return False
    return True


class QuotaTree:
    """The ClusterQueues and cohort trees of one engine, by name. Built in three steps as the
    engine reads its configuration: cohorts (here), each queue (:meth:`add_queue`), then
    :meth:`build` (parents, subtree quotas, what each queue could ever use)."""

    def __init__(self, cohorts: Sequence[Cohort] = ()):
        self.cqs: dict[str, QueueNode] = {}
        self.cohorts: dict[str, CohortNode] = {}
        for c in cohorts:
            if c.name in self.cohorts:
                raise SpecError("cohorts", f"cohort {c.name!r} is defined twice", "rename one")
            self.cohorts[c.name] = CohortNode(c)

    def add_queue(self, spec: ClusterQueue) -> QueueNode:
        if spec.name in self.cqs:
            raise SpecError("queues", f"queue {spec.name!r} is defined twice", "rename one")
        cq = QueueNode(spec)
        self.cqs[spec.name] = cq
        if spec.cohort:
            coh = self.cohorts.setdefault(spec.cohort, CohortNode(Cohort(spec.cohort)))
            coh.members.append(cq)
            cq.cohort = coh
        return cq

    def build(self, flavors: Collection[str] | None = None) -> None:
        """Link the cohort trees and fill in what every queue could ever use; with ``flavors``
        (the ResourceFlavors that exist), a queue naming another flavor is inactive."""
        for coh in list(self.cohorts.values()):
            if coh.spec.parent:
                parent = self.cohorts.setdefault(coh.spec.parent, CohortNode(Cohort(coh.spec.parent)))
                coh.parent = parent
                parent.children.append(coh)
        for coh in self.cohorts.values():
            seen, node = set(), coh
            while node.parent is not None:
                if node.name in seen:
                    raise SpecError(f"cohort {coh.name}: parent", "the cohort parents form a cycle",
                                    "give the top cohort no parent")
                seen.add(node.name)
                node = node.parent
            coh.root = node
        for coh in self.cohorts.values():
            if coh.parent is None:
                coh.finish()
        for cq in self.cqs.values():
            if cq.cohort is not None:
                cq.root = cq.cohort.root
                cq.root.all_cqs.append(cq)
        for cq in self.cqs.values():
            cq.potential = {fr: cq.capacity(fr) for fr in cq.nominal}
            cq.inactive = flavors is not None and any(f not in flavors for f in cq.flavors)

    def node(self, name: str) -> Node | None:
        """The ClusterQueue or Cohort called ``name`` (None if there is none)."""
        return self.cqs.get(name) or self.cohorts.get(name)
