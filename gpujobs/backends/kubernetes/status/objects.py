"""Reading fields of Kubernetes objects as they come from the API (dicts): times, conditions,
pod readiness, owners. Shared by the status mapping, its hints and the forecast's translation."""
from __future__ import annotations

import datetime as _dt
from typing import Any

JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"


def parse_time(text: Any) -> float | None:
    if not text:
        return None
    if isinstance(text, _dt.datetime):
        return text.replace(tzinfo=text.tzinfo or _dt.timezone.utc).timestamp()
    try:
        return _dt.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def conditions(obj: dict | None) -> dict[str, dict]:
    """Conditions by type (the last one of each type wins). Tolerates ``status: [...]``."""
    if not obj:
        return {}
    st = obj.get("status")
    conds = st if isinstance(st, list) else (st or {}).get("conditions") or []
    return {c.get("type", ""): c for c in conds if isinstance(c, dict)}


def true_condition(conds: dict[str, dict], t: str) -> dict | None:
    c = conds.get(t)
    return c if c and str(c.get("status")) == "True" else None


def pod_ready(pod: dict) -> bool:
    st = pod.get("status") or {}
    if st.get("phase") == "Succeeded":
        return True
    if st.get("phase") != "Running":
        return False
    ready = conditions(pod).get("Ready")
    return ready is None or str(ready.get("status")) == "True"


def own_deadline_s(job: dict) -> int | None:
    """The job's own ``activeDeadlineSeconds`` (in its spec, or its ``runPolicy``'s: the Kubeflow
    v1 kinds), None without one."""
    spec = job.get("spec") or {}
    v = spec.get("activeDeadlineSeconds") or (spec.get("runPolicy") or {}).get("activeDeadlineSeconds")
    return int(v) if v and int(v) > 0 else None


def owner_uids(obj: dict) -> set[str]:
    md = obj.get("metadata") or {}
    uids = {o.get("uid") for o in md.get("ownerReferences") or [] if o.get("uid")}
    if (md.get("labels") or {}).get(JOB_UID_LABEL):
        uids.add(md["labels"][JOB_UID_LABEL])
    return uids
