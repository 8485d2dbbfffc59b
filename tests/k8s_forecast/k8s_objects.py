"""A simulated cluster whose queues and other teams' Workloads are set up before it starts.

Other teams' jobs are what the cluster shows of them: a batch/v1 Job (which nothing runs)
owning a Kueue Workload (kueue.x-k8s.io/v1beta2) with its podSets, priority, admission and
conditions, as Kueue writes them (kueue@ff69552 apis/kueue/v1beta2/workload_types.go; docs/kubernetes-kinds.md). The simulated Kueue
restores them when it starts, as a restarted Kueue does, and admits or preempts around them.
"""
from __future__ import annotations

import datetime as dt
import time
from typing import Any

from gpujobs_sim import SimCluster

WL_API = "kueue.x-k8s.io/v1beta2"
PRIORITIES = {"low": 100, "high": 1000}


def iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def queue(sim: SimCluster, lq: str, cq: str, gpus: float, namespace: str = "default", *,
          cohort: str | None = None, strategy: str | None = None, preemption: str = "LowerPriority") -> None:
    """A LocalQueue ``namespace/lq`` on ClusterQueue ``cq`` (created when new, with ``gpus``)."""
    new = sim.store.get(WL_API, "ClusterQueue", cq) is None
    sim.add_queue(lq, namespace, gpus=gpus, cluster_queue=cq, preemption=preemption, cohort=cohort)
    if new and strategy:
        sim.store.mutate(WL_API, "ClusterQueue", cq, None,
                         lambda o: o["spec"].__setitem__("queueingStrategy", strategy))


def theirs(sim: SimCluster, namespace: str, name: str, lq: str, gpus: float, *, cq: str | None = None,
           admitted_at: float | None = None, max_s: int | None = None, priority: str | None = None,
           evicted_at: float | None = None, grace: int = 30, pod: bool = False) -> dict:
    """Another team's job: a batch/v1 Job and its Workload in ``namespace``; admitted to ``cq``
    at ``admitted_at`` (else pending); ``pod``: a Running pod of it exists (nothing runs it, so it
    only goes when the test deletes it: a preempted Workload keeps its quota until then)."""
    job = sim.store.create({"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": name, "namespace": namespace}, "spec": {"suspend": admitted_at is None, "template": {
            "spec": {"containers": [{"name": "c", "image": "busybox"}], "restartPolicy": "Never"}}}})
    uid = job["metadata"]["uid"]
    spec: dict[str, Any] = {"queueName": lq, "active": True, "podSets": [{"name": "main", "count": 1, "template": {
        "spec": {"terminationGracePeriodSeconds": grace, "containers": [{
            "name": "c", "image": "busybox", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]}}}],
        "priority": PRIORITIES.get(priority or "", 0)}
    if priority:
        spec["priorityClassRef"] = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": priority}
    if max_s:
        spec["maximumExecutionTimeSeconds"] = max_s
    conds = []
    status: dict[str, Any] = {"conditions": conds}
    if admitted_at is not None:
        at = iso(admitted_at)
        status["admission"] = {"clusterQueue": cq, "podSetAssignments": [
            {"name": "main", "count": 1, "flavors": {"nvidia.com/gpu": "default-flavor"}}]}
        conds += [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                   "message": f"Quota reserved in ClusterQueue {cq}", "lastTransitionTime": at},
                  {"type": "Admitted", "status": "True", "reason": "Admitted",
                   "message": "The workload is admitted", "lastTransitionTime": at}]
    else:
        conds.append({"type": "QuotaReserved", "status": "False", "reason": "WaitingForQuota",
                      "message": "couldn't assign flavors to pod sets: insufficient unused quota",
                      "lastTransitionTime": iso(time.time())})
    wl = sim.store.create({"apiVersion": WL_API, "kind": "Workload", "metadata": {
        "name": f"job-{name}-{uid[:5]}", "namespace": namespace, "labels": {"kueue.x-k8s.io/job-uid": uid},
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid,
                             "controller": True, "blockOwnerDeletion": True}]},
        "spec": spec, "status": status})
    if pod:
        sim.store.create({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": f"{name}-0", "namespace": namespace,
            "labels": {"sim.gpujobs.dev/owner-uid": uid, "batch.kubernetes.io/job-name": name}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            "status": {"phase": "Running"}})
    return wl
