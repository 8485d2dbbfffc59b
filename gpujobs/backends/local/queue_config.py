"""The local agent's queues, cohorts and priority classes, built from ``settings().local``."""
from __future__ import annotations

from typing import Any

from ...config import Settings, settings
from ...devices import local_cpus
from ...errors import SpecError


def admission_config(slots: int, s: Settings | None = None, cpus: float | None = None) -> dict[str, Any]:
    """Queues, cohorts and priority classes for the local agent's admission engine.

    Returns ``{"queues": [ClusterQueue], "cohorts": [Cohort], "priorities": {name: value},
    "default_priority": name-or-None, "kueue_version": version row}`` (``[local] kueue_version``,
    default the newest supported: :mod:`gpujobs.admission.gates`). Without ``[[local.queues]]``: one
    queue "default" with all ``slots`` GPU slots and ``cpus`` CPUs (default
    :func:`gpujobs.devices.local_cpus`): ranks asking for 0 GPUs are charged CPUs, the others GPU
    slots. A queue without ``cpus`` may use every CPU. GPU quotas (or explicit ``cpus``) adding up
    to more than the machine has are a SpecError.
    """
    # late: the admission engine (~25 ms of imports) is for building the queues, not for every
    # process that imports the local backend (a status query, the CLI)
    from ...admission import DEFAULT_PRIORITIES, ClusterQueue, Cohort
    from ...admission.gates import kueue_version_of

    s = settings() if s is None else s
    local = s.local
    if cpus is None:
        cpus = local_cpus(local)
    queues: list[ClusterQueue] = []
    for q in local.queues or ():
        quota: dict[str, float] = {"gpu": float(slots) if q.gpus is None else q.gpus,
                                   "cpu": cpus if q.cpus is None else q.cpus}
        if q.memory is not None:
            quota["memory"] = q.memory
        queues.append(ClusterQueue(
            name=q.name, quota=quota, cohort=q.cohort,
            borrowing_limit={"gpu": q.borrowing_limit} if q.borrowing_limit is not None else None,
            strategy=q.strategy, within_queue=q.preemption, reclaim_within_cohort=q.reclaim,
            local_queues=q.local_queues))
    if not queues:
        queues.append(ClusterQueue(name="default", quota={"gpu": float(slots), "cpu": cpus}))
    total = sum(q.quota["gpu"] for q in queues if q.quota)
    if total > slots:
        raise SpecError("[[local.queues]] gpus",
                        f"the queues' GPU quotas add up to {total:g} but this machine has {slots} slots",
                        f"lower the quotas in {s.path} (use a cohort to share idle slots), "
                        "or raise gpus = N under [local] there")
    explicit = sum(q.cpus for q in local.queues if q.cpus is not None)
    if explicit > cpus:
        raise SpecError("[[local.queues]] cpus",
                        f"the queues' CPU quotas add up to {explicit:g} but this machine has {cpus:g} CPUs",
                        f"lower the quotas in {s.path}, or raise cpus = N under [local] there "
                        "(or export GPUJOBS_LOCAL_CPUS=N)")
    cohorts = [Cohort(name) for name in sorted({q.cohort for q in queues if q.cohort})]
    return {"queues": queues, "cohorts": cohorts,
            "priorities": dict(s.priorities or DEFAULT_PRIORITIES),
            "default_priority": local.default_priority,
            "kueue_version": kueue_version_of(local.kueue_version, "[local] kueue_version")}
