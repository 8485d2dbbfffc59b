"""The simulated MPI Operator (v2beta1 MPIJob), after mpi-operator@v0.8.0
pkg/controller/mpi_job_controller.go (syncHandler, getOrCreateWorker, newWorker,
newLauncherJob / newLauncherPodTemplate, setupSSHOnPod, newConfigMap, updateMPIJobStatus).

What it does, each from that file:

- a ConfigMap ``<job>-config`` whose ``hostfile`` has one line per worker,
  ``<job>-worker-<i>.<job>.<ns>.svc slots=<slotsPerWorker>`` (newConfigMap; Open MPI syntax),
  and a Secret ``<job>-ssh`` (id_rsa, id_rsa.pub, authorized_keys) mounted at
  ``sshAuthMountPath`` in every pod, mode 0600 only when that path is /root/.ssh (setupSSHOnPod);
- the worker pods ``<job>-worker-<i>`` (hostname = pod name, subdomain = job name; labels
  training.kubeflow.org/operator-name, job-name, job-role=worker, replica-index; env
  ``K_MPI_JOB_ROLE=worker``; command ``/usr/sbin/sshd -De`` only when the template has none),
  created while the MPIJob is not suspended and never recreated once failed;
- the launcher batch Job ``<job>-launcher`` (its pod ``<job>-launcher-<5 chars>``), created at once
  with ``launcherCreationPolicy: AtStartup`` (the default) and, with ``WaitForWorkersReady``, only
  once every worker pod has the condition Ready=True (countReadyWorkerPods); its first container
  gets, after its own env, ``K_MPI_JOB_ROLE=launcher``, ``OMPI_MCA_orte_keep_fqdn_hostnames=true``,
  ``OMPI_MCA_orte_default_hostfile=/etc/mpi/hostfile``, ``OMPI_MCA_plm_rsh_args=-o
  ConnectionAttempts=10``, ``OMPI_MCA_orte_set_default_slots=<slotsPerWorker>`` (later entries of a
  name win in a container's env) and the ConfigMap mounted at /etc/mpi;
- once finished, the workers are deleted only for ``cleanPodPolicy`` All / Running (clean_up);
- status (updateMPIJobStatus): Created when first seen; Succeeded / Failed only from the
  launcher Job (a failed worker pod fails nothing: it is only counted, unless Evicted);
  Running once the launcher pod runs and every worker pod is Running;
- gang scheduling only with the operator flag ``--gang-scheduling=volcano`` (options.go; the
  release manifest deploy/v2beta1/mpi-operator.yaml passes none): then a PodGroup named after the
  job, pods with ``schedulerName: volcano`` and the annotation ``scheduling.k8s.io/group-name``
  (podgroup.go VolcanoCtrl newPodGroup / decoratePodTemplateSpec).
"""
from __future__ import annotations

import base64
import copy
import secrets
from typing import Any

from .conditions import _cond, _is_true
from .pod_templates import OWNER
from .store import now_iso
from .volcano import _podgroup

ROLE_LABEL, JOB_LABEL, INDEX_LABEL = ("training.kubeflow.org/job-role", "training.kubeflow.org/job-name",
                                      "training.kubeflow.org/replica-index")
OPERATOR_LABEL = "training.kubeflow.org/operator-name"
HOSTFILE_MOUNT = "/etc/mpi"


def hostfile(job: dict) -> str:
    md, spec = job["metadata"], job.get("spec") or {}
    workers = int(((spec.get("mpiReplicaSpecs") or {}).get("Worker") or {}).get("replicas", 0))
    slots = int(spec.get("slotsPerWorker") or 1)
    return "".join(f"{md['name']}-worker-{i}.{md['name']}.{md['namespace']}.svc slots={slots}\n"
                   for i in range(workers))


def _labels(job: dict, role: str, tmpl: dict) -> dict:
    return {**((tmpl.get("metadata") or {}).get("labels") or {}), OPERATOR_LABEL: "mpi-operator",
            JOB_LABEL: job["metadata"]["name"], ROLE_LABEL: role}


def _ssh(job: dict, spec: dict) -> None:
    path = (job.get("spec") or {}).get("sshAuthMountPath") or "/root/.ssh"
    vol: dict[str, Any] = {"name": "ssh-auth", "secret": {"secretName": f"{job['metadata']['name']}-ssh", "items": [
        {"key": "ssh-privatekey", "path": "id_rsa"}, {"key": "ssh-publickey", "path": "id_rsa.pub"},
        {"key": "ssh-publickey", "path": "authorized_keys"}]}}
    if path == "/root/.ssh":
        vol["secret"]["defaultMode"] = 0o600
    spec.setdefault("volumes", []).append(vol)
    spec["containers"][0].setdefault("volumeMounts", []).append({"name": "ssh-auth", "mountPath": path})


