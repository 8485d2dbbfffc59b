"""Status conditions and suspend fields, as the simulated controllers write them.

A condition keeps its ``lastTransitionTime`` while its status and reason stay the same
(k8s.io/apimachinery meta.SetStatusCondition); each kind's suspend field is where its operator
reads it (``runPolicy.suspend`` for MPIJob and PyTorchJob, ``spec.suspend`` otherwise; a Volcano
Job has none). Used by the simulated Kueue (kueue.py) and the operators.
"""
from __future__ import annotations

from . import rules
from .store import now_iso


def _cond(obj: dict, type_: str, status: str, reason: str, message: str = "") -> None:
    st = obj.setdefault("status", {})
    conds = [c for c in st.get("conditions") or [] if c.get("type") != type_]
    old = next((c for c in st.get("conditions") or [] if c.get("type") == type_), None)
    same = old and old.get("status") == status and old.get("reason") == reason
    conds.append({"type": type_, "status": status, "reason": reason, "message": message,
                  "lastTransitionTime": old["lastTransitionTime"] if same else now_iso()})
    st["conditions"] = conds


def _condition(obj: dict, type_: str) -> dict:
    """The object's condition of that type ({} when it has none)."""
    return rules.condition(obj, type_)


def _is_true(obj: dict, type_: str) -> bool:
    return _condition(obj, type_).get("status") == "True"


def get_suspend(job: dict) -> bool:
    spec = job.get("spec") or {}
    if job["kind"] in ("MPIJob", "PyTorchJob"):
        return bool((spec.get("runPolicy") or {}).get("suspend"))
    if job["kind"] == "Job" and not _batch(job):  # Volcano Job: no suspend field
        return False
    return bool(spec.get("suspend"))


def set_suspend(job: dict, value: bool) -> None:
    spec = job.setdefault("spec", {})
    if job["kind"] in ("MPIJob", "PyTorchJob"):
        spec.setdefault("runPolicy", {})["suspend"] = value
    elif job["kind"] != "Job" or _batch(job):
        spec["suspend"] = value


def _batch(job: dict) -> bool:
    """A batch/v1 Job (spec.suspend), not a Volcano Job (batch.volcano.sh, no suspend field)."""
    return str(job.get("apiVersion", "")).startswith("batch/")
