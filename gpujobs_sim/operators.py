"""Simulated job operators: ``operate`` reconciles one job of any kind (MPI Operator, Training
Operator, Trainer, KubeRay, Volcano Job controller, AppWrapper, the batch/v1 Job controller) and the Volcano PodGroup controller:
pods from the job's pod templates (pod_templates.py), then each kind's own status written from the
pods' phases (job_status.py). Each operator's own steps live in its module: mpi_operator.py,
trainer.py, kuberay.py, volcano.py, appwrapper.py.
"""
from __future__ import annotations

from typing import Any

from . import mpi_operator
from .appwrapper import _appwrapper
from .batch_job import is_batch_job
from .batch_job import operate as operate_batch_job
from .conditions import get_suspend
from .deadlines import enforce as enforce_deadline
from .job_status import _write_status
from .kuberay import _ray_invalid, _ray_submitter
from .kubelet import ANN_IDLE, ANN_PORT, ANN_RANK, ANN_ROLE, ANN_WORLD
from .pod_templates import OWNER, _template_pods
from .rules import outcome
from .trainer import _runtime_of
from .volcano import _podgroup


def operate(ctrl: Any, job: dict) -> None:
    store = ctrl.store
    md = job["metadata"]
    if md.get("deletionTimestamp"):
        return
    if job["kind"] == "AppWrapper":
        return _appwrapper(ctrl, job)
    if is_batch_job(job):  # a user's batch/v1 Job: the Job controller (batch_job.py)
        return operate_batch_job(ctrl, job)
    if job["kind"] == "RayJob" and _ray_invalid(ctrl, job):
        return
    pods = ctrl._pods_of(job)
    if outcome(job).finished:
        if job["kind"] == "MPIJob":  # workers run sshd -D, which never exits: the operator's policy decides
            return mpi_operator.clean_up(ctrl, job, pods)
        for p in pods:  # stop idle helpers (Ray workers: the RayCluster goes; Volcano's CompleteJob)
            if (p["metadata"].get("annotations") or {}).get(ANN_IDLE) == "true":
                store.patch("v1", "Pod", p["metadata"]["name"], md["namespace"],
                            {"metadata": {"annotations": {ANN_IDLE: "false"}}})
        return
    if get_suspend(job):
        if job["kind"] == "RayJob":  # suspending deletes the RayCluster and the submitter Job
            pods = pods + store.list("v1", "Pod", md["namespace"], f"{OWNER}={md['uid']}-submitter")
            store.delete("batch/v1", "Job", md["name"], md["namespace"])
        for p in pods:
            store.delete("v1", "Pod", p["metadata"]["name"], md["namespace"])
        if job["kind"] == "MPIJob":
            store.delete("batch/v1", "Job", f"{md['name']}-launcher", md["namespace"])
            mpi_operator.write_status(ctrl, job, [], suspended=True)
            return
        _write_status(ctrl, job, [], suspended=True)
        return
    if job["kind"] == "MPIJob":  # its own controller model (mpi_operator.py, from mpi-operator's source)
        spec = job.get("spec") or {}
        workers = int(((spec.get("mpiReplicaSpecs") or {}).get("Worker") or {}).get("replicas", 0))
        world = str(max(1, workers) * max(1, int(spec.get("slotsPerWorker") or 1)))
        port = (job["metadata"].get("annotations") or {}).get(ANN_PORT) or str(ctrl.next_port())

        def sim_ann(role: str) -> dict:
            return {ANN_ROLE: role, ANN_WORLD: world, ANN_PORT: port, **({ANN_IDLE: "true"} if role == "idle" else {})}
        pods = mpi_operator.reconcile(ctrl, job, pods, sim_ann)
        mpi_operator.launcher_deadline(ctrl, job)
        mpi_operator.write_status(ctrl, job, ctrl._pods_of(job), suspended=False)
        return
    wanted = _template_pods(job, lambda j: _runtime_of(ctrl, j))
    if not pods and wanted:
        _podgroup(ctrl, job, len(wanted), [])
        port = str(ctrl.next_port())
        ranks = [w for w in wanted if w[2] == "rank"]
        world = len(ranks)
        if job["kind"] == "RayJob":
            world = 1  # one driver
        if any(w[2] == "mpi-launcher" for w in wanted):
            world = max(1, len(wanted) - 1) * max(1, int((job.get("spec") or {}).get("slotsPerWorker", 1)))
        rank = 0
        for pname, tmpl, role in wanted:
            tmd = tmpl.get("metadata") or {}
            ann = dict(tmd.get("annotations") or {})
            ann.update({ANN_ROLE: role, ANN_WORLD: str(world), ANN_PORT: port})
            if role == "rank":
                ann[ANN_RANK] = str(rank)
                rank += 1
            if role == "idle":
                ann[ANN_IDLE] = "true"
            if job["kind"] == "Job":
                ann["scheduling.k8s.io/group-name"] = f"{md['name']}-{md['uid']}"
            labels = {**(tmd.get("labels") or {}), **{k: v for k, v in (md.get("labels") or {}).items()
                                                      if k.startswith("gpujobs.dev/")}, OWNER: md["uid"]}
            store.create({"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": pname, "namespace": md["namespace"], "labels": labels, "annotations": ann,
                "ownerReferences": [{"apiVersion": job["apiVersion"], "kind": job["kind"], "name": md["name"],
                                     "uid": md["uid"], "controller": True, "blockOwnerDeletion": True}]},
                "spec": tmpl.get("spec") or {"containers": [{"name": "main", "image": "sim"}]}})
        pods = ctrl._pods_of(job)
    _podgroup(ctrl, job, len(wanted), pods)
    if job["kind"] == "RayJob":
        pods = pods + _ray_submitter(ctrl, job, pods)
    _write_status(ctrl, job, pods)
    cur = store.get(job["apiVersion"], job["kind"], md["name"], md["namespace"])
    if cur is not None and not outcome(cur).finished:
        enforce_deadline(ctrl, cur, pods)  # the operator's own activeDeadlineSeconds (deadlines.py)