def _gang(ctrl: Any, job: dict, tmpl: dict) -> None:
    if getattr(ctrl, "mpi_gang_scheduling", "") == "volcano":
        tmpl["spec"]["schedulerName"] = "volcano"
        tmpl.setdefault("metadata", {}).setdefault("annotations", {})[
            "scheduling.k8s.io/group-name"] = job["metadata"]["name"]


def _owned(job: dict) -> list[dict]:
    md = job["metadata"]
    return [{"apiVersion": job["apiVersion"], "kind": job["kind"], "name": md["name"], "uid": md["uid"],
             "controller": True, "blockOwnerDeletion": True}]


def _supporting_objects(ctrl: Any, job: dict) -> None:
    store, md = ctrl.store, job["metadata"]
    ns = md["namespace"]
    if store.get("v1", "ConfigMap", f"{md['name']}-config", ns) is None:
        store.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": f"{md['name']}-config", "namespace": ns, "labels": {"app": md["name"]},
            "ownerReferences": _owned(job)}, "data": {"hostfile": hostfile(job)}})
    if store.get("v1", "Secret", f"{md['name']}-ssh", ns) is None:
        fake = base64.b64encode(b"sim-ssh-key-" + secrets.token_hex(8).encode()).decode()
        store.create({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/ssh-auth", "metadata": {
            "name": f"{md['name']}-ssh", "namespace": ns, "labels": {"app": md["name"]},
            "ownerReferences": _owned(job)}, "data": {"ssh-privatekey": fake, "ssh-publickey": fake}})
    if getattr(ctrl, "mpi_gang_scheduling", "") == "volcano":
        _podgroup(ctrl, job, _min_member(job), ctrl._pods_of(job), name=md["name"])


def _min_member(job: dict) -> int:
    spec = job.get("spec") or {}
    sp = (spec.get("runPolicy") or {}).get("schedulingPolicy") or {}
    if sp.get("minAvailable"):
        return int(sp["minAvailable"])
    return int(((spec.get("mpiReplicaSpecs") or {}).get("Worker") or {}).get("replicas", 0)) + 1


def _create_pod(ctrl: Any, job: dict, name: str, tmpl: dict, ann: dict, owner: list[dict]) -> None:
    md = job["metadata"]
    labels = {**((tmpl.get("metadata") or {}).get("labels") or {}),
              **{k: v for k, v in (md.get("labels") or {}).items() if k.startswith("gpujobs.dev/")},
              OWNER: md["uid"]}
    ctrl.store.create({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": md["namespace"], "labels": labels,
        "annotations": {**((tmpl.get("metadata") or {}).get("annotations") or {}), **ann},
        "ownerReferences": owner}, "spec": tmpl["spec"]})


def reconcile(ctrl: Any, job: dict, pods: list[dict], sim_annotations: Any) -> list[dict]:
    """Create what mpi-operator would by now; the MPIJob's pods afterwards.
    ``sim_annotations(role)`` gives the simulator's own pod annotations for a role."""
    md, spec = job["metadata"], job.get("spec") or {}
    ns = md["namespace"]
    reps = spec.get("mpiReplicaSpecs") or {}
    _supporting_objects(ctrl, job)
    by_name = {p["metadata"]["name"]: p for p in pods}
    workers = []
    wspec = reps.get("Worker") or {}
    for i in range(int(wspec.get("replicas", 0))):
        name = f"{md['name']}-worker-{i}"
        pod = by_name.get(name)
        if pod is None:
            tmpl = copy.deepcopy(wspec.get("template") or {})
            tmpl.setdefault("metadata", {})["labels"] = {**_labels(job, "worker", tmpl), INDEX_LABEL: str(i)}
            ps = tmpl.setdefault("spec", {})
            ps.setdefault("containers", [{"name": "worker", "image": "sim"}])
            ps.update(hostname=name, subdomain=md["name"], restartPolicy=wspec.get("restartPolicy") or "Never")
            c0 = ps["containers"][0]
            if not c0.get("command") and not c0.get("args"):
                c0["command"] = ["/usr/sbin/sshd", "-De"]
            c0["env"] = [*(c0.get("env") or []), {"name": "K_MPI_JOB_ROLE", "value": "worker"}]
            _ssh(job, ps)
            _gang(ctrl, job, tmpl)
            _create_pod(ctrl, job, name, tmpl, sim_annotations("idle"), _owned(job))
            pod = ctrl.store.get("v1", "Pod", name, ns)
        workers.append(pod)
    launcher = [p for p in pods if (p["metadata"].get("labels") or {}).get(ROLE_LABEL) == "launcher"]
    ready = sum(_is_true(p, "Ready") for p in workers if p is not None)
    policy = spec.get("launcherCreationPolicy") or "AtStartup"
    if not launcher and (policy == "AtStartup" or ready == len(workers)):
        _create_launcher(ctrl, job, sim_annotations("mpi-launcher"))
    return ctrl._pods_of(job)


