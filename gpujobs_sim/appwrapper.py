"""The simulated AppWrapper controller (workload.codeflare.dev AppWrapper), after appwrapper@v1.1.2
internal/controller/appwrapper/appwrapper_controller.go: the wrapped components created once the
AppWrapper is unsuspended, their outcome mirrored in its phase, failures reset up to the retry
limit (resetOrFail), the annotations from api/v1beta2/appwrapper_types.go.
"""
from __future__ import annotations

import time
from typing import Any

from .rules import outcome


def _appwrapper(ctrl: Any, aw: dict) -> None:
    """AppWrapper: create the wrapped components once unsuspended; mirror their outcome."""
    store, md = ctrl.store, aw["metadata"]
    comps = []
    for c in (aw.get("spec") or {}).get("components") or []:
        t = dict(c.get("template") or {})
        t.setdefault("metadata", {})
        comps.append(t)
    if aw.get("spec", {}).get("suspend"):
        for t in comps:
            store.delete(t["apiVersion"], t["kind"], t["metadata"]["name"], md["namespace"])
        store.mutate(aw["apiVersion"], "AppWrapper", md["name"], md["namespace"],
                     lambda o: o.setdefault("status", {}).update(phase="Suspended"))
        return
    st = aw.get("status") or {}
    ann = md.get("annotations") or {}
    if st.get("phase") == "Failed":  # deletionOnFailureGracePeriodDuration, then the components go
        if time.time() >= float(st.get("simFailedAt") or 0) + _duration(ann.get(AW_DELETION_DELAY, "0s")):
            for t in comps:
                store.delete(t["apiVersion"], t["kind"], t["metadata"]["name"], md["namespace"])
        return
    phases = []
    for t in comps:
        cur = store.get(t["apiVersion"], t["kind"], t["metadata"]["name"], md["namespace"])
        if cur is None:
            t["metadata"] = {**t["metadata"], "namespace": md["namespace"], "ownerReferences": [{
                "apiVersion": aw["apiVersion"], "kind": "AppWrapper", "name": md["name"], "uid": md["uid"],
                "controller": True}]}
            t["metadata"].setdefault("labels", {}).update(
                {k: v for k, v in (md.get("labels") or {}).items() if k.startswith("gpujobs.dev/")})
            cur = store.create(t)
        phases.append(outcome(cur))
    if any(o.finished and not o.succeeded for o in phases):
        # appwrapper@v1.1.2 internal/controller/appwrapper/appwrapper_controller.go resetOrFail: while
        # status.retries < retryLimit (annotation workload.codeflare.dev.appwrapper/retryLimit, else
        # the controller's FaultTolerance.RetryLimit, 3) it resets: deletes the components and creates
        # them again (the user's code runs again); then Failed, which deletes the components at once
        # unless deletionOnFailureGracePeriodDuration holds them
        retries = int(st.get("retries") or 0)
        limit = int(ann.get(AW_RETRY_LIMIT, AW_DEFAULT_RETRY_LIMIT))
        for t in comps:
            if retries < limit or _duration(ann.get(AW_DELETION_DELAY, "0s")) <= 0:
                store.delete(t["apiVersion"], t["kind"], t["metadata"]["name"], md["namespace"])
        if retries < limit:
            store.mutate(aw["apiVersion"], "AppWrapper", md["name"], md["namespace"],
                         lambda o: o.setdefault("status", {}).update(phase="Resetting", retries=retries + 1))
        else:
            store.mutate(aw["apiVersion"], "AppWrapper", md["name"], md["namespace"],
                         lambda o: o.setdefault("status", {}).update(phase="Failed", simFailedAt=str(time.time())))
        return
    phase = "Succeeded" if phases and all(o.succeeded for o in phases) else "Running"
    store.mutate(aw["apiVersion"], "AppWrapper", md["name"], md["namespace"],
                 lambda o: o.setdefault("status", {}).update(phase=phase))


# appwrapper@v1.1.2 api/v1beta2/appwrapper_types.go annotations
AW_RETRY_LIMIT = "workload.codeflare.dev.appwrapper/retryLimit"
AW_DELETION_DELAY = "workload.codeflare.dev.appwrapper/deletionOnFailureGracePeriodDuration"
AW_DEFAULT_RETRY_LIMIT = 3  # pkg/config FaultTolerance.RetryLimit default


def _duration(text: str) -> float:
    """A Go duration as the annotations use them ("30s", "5m", "1h"; sums like "1m30s")."""
    import re as _re
    total = 0.0
    for n, unit in _re.findall(r"([0-9.]+)(h|ms|m|s)", text or ""):
        total += float(n) * {"h": 3600, "m": 60, "s": 1, "ms": 0.001}[unit]
    return total
