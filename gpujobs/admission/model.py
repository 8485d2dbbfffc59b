"""Plain data of the admission engine: queues, cohorts, workloads, decisions.

Quota shapes accepted everywhere a quota is given::

    {"gpu": 8, "cpu": 64}                         # one flavor, called "default"
    {"a100": {"gpu": 8}, "h100": {"gpu": 4}}      # flavors in the order they are tried

A ClusterQueue's ``quota`` is one resource group (every flavor covers the resources it lists);
``resource_groups=[{...}, {...}]`` gives several (Kueue's ``resourceGroups``: each resource
belongs to one group, and each group picks its flavor on its own, per pod set).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ..errors import SpecError

DEFAULT_FLAVOR = "default"
STRATEGIES = ("StrictFIFO", "BestEffortFIFO")
WITHIN_QUEUE = ("Never", "LowerPriority", "LowerOrNewerEqualPriority")
RECLAIM = ("Never", "LowerPriority", "Any")
BORROW_WITHIN_COHORT = ("Never", "LowerPriority")
FUNGIBILITY = ("MayStopSearch", "TryNextFlavor")
PREFERENCE = (None, "BorrowingOverPreemption", "PreemptionOverBorrowing")
REQUEUING = ("Eviction", "Creation")
INF = float("inf")


def normalize_quota(quota: Mapping | None, what: str) -> dict[str, dict[str, float]]:
    """``{flavor: {resource: amount}}`` from either accepted shape."""
    if not quota:
        return {}
    if all(isinstance(v, Mapping) for v in quota.values()):
        out = {str(f): {str(r): float(a) for r, a in res.items()} for f, res in quota.items()}
    elif not any(isinstance(v, Mapping) for v in quota.values()):
        out = {DEFAULT_FLAVOR: {str(r): float(a) for r, a in quota.items()}}
    else:
        raise SpecError(what, "mixes flavors and plain resources",
                        "use {'gpu': 8} or {'flavor': {'gpu': 8}}")
    for f, res in out.items():
        for r, a in res.items():
            if a < 0:
                raise SpecError(f"{what}[{f}][{r}]", f"must be >= 0, got {a}", "use 0 or more")
    return out


@dataclass(frozen=True)
class PodSet:
    """``count`` pods (ranks), each requesting ``requests`` ({resource: amount}).
    ``node_selector`` ({label: value}) and ``tolerations`` ([{"key", "operator", "value",
    "effect"}]) are the pod template's, matched against ResourceFlavors as Kueue does."""
    name: str
    count: int
    requests: Mapping[str, float]
    node_selector: Mapping[str, str] = field(default_factory=dict, hash=False)
    tolerations: Sequence[Mapping[str, str]] = ()

    def total(self) -> dict[str, float]:
        return {r: a * self.count for r, a in self.requests.items() if a}


