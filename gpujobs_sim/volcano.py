"""The simulated Volcano PodGroup controller: a PodGroup (scheduling.volcano.sh/v1beta1, the CRD of
volcano-sh/volcano@ed72c7c in shared/crds/volcano/scheduling.volcano.sh_podgroups.yaml; status as in
shared/crds/examples/volcano/status/) for each job Volcano schedules, its phase and counts from the
job's pods (running vs minMember). The Volcano Job's own pods are listed in pod_templates.py, its
status in job_status.py.
"""
from __future__ import annotations

from typing import Any

from .conditions import _cond
from .pod_templates import _template_pods

PG_API = "scheduling.volcano.sh/v1beta1"


def _uses_volcano(job: dict) -> bool:
    if job["kind"] == "Job":
        return True
    if ((job.get("spec") or {}).get("runPolicy") or {}).get("schedulingPolicy"):
        return True
    return any(((t.get("spec") or {}).get("schedulerName") == "volcano") for _, t, _ in _template_pods(job))


def _podgroup(ctrl: Any, job: dict, size: int, pods: list[dict], name: str | None = None) -> None:
    if job["kind"] == "MPIJob" and name is None:
        return  # only the MPI Operator run with --gang-scheduling=volcano makes one (mpi_operator.py)
    if (name is None and not _uses_volcano(job)) or "podgroups" not in {r.plural for r in ctrl.store.resources()}:
        return
    md = job["metadata"]
    name = name or f"{md['name']}-{md['uid']}"
    store = ctrl.store
    if store.get(PG_API, "PodGroup", name, md["namespace"]) is None:
        min_member = int((job.get("spec") or {}).get("minAvailable") or size)
        store.create({"apiVersion": PG_API, "kind": "PodGroup", "metadata": {
            "name": name, "namespace": md["namespace"], "ownerReferences": [{
                "apiVersion": job["apiVersion"], "kind": job["kind"], "name": md["name"], "uid": md["uid"],
                "controller": True}]}, "spec": {"minMember": min_member,
                                               "queue": (job.get("spec") or {}).get("queue", "default")},
            "status": {"phase": "Pending"}})
    running = sum(p["status"].get("phase") == "Running" for p in pods)
    succeeded = sum(p["status"].get("phase") == "Succeeded" for p in pods)
    failed = sum(p["status"].get("phase") == "Failed" for p in pods)

    def upd(o: dict) -> None:
        mm = int(o["spec"].get("minMember", size))
        st = o.setdefault("status", {})
        phase = "Running" if running >= mm else ("Completed" if succeeded >= mm else
                                                  ("Inqueue" if pods else "Pending"))
        if running and running < mm:
            phase = "Unknown" if any(p["status"].get("phase") == "Pending" and p["status"].get("conditions")
                                     for p in pods) else "Inqueue"
        st.update(phase=phase, running=running, succeeded=succeeded, failed=failed)
        if phase == "Running":
            _cond(o, "Scheduled", "True", "tasks in gang are ready to be scheduled")
        elif pods and running < mm:
            _cond(o, "Unschedulable", "True", "NotEnoughResources",
                  f"{mm - running}/{mm} tasks in gang unschedulable: pod group is not ready, {mm} minAvailable")
    store.mutate(PG_API, "PodGroup", name, md["namespace"], upd)
