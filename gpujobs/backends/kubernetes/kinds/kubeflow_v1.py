"""What the Kubeflow Training Operator v1 and MPI Operator v2 kinds share: conditions and runPolicy."""
from __future__ import annotations

from ..status.objects import conditions, parse_time, true_condition
from .base import KindState, annotated_gang


def operator_state(job: dict, declared: int) -> KindState:
    """The state of a job whose operator sets Succeeded / Failed / Suspended / Running / Created /
    Restarting conditions (kubeflow/common JobConditionType); ``declared``: its replicas."""
    st, spec = job.get("status") or {}, job.get("spec") or {}
    if not isinstance(st, dict):
        st = {}
    conds = conditions(job)
    start, end = parse_time(st.get("startTime")), parse_time(st.get("completionTime"))
    suspended = (spec.get("runPolicy") or {}).get("suspend") or spec.get("suspend")
    for t, ph in (("Succeeded", "succeeded"), ("Failed", "failed")):
        c = true_condition(conds, t)
        if c:
            return KindState(ph, c.get("reason", t), c.get("message", ""), started_at=start,
                             finished_at=end or parse_time(c.get("lastTransitionTime")))
    if true_condition(conds, "Suspended") or suspended:
        return KindState("suspended", "Suspended")
    restarts = 1 if true_condition(conds, "Restarting") else 0
    if true_condition(conds, "Running"):
        gang = annotated_gang(job)
        return KindState("running", "Running", ready=declared if gang is None else gang, started_at=start,
                         restarts=restarts)
    if true_condition(conds, "Created") or true_condition(conds, "Restarting"):
        return KindState("starting", "Created", started_at=start, restarts=restarts)
    return KindState(None)