def _create_launcher(ctrl: Any, job: dict, ann: dict) -> None:
    md, spec = job["metadata"], job.get("spec") or {}
    ns = md["namespace"]
    lspec = (spec.get("mpiReplicaSpecs") or {}).get("Launcher") or {}
    tmpl = copy.deepcopy(lspec.get("template") or {})
    tmpl.setdefault("metadata", {})["labels"] = _labels(job, "launcher", tmpl)
    ps = tmpl.setdefault("spec", {})
    ps.setdefault("containers", [{"name": "launcher", "image": "sim"}])
    ps.update(hostname=f"{md['name']}-launcher", subdomain=md["name"],
              restartPolicy=lspec.get("restartPolicy") or "Never")
    c0 = ps["containers"][0]
    slots = str(int(spec.get("slotsPerWorker") or 1))
    c0["env"] = [*(c0.get("env") or []), {"name": "K_MPI_JOB_ROLE", "value": "launcher"},
                 {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
                 {"name": "OMPI_MCA_orte_default_hostfile", "value": f"{HOSTFILE_MOUNT}/hostfile"},
                 {"name": "OMPI_MCA_plm_rsh_args", "value": "-o ConnectionAttempts=10"},
                 {"name": "OMPI_MCA_orte_set_default_slots", "value": slots}]
    _ssh(job, ps)
    ps.setdefault("volumes", []).append({"name": "mpi-job-config", "configMap": {
        "name": f"{md['name']}-config", "items": [{"key": "hostfile", "path": "hostfile", "mode": 0o444}]}})
    c0.setdefault("volumeMounts", []).append({"name": "mpi-job-config", "mountPath": HOSTFILE_MOUNT})
    _gang(ctrl, job, tmpl)
    bjob = ctrl.store.get("batch/v1", "Job", f"{md['name']}-launcher", ns)
    if bjob is None:
        bjob = ctrl.store.create({"apiVersion": "batch/v1", "kind": "Job", "metadata": {
            "name": f"{md['name']}-launcher", "namespace": ns, "labels": {"app": md["name"]},
            "ownerReferences": _owned(job)}, "spec": {
                "backoffLimit": (spec.get("runPolicy") or {}).get("backoffLimit"), "template": tmpl,
                # newLauncherJob copies runPolicy.activeDeadlineSeconds to the launcher Job
                "activeDeadlineSeconds": (spec.get("runPolicy") or {}).get("activeDeadlineSeconds")},
            "status": {"startTime": now_iso()}})  # the Job controller's first sync of it
    _create_pod(ctrl, job, f"{md['name']}-launcher-{secrets.token_hex(3)[:5]}", tmpl, ann, [{
        "apiVersion": "batch/v1", "kind": "Job", "name": bjob["metadata"]["name"],
        "uid": bjob["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}])


def launcher_deadline(ctrl: Any, job: dict) -> None:
    """The launcher batch/v1 Job's activeDeadlineSeconds, as the Job controller enforces it
    (kubernetes pkg/controller/job/job_controller.go pastActiveDeadline: from status.startTime;
    condition Failed, reason DeadlineExceeded; its active pods deleted). See deadlines.py."""
    import time

    from .rules import parse_time
    md = job["metadata"]
    name = f"{md['name']}-launcher"
    bjob = ctrl.store.get("batch/v1", "Job", name, md["namespace"])
    limit = ((bjob or {}).get("spec") or {}).get("activeDeadlineSeconds")
    start = parse_time(((bjob or {}).get("status") or {}).get("startTime"))
    if bjob is None or not limit or start is None or _is_true(bjob, "Failed") or _is_true(bjob, "Complete"):
        return
    if time.time() < start + int(limit):
        ctrl.changes.at("deadline", "|".join((job["apiVersion"], "MPIJob", md["namespace"], md["name"])),
                        start + int(limit))
        return
    ctrl.store.mutate("batch/v1", "Job", name, md["namespace"], lambda o: _cond(
        o, "Failed", "True", "DeadlineExceeded", "Job was active longer than specified deadline"))
    for p in ctrl._pods_of(job):
        if (p["metadata"].get("labels") or {}).get(ROLE_LABEL) == "launcher" and \
                p["status"].get("phase") in ("Pending", "Running"):
            ctrl.store.delete("v1", "Pod", p["metadata"]["name"], md["namespace"])


def clean_up(ctrl: Any, job: dict, pods: list[dict]) -> None:
    """Once the MPIJob is finished (its completionTime set), syncHandler deletes the worker pods
    only when ``runPolicy.cleanPodPolicy`` is All or Running (isCleanUpPods; the default is None,
    pkg/apis/kubeflow/v2beta1/default.go setDefaultsRunPolicy); with Running it keeps the workers
    that already ended and deletes the Running and Pending ones (deleteWorkerPods). With None the
    workers' ``sshd -D`` runs on, holding their GPUs, until the MPIJob is deleted."""
    policy = ((job.get("spec") or {}).get("runPolicy") or {}).get("cleanPodPolicy") or "None"
    if policy not in ("All", "Running"):
        return
    for p in pods:
        if (p["metadata"].get("labels") or {}).get(ROLE_LABEL) != "worker":
            continue
        if policy == "Running" and p["status"].get("phase") not in ("Running", "Pending"):
            continue
        ctrl.store.delete("v1", "Pod", p["metadata"]["name"], job["metadata"]["namespace"])


def write_status(ctrl: Any, job: dict, pods: list[dict], suspended: bool) -> None:
    """updateMPIJobStatus (see the module doc)."""
    md = job["metadata"]
    role = lambda p: (p["metadata"].get("labels") or {}).get(ROLE_LABEL)  # noqa: E731
    launcher = [p for p in pods if role(p) == "launcher"]
    workers = [p for p in pods if role(p) == "worker"]
    lphase = launcher[0]["status"].get("phase") if launcher else None
    bjob = ctrl.store.get("batch/v1", "Job", f"{md['name']}-launcher", md["namespace"]) or {}
    jfail = next((c for c in (bjob.get("status") or {}).get("conditions") or []
                  if c.get("type") == "Failed" and c.get("status") == "True"), None)
    wph = [p["status"].get("phase") for p in workers]
    evicted = sum(p["status"].get("phase") == "Failed" and p["status"].get("reason") == "Evicted" for p in workers)
    now = now_iso()
    name = f"{md['namespace']}/{md['name']}"

    def upd(o: dict) -> None:
        st = o.setdefault("status", {})
        if not st.get("conditions"):
            _cond(o, "Created", "True", "MPIJobCreated", f"MPIJob {name} is created.")
        if suspended:
            _cond(o, "Suspended", "True", "MPIJobSuspended", "MPIJob suspended")
            _cond(o, "Running", "False", "MPIJobSuspended", f"MPIJob {name} is suspended.")
            return
        if _is_true(o, "Suspended"):
            _cond(o, "Suspended", "False", "MPIJobResumed", "MPIJob resumed")
        st.setdefault("startTime", now)
        rs = st.setdefault("replicaStatuses", {})
        rs["Worker"] = {"active": wph.count("Running"), "succeeded": wph.count("Succeeded"),
                        "failed": wph.count("Failed")}
        if launcher:
            rs["Launcher"] = {"active": int(lphase == "Running"), "succeeded": int(lphase == "Succeeded"),
                              "failed": int(lphase == "Failed")}
        if lphase == "Succeeded":
            st.setdefault("completionTime", now)
            _cond(o, "Running", "False", "MPIJobSucceeded", "")
            _cond(o, "Succeeded", "True", "MPIJobSucceeded", f"MPIJob {name} successfully completed.")
        elif jfail is not None and jfail.get("reason") != "BackoffLimitExceeded":
            # updateMPIJobFailedStatus: the launcher Job's Failed reason and message (DeadlineExceeded)
            st.setdefault("completionTime", now)
            _cond(o, "Running", "False", "MPIJobFailed", "")
            _cond(o, "Failed", "True", jfail.get("reason", "MPIJobFailed"), jfail.get("message", ""))
        elif lphase == "Failed":
            st.setdefault("completionTime", now)
            _cond(o, "Running", "False", "MPIJobFailed", "")
            _cond(o, "Failed", "True", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
        if evicted:
            _cond(o, "Failed", "True", "MPIJobEvicted", f"{evicted}/{len(workers)} workers are evicted")
        elif lphase == "Running" and wph.count("Running") == len(workers):
            _cond(o, "Running", "True", "MPIJobRunning", f"MPIJob {name} is running.")
    ctrl.store.mutate(job["apiVersion"], "MPIJob", md["name"], md["namespace"], upd)
