"""gpujobs.admission: a Kueue-style admission engine (pure Python, no processes).

Used by the local backend to admit gangs on this machine, by the test suite's simulated
Kueue controller, and by ``benchmarks/admission.py``::

    from gpujobs.admission import Engine, ClusterQueue, Cohort, Workload, PodSet

    eng = Engine([ClusterQueue("team-a", {"gpu": 4}, cohort="lab"),
                  ClusterQueue("team-b", {"gpu": 4}, cohort="lab", reclaim_within_cohort="Any")],
                 priorities={"low": 100, "normal": 500, "high": 1000})
    eng.add(Workload("j1", "team-a", [PodSet("ranks", 2, {"gpu": 1})], priority="high", created=t))
    d = eng.schedule()          # Decisions(admitted=[Admission…], preempted=[(victim, by)])
    eng.position("j2")          # 1-based, None unless pending
    eng.finish("j1")            # quota back; eng.requeue(victim) once an evicted one stopped

Semantics and where they differ from Kueue: docs/admission.md.

Modules: ``engine`` (the scheduling cycles, admit / requeue) holds a quota tree (``quota``:
queue and cohort nodes, their arithmetic), the pending queues (``queues``: Kueue's queue
manager), a preemptor (``preemption``; ``fairsharing``: DRS, tournament, fair preemption;
``victims``: what both preemptors share) and a flavor assigner (``flavors``); ``model`` (the
data); ``gates`` (Kueue's feature gates per supported version); ``forecast`` (the package that
plays the engine forward).
"""
from . import gates
from .engine import DEFAULT_PRIORITIES, Engine
from .model import (
                    DEFAULT_FLAVOR,
                    Admission,
                    ClusterQueue,
                    Cohort,
                    Decisions,
                    PodSet,
                    ResourceFlavor,
                    Workload,
                    normalize_quota,
)

__all__ = ["Engine", "gates", "ClusterQueue", "Cohort", "Workload", "PodSet", "Decisions", "Admission",
           "ResourceFlavor", "DEFAULT_PRIORITIES", "DEFAULT_FLAVOR", "normalize_quota"]
