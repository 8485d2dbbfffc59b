"""Each kind's status as its simulated operator writes it from the pods' phases: the Training
Operator's conditions (PyTorchJob; MPIJob's own in mpi_operator.py), the Trainer's TrainJob
conditions, KubeRay's RayJob jobStatus / jobDeploymentStatus / rayClusterStatus (read from the
submitter pod that followed the driver, kuberay.py) and the Volcano Job's state and counts.
"""
from __future__ import annotations

from typing import Any

from .conditions import _cond
from .kubelet import ANN_RAY_JOB_STATUS, ANN_ROLE, RAY_SUBMITTER
from .kuberay import submitter_backoff_limit
from .store import now_iso
from .trainer import _runtime_of, job_failed, trainjob_backoff_limit


def _write_status(ctrl: Any, job: dict, pods: list[dict], suspended: bool = False) -> None:
    md, kind = job["metadata"], job["kind"]
    phases = [p["status"].get("phase") for p in pods]
    ann = lambda p: p["metadata"].get("annotations") or {}  # noqa: E731
    main = [p for p in pods if ann(p).get(ANN_ROLE) in ("rank", "mpi-launcher")]
    head_ok = bool(main) and all(p["status"].get("phase") == "Succeeded" for p in main)
    failed = any(ph == "Failed" for ph in phases)
    all_running = bool(pods) and all(ph in ("Running", "Succeeded") for ph in phases)
    now = now_iso()
    node_job_failed = False
    if kind == "TrainJob" and not suspended:
        node_job_failed = job_failed(pods, trainjob_backoff_limit(_runtime_of(ctrl, job)))
        if node_job_failed:  # the Job controller terminates the failed Job's active pods
            for p in pods:
                if p["status"].get("phase") in ("Running", "Pending"):
                    ctrl.store.delete("v1", "Pod", p["metadata"]["name"], md["namespace"])

    def upd(o: dict) -> None:
        st = o.setdefault("status", {})
        if kind in ("MPIJob", "PyTorchJob"):
            if suspended:
                if any(c.get("type") == "Created" for c in st.get("conditions") or []):
                    _cond(o, "Suspended", "True", f"{kind}Suspended", f"{kind} {md['name']} is suspended.")
                    _cond(o, "Running", "False", f"{kind}Suspended", "")
                st.pop("startTime", None)  # set again on resume (training-operator@v1.9.0 common/job.go)
                return
            _cond(o, "Suspended", "False", f"{kind}Resumed", "") if any(
                c.get("type") == "Suspended" for c in st.get("conditions") or []) else None
            if pods:
                _cond(o, "Created", "True", f"{kind}Created", f"{kind} {md['namespace']}/{md['name']} is created.")
                st.setdefault("startTime", now)
            if failed:
                _cond(o, "Running", "False", f"{kind}Failed", "")
                _cond(o, "Failed", "True", f"{kind}Failed", f"{kind} {md['name']} has failed because a pod failed")
                st["completionTime"] = now
            elif head_ok:
                _cond(o, "Running", "False", f"{kind}Succeeded", "")
                _cond(o, "Succeeded", "True", f"{kind}Succeeded", f"{kind} {md['name']} successfully completed.")
                st["completionTime"] = now
            elif all_running:
                _cond(o, "Running", "True", f"{kind}Running", f"{kind} {md['name']} is running.")
        elif kind == "TrainJob":
            # setSuspendedCondition (trainer@v2.3.0 pkg/controller/trainjob_controller.go; messages
            # from pkg/constants/constants.go): the resume's time starts the deadline (deadlines.py)
            if suspended:
                _cond(o, "Suspended", "True", "Suspended", "TrainJob is suspended")
                return
            if any(c.get("type") == "Suspended" and c.get("status") == "True" for c in st.get("conditions") or []):
                _cond(o, "Suspended", "False", "Resumed", "TrainJob is resumed")
            if node_job_failed:  # the node Job failed, so the JobSet (failurePolicy maxRestarts 0)
                _cond(o, "Failed", "True", "TrainJobFailed", "jobset failed: node job BackoffLimitExceeded")
            elif head_ok:
                _cond(o, "Complete", "True", "JobsCompleted", "TrainJob is completed")
        elif kind == "RayJob":
            if suspended:
                if st.get("jobDeploymentStatus"):
                    st["jobDeploymentStatus"] = "Suspended"
                st.pop("startTime", None)  # initRayJobStatusIfNeed sets it again after a resume
                return
            sub = [p for p in pods if ann(p).get(ANN_ROLE) == RAY_SUBMITTER]
            cluster = [p for p in pods if p not in sub]
            cphases = [p["status"].get("phase") for p in cluster]
            up = bool(cluster) and all(ph in ("Running", "Succeeded") for ph in cphases)
            # the Ray job's status is the driver's (the dashboard's job status: the kubelet marks the
            # submitter pod when the driver ends); jobDeploymentStatus turns Complete / Failed only
            # once the submitter has also finished (kuberay@v1.7.0 rayjob_controller.go:
            # isJobTerminal = IsJobTerminal(jobStatus) && finishedAt != nil in K8sJobMode; #1919)
            driver = next((ann(p).get(ANN_RAY_JOB_STATUS) for p in sub if ann(p).get(ANN_RAY_JOB_STATUS)), None)
            # the submitter Job: succeeded with a pod that succeeded, failed once more pods failed
            # than its backoffLimit (the Job controller replaces the others, kuberay.py)
            done_ok = any(p["status"].get("phase") == "Succeeded" for p in sub)
            sub_failed = sum(p["status"].get("phase") == "Failed" for p in sub) > submitter_backoff_limit(job)
            broke = (sub_failed and not done_ok) or any(ph == "Failed" for ph in cphases)
            ready = sum(ph == "Running" for ph in cphases)
            workers = len(cluster) - 1
            rcs = {"desiredWorkerReplicas": max(workers, 0), "readyWorkerReplicas": max(ready - 1, 0),
                   "conditions": [{"type": "HeadPodReady", "status": "True" if ready else "False"},
                                  {"type": "RayClusterProvisioned", "status": "True" if up else "False"}]}
            if up:
                rcs["state"] = "ready"
            st["rayClusterStatus"] = rcs
            st.setdefault("startTime", now)
            st["rayClusterName"] = f"{md['name']}-raycluster"
            if sub_failed and not done_ok and driver == "SUCCEEDED":
                # the submitter Job failed (BackoffLimitExceeded) though the Ray job did not:
                # checkSubmitterAndUpdateStatusIfNeeded (kuberay@v1.7.0 rayjob_controller.go) makes
                # the RayJob Failed, reason SubmissionFailed, unless jobStatus is FAILED (AppFailed)
                st.update(jobStatus=driver, jobDeploymentStatus="Failed", reason="SubmissionFailed", endTime=now,
                          message="Job submission has failed. Reason: BackoffLimitExceeded. Message: Job has "
                                  "reached the specified backoff limit")
            elif broke:
                st.update(jobStatus="FAILED", jobDeploymentStatus="Failed", reason="AppFailed",
                          message="the Ray job failed", endTime=now)
            elif done_ok:
                st.update(jobStatus="SUCCEEDED", jobDeploymentStatus="Complete", endTime=now,
                          message="Job finished successfully.")
            elif up and driver:  # the Ray job ended; the submitter is still following its log
                st.update(jobStatus=driver, jobDeploymentStatus="Running")
            elif up:
                st.update(jobStatus="RUNNING", jobDeploymentStatus="Running")
            else:
                st.update(jobStatus="PENDING", jobDeploymentStatus="Initializing")
        elif kind == "Job":
            running = sum(ph == "Running" for ph in phases)
            st.update(minAvailable=int((o.get("spec") or {}).get("minAvailable") or len(pods)), running=running,
                      succeeded=sum(ph == "Succeeded" for ph in phases), failed=sum(ph == "Failed" for ph in phases),
                      pending=sum(ph == "Pending" for ph in phases))
            phase = "Failed" if failed else ("Completed" if head_ok else
                                            ("Running" if running >= st["minAvailable"] else "Pending"))
            if (st.get("state") or {}).get("phase") != phase:
                st["state"] = {"phase": phase, "lastTransitionTime": now}
    ctrl.store.mutate(job["apiVersion"], kind, md["name"], md["namespace"], upd)
