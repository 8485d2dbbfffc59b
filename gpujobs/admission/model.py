"""Plain data of the admission engine: queues, cohorts, workloads, decisions.

Quota shapes accepted everywhere a quota is given::

    {"gpu": 8, "cpu": 64}                         # one flavor, called "default"
    {"a100": {"gpu": 8}, "h100": {"gpu": 4}}      # flavors in the order they are tried
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ..errors import SpecError

DEFAULT_FLAVOR = "default"
STRATEGIES = ("StrictFIFO", "BestEffortFIFO")
WITHIN_QUEUE = ("Never", "LowerPriority", "LowerOrNewerEqualPriority")
RECLAIM = ("Never", "LowerPriority", "Any")
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
    """``count`` pods (ranks), each requesting ``requests`` ({resource: amount})."""
    name: str
    count: int
    requests: Mapping[str, float]

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
    ``preemption.reclaimWithinCohort``. ``local_queues`` name the LocalQueues pointing here
    (the queue's own name always works too).
    """
    name: str
    quota: Mapping
    cohort: str | None = None
    borrowing_limit: Mapping | None = None
    lending_limit: Mapping | None = None
    strategy: str = "BestEffortFIFO"
    within_queue: str = "LowerPriority"
    reclaim_within_cohort: str = "Never"
    local_queues: Sequence[str] = ()

    def __post_init__(self) -> None:
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
    """A set of ClusterQueues that lend each other unused quota; ``quota`` is extra
    capacity the cohort itself owns (Kueue's Cohort resourceGroups)."""
    name: str
    quota: Mapping = field(default_factory=dict)


@dataclass(frozen=True)
class Admission:
    """Where an admitted workload landed."""
    id: str
    cluster_queue: str
    flavor: str
    usage: Mapping[str, float]
    order: int  # admission counter (later = larger)


@dataclass
class Decisions:
    """The outcome of one :meth:`Engine.schedule` call."""
    admitted: list[Admission] = field(default_factory=list)
    preempted: list[tuple[str, str]] = field(default_factory=list)  # (victim, preemptor)

    @property
    def admitted_ids(self) -> list[str]:
        return [a.id for a in self.admitted]

    def __bool__(self) -> bool:
        return bool(self.admitted or self.preempted)
