"""Each operator's own ``activeDeadlineSeconds``, as upstream enforces it: where the field is,
from when it counts, what the job's status says once it is past, and which pods go.

One row per kind (:data:`DEADLINES`), each from its operator's source:

- TrainJob (trainer@v2.3.0 pkg/controller/trainjob_controller.go reconcileDeadline): ``spec.
  activeDeadlineSeconds`` from the Suspended=False condition's lastTransitionTime (the resume), else
  the TrainJob's creationTimestamp; past it: condition Failed, reason ``DeadlineExceeded``, message
  "TrainJob exceeded its active deadline" (pkg/constants/constants.go), and the JobSet is deleted:
  its Jobs' pods go with it.
- PyTorchJob (training-operator@v1.9.0 pkg/controller.v1/common/job.go ReconcileJobs,
  pkg/core/job.go PastActiveDeadline): ``runPolicy.activeDeadlineSeconds`` from ``status.startTime``
  (set on the first status update, reset on resume); past it DeletePodsAndServices runs before the
  Failed condition is set, so cleanPodPolicy is ignored and every pod goes; condition Failed, reason
  ``PyTorchJobFailed``, message "Job <name> has failed because it was active longer than specified
  deadline".
- MPIJob (mpi-operator@v0.8.0 pkg/controller/mpi_job_controller.go newLauncherJob): the field is
  copied to the launcher batch/v1 Job, whose controller (kubernetes pkg/controller/job/
  job_controller.go pastActiveDeadline) counts from the Job's ``status.startTime``, fails it with
  reason ``DeadlineExceeded`` ("Job was active longer than specified deadline") and deletes its
  active pods; updateMPIJobFailedStatus copies that reason to the MPIJob's Failed condition, and
  cleanPodPolicy Running then deletes the running workers (mpi_operator.py).
- RayJob (kuberay@v1.7.0 ray-operator/controllers/ray/rayjob_controller.go
  checkActiveDeadlineAndUpdateStatusIfNeeded): ``spec.activeDeadlineSeconds`` from
  ``status.startTime`` (set by initRayJobStatusIfNeed, again after a resume); past it:
  jobDeploymentStatus Failed, reason ``DeadlineExceeded``; handleShutdownAfterJobFinishes deletes
  the RayCluster after ttlSecondsAfterFinished but keeps the submitter Job "so that users can still
  access the driver logs": its pod stays, its `ray job logs --follow` ends with the cluster.

A Volcano Job and an AppWrapper have no such field. Kueue's own timer (max-exec-time) is in kueue.py.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from .conditions import _cond, _condition
from .rules import parse_time
from .store import now_iso


@dataclass(frozen=True)
class DeadlineRule:
    field: tuple[str, ...]  # path of activeDeadlineSeconds in the job
    start: Callable[[dict], float | None]  # when the count starts (None: not started)
    source: str


def _trainjob_start(job: dict) -> float | None:
    resumed = _condition(job, "Suspended")
    if resumed.get("status") == "False":
        return parse_time(resumed.get("lastTransitionTime"))
    return parse_time(job["metadata"].get("creationTimestamp"))


def _status_start(job: dict) -> float | None:
    return parse_time((job.get("status") or {}).get("startTime"))


DEADLINES: dict[str, DeadlineRule] = {
    "TrainJob": DeadlineRule(("spec", "activeDeadlineSeconds"), _trainjob_start,
                             "trainer@v2.3.0 pkg/controller/trainjob_controller.go reconcileDeadline"),
    "PyTorchJob": DeadlineRule(("spec", "runPolicy", "activeDeadlineSeconds"), _status_start,
                               "training-operator@v1.9.0 pkg/controller.v1/common/job.go ReconcileJobs"),
    "RayJob": DeadlineRule(("spec", "activeDeadlineSeconds"), _status_start,
                           "kuberay@v1.7.0 rayjob_controller.go checkActiveDeadlineAndUpdateStatusIfNeeded"),
}
# MPIJob: its launcher batch/v1 Job carries the deadline (mpi_operator.py, launcher_deadline_at)


def deadline_s(job: dict) -> int | None:
    rule = DEADLINES.get(job["kind"])
    if rule is None:
        return None
    v: Any = job
    for k in rule.field:
        v = (v or {}).get(k) if isinstance(v, dict) else None
    return int(v) if v else None  # TrainJob: 0 (omitempty) means none


def deadline_at(job: dict) -> float | None:
    """When the job's own deadline passes (None: no deadline, or its count has not started)."""
    limit = deadline_s(job)
    if limit is None:
        return None
    start = DEADLINES[job["kind"]].start(job)
    return None if start is None else start + limit


def enforce(ctrl: Any, job: dict, pods: list[dict]) -> bool:
    """Past its deadline: write the kind's failure and delete what its operator deletes (True);
    otherwise wake the controllers when it will be (False)."""
    at = deadline_at(job)
    if at is None:
        return False
    md = job["metadata"]
    if time.time() < at:
        ctrl.changes.at("deadline", "|".join((job["apiVersion"], job["kind"], md["namespace"], md["name"])), at)
        return False
    kind, store, ns = job["kind"], ctrl.store, md["namespace"]
    if kind == "TrainJob":
        def upd(o: dict) -> None:
            _cond(o, "Failed", "True", "DeadlineExceeded", "TrainJob exceeded its active deadline")
        doomed = pods  # the JobSet is deleted: its pods go by garbage collection
    elif kind == "PyTorchJob":
        def upd(o: dict) -> None:
            o.setdefault("status", {}).setdefault("completionTime", now_iso())
            _cond(o, "Running", "False", "PyTorchJobFailed", "")
            _cond(o, "Failed", "True", "PyTorchJobFailed",
                  f"Job {md['name']} has failed because it was active longer than specified deadline")
        doomed = pods  # DeletePodsAndServices before the Failed condition: cleanPodPolicy ignored
    else:  # RayJob
        start = (job.get("status") or {}).get("startTime")

        def upd(o: dict) -> None:
            o.setdefault("status", {}).update(
                jobDeploymentStatus="Failed", reason="DeadlineExceeded", endTime=now_iso(),
                message=f"The RayJob has passed the activeDeadlineSeconds. StartTime: {start}. "
                        f"ActiveDeadlineSeconds: {deadline_s(job)}")
        # the RayCluster goes (ttlSecondsAfterFinished); the submitter Job and its pod stay
        doomed = [p for p in pods if not (p["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name")]
        for p in pods:
            if p not in doomed:  # its `ray job logs --follow` loses the head
                ctrl.kubelet.stop_container(ns, p["metadata"]["name"])
    store.mutate(job["apiVersion"], kind, md["name"], ns, upd)
    for p in doomed:
        store.delete("v1", "Pod", p["metadata"]["name"], ns)
    return True