@dataclass
class Workload:
    """One job as the engine sees it. ``queue`` is a LocalQueue (or ClusterQueue) name;
    ``priority`` a class name, an int value, or None for the default class."""
    id: str
    queue: str
    podsets: Sequence[PodSet]
    priority: int | str | None = None
    created: float = 0.0

    def total(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for ps in self.podsets:
            for r, a in ps.total().items():
                out[r] = out.get(r, 0.0) + a
        return out


@dataclass
class ClusterQueue:
    """Kueue's ClusterQueue: nominal quota per flavor/resource, an optional cohort.

    ``borrowing_limit`` caps what this queue may use above nominal (None: unlimited,
    up to what the cohort has free); ``lending_limit`` caps what it lends (None: all).
    ``within_queue`` is ``preemption.withinClusterQueue``; ``reclaim_within_cohort`` is
    ``preemption.reclaimWithinCohort``; ``borrow_within_cohort`` (``Never`` or
    ``LowerPriority``) and ``max_priority_threshold`` are ``preemption.borrowWithinCohort``.
    ``when_can_borrow`` / ``when_can_preempt`` / ``preference`` are ``flavorFungibility``
    (defaults as in Kueue v0.19: ``MayStopSearch`` / ``TryNextFlavor`` / none).
    ``local_queues`` name the LocalQueues pointing here (the queue's own name always works too).
    """
    name: str
    quota: Mapping | None = None
    cohort: str | None = None
    borrowing_limit: Mapping | None = None
    lending_limit: Mapping | None = None
    strategy: str = "BestEffortFIFO"
    within_queue: str = "LowerPriority"
    reclaim_within_cohort: str = "Never"
    local_queues: Sequence[str] = ()
    resource_groups: Sequence[Mapping] | None = None
    borrow_within_cohort: str = "Never"
    max_priority_threshold: int | None = None
    when_can_borrow: str = "MayStopSearch"
    when_can_preempt: str = "TryNextFlavor"
    preference: str | None = None
    fair_weight: float = 1.0  # fairSharing.weight (used when the Engine has fair_sharing on)

    def __post_init__(self) -> None:
        for fld, val, allowed in (("borrow_within_cohort", self.borrow_within_cohort, BORROW_WITHIN_COHORT),
                                  ("when_can_borrow", self.when_can_borrow, FUNGIBILITY),
                                  ("when_can_preempt", self.when_can_preempt, FUNGIBILITY),
                                  ("preference", self.preference, PREFERENCE)):
            if val not in allowed:
                raise SpecError(f"queue {self.name}: {fld}", f"unknown {val!r}",
                                f"use one of {', '.join(str(a) for a in allowed)}")
        if self.strategy not in STRATEGIES:
            raise SpecError(f"queue {self.name}: strategy", f"unknown {self.strategy!r}",
                            f"use one of {', '.join(STRATEGIES)}")
        if self.within_queue not in WITHIN_QUEUE:
            raise SpecError(f"queue {self.name}: within_queue", f"unknown {self.within_queue!r}",
                            f"use one of {', '.join(WITHIN_QUEUE)}")
        if self.reclaim_within_cohort not in RECLAIM:
            raise SpecError(f"queue {self.name}: reclaim_within_cohort",
                            f"unknown {self.reclaim_within_cohort!r}", f"use one of {', '.join(RECLAIM)}")


@dataclass
class Cohort:
    """A set of ClusterQueues (and child cohorts) that lend each other unused quota; ``quota``
    is extra capacity the cohort itself owns (Kueue's Cohort resourceGroups). ``parent`` makes
    it a child of another cohort (hierarchical cohorts); ``borrowing_limit`` /
    ``lending_limit`` then cap what it takes from / gives to its parent."""
    name: str
    quota: Mapping = field(default_factory=dict)
    parent: str | None = None
    borrowing_limit: Mapping | None = None
    lending_limit: Mapping | None = None
    fair_weight: float = 1.0  # fairSharing.weight


@dataclass(frozen=True)
class ResourceFlavor:
    """Kueue's ResourceFlavor: the node labels its nodes carry, the taints on them
    ([{"key", "value", "effect"}]) and tolerations the flavor adds to its pods. A pod set can
    use the flavor only if it tolerates every NoSchedule/NoExecute taint (with the flavor's
    tolerations) and its node selector, restricted to the flavor's label keys, matches."""
    name: str
    node_labels: Mapping[str, str] = field(default_factory=dict, hash=False)
    node_taints: Sequence[Mapping[str, str]] = ()
    tolerations: Sequence[Mapping[str, str]] = ()

    def admits(self, ps: "PodSet") -> bool:
        for t in self.node_taints:
            if t.get("effect") not in ("NoSchedule", "NoExecute"):
                continue
            if not any(_tolerates(tol, t) for tol in (*ps.tolerations, *self.tolerations)):
                return False
        for k, v in (ps.node_selector or {}).items():
            if k in self.node_labels and self.node_labels[k] != v:
                return False
        return True


def _tolerates(tol: Mapping[str, str], taint: Mapping[str, str]) -> bool:
    """Kubernetes Toleration.ToleratesTaint."""
    if tol.get("effect") and tol.get("effect") != taint.get("effect"):
        return False
    if tol.get("key") and tol.get("key") != taint.get("key"):
        return False
    if tol.get("operator", "Equal") == "Exists":
        return not tol.get("value")
    return bool(tol.get("key")) and tol.get("value", "") == taint.get("value", "")


@dataclass(frozen=True)
class Admission:
    """Where an admitted workload landed. ``flavors`` is Kueue's podSetAssignments
    ({pod set: {resource: flavor}}); ``flavor`` is the flavor of the first pod set's first
    resource (the only one for single-flavor queues, kept for older callers)."""
    id: str
    cluster_queue: str
    flavor: str
    usage: Mapping[str, float]
    order: int  # admission counter (later = larger)
    flavors: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


@dataclass
class Decisions:
    """The outcome of one :meth:`Engine.schedule` call. No workload is in both lists."""
    admitted: list[Admission] = field(default_factory=list)
    preempted: list[tuple[str, str]] = field(default_factory=list)  # (victim, preemptor)
    # victim -> Kueue's Preempted reason: InClusterQueue, InCohortReclamation,
    # InCohortReclaimWhileBorrowing
    reasons: dict[str, str] = field(default_factory=dict)

    @property
    def admitted_ids(self) -> list[str]:
        return [a.id for a in self.admitted]

    def __bool__(self) -> bool:
        return bool(self.admitted or self.preempted)
