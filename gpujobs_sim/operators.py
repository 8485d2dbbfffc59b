"""Simulated job operators (MPI Operator, Training Operator, Trainer, KubeRay, Volcano Job
controller, AppWrapper) and the Volcano PodGroup controller: pods from the job's pod
templates, then each kind's own status written from the pods' phases.
"""
from __future__ import annotations

import copy
import time
from typing import Any

from .conditions import _cond, get_suspend
from .rules import outcome
from .kubelet import ANN_IDLE, ANN_PORT, ANN_RANK, ANN_RAY_HEAD, ANN_ROLE, ANN_WORLD, RAY_SUBMITTER
from .store import now_iso

OWNER = "sim.gpujobs.dev/owner-uid"
PG_API = "scheduling.volcano.sh/v1beta1"


def _merge_named(base: list[dict], patch: list[dict]) -> list[dict]:
    """Lists of containers / volumes / env merged by ``name`` (their list-map key in the pod
    schema, x-kubernetes-list-map-keys / patchMergeKey: name); a patch entry's fields win."""
    out = [copy.deepcopy(x) for x in base]
    for p in patch:
        cur = next((x for x in out if x.get("name") == p.get("name")), None)
        if cur is None:
            out.append(copy.deepcopy(p))
        else:
            for k, v in p.items():
                cur[k] = _merge_named(cur.get(k) or [], v) if k in _NAMED_LISTS and isinstance(v, list) else \
                    copy.deepcopy(v)
    return out


_NAMED_LISTS = ("containers", "initContainers", "volumes", "env", "volumeMounts")


def _merge_pod_spec(base: dict, patch: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in patch.items():
        if k in _NAMED_LISTS and isinstance(v, list):
            out[k] = _merge_named(out.get(k) or [], v)
        elif k == "metadata" or (isinstance(v, dict) and isinstance(out.get(k), dict)):
            out[k] = {**(out.get(k) or {}), **copy.deepcopy(v)}
        else:
            out[k] = copy.deepcopy(v)
    return out


def trainjob_node_template(job: dict, runtime: dict | None) -> dict:
    """The pod template of a TrainJob node as Kubeflow Trainer builds it (trainer@8c0f505
    pkg/apis/trainer/v1alpha1/trainjob_types.go): the runtime's replicated job ``node`` pod template,
    then each of ``spec.runtimePatches[].trainingRuntimeSpec`` (merged by name, as the list-map keys
    of the pod schema say), then ``trainer`` overriding the ``node`` container's image, command,
    args, env and resources (resourcesPerNode); the torch plugin adds the PET_* variables
    (PET_NNODES, PET_NPROC_PER_NODE, PET_MASTER_ADDR, PET_MASTER_PORT; PET_NODE_RANK per node)
    (shared/crds/examples/trainer/trainjob-multi-node.yaml header)."""
    spec = job.get("spec") or {}
    t = spec.get("trainer") or {}

    def node_template(rt_spec: dict) -> dict:
        for rj in ((rt_spec.get("template") or {}).get("spec") or {}).get("replicatedJobs") or []:
            if rj.get("name") == "node":
                return ((rj.get("template") or {}).get("spec") or {}).get("template") or {}
        return {}

    base = node_template((runtime or {}).get("spec") or {})
    tmpl = {"metadata": copy.deepcopy(base.get("metadata") or {}), "spec": copy.deepcopy(base.get("spec") or {})}
    if not any(c.get("name") == "node" for c in tmpl["spec"].get("containers") or []):
        tmpl["spec"]["containers"] = [*(tmpl["spec"].get("containers") or []), {"name": "node"}]
    for patch in spec.get("runtimePatches") or []:
        p = node_template(patch.get("trainingRuntimeSpec") or {})
        for k in ("labels", "annotations"):
            if (p.get("metadata") or {}).get(k):
                tmpl["metadata"].setdefault(k, {}).update(p["metadata"][k])
        tmpl["spec"] = _merge_pod_spec(tmpl["spec"], p.get("spec") or {})
    c = next(c for c in tmpl["spec"]["containers"] if c.get("name") == "node")
    for k, field in (("image", "image"), ("command", "command"), ("args", "args"), ("resourcesPerNode", "resources")):
        if t.get(k) is not None:
            c[field] = copy.deepcopy(t[k])
    nnodes = t.get("numNodes") or (((runtime or {}).get("spec") or {}).get("mlPolicy") or {}).get("numNodes") or 1
    pet = [{"name": "PET_NNODES", "value": str(nnodes)},
           {"name": "PET_NPROC_PER_NODE", "value": str(t.get("numProcPerNode", "auto"))},
           {"name": "PET_MASTER_ADDR", "value": f"{job['metadata']['name']}-node-0-0.{job['metadata']['name']}"},
           {"name": "PET_MASTER_PORT", "value": "29400"}]
    c["env"] = _merge_named(c.get("env") or [], [*(t.get("env") or []), *pet])
    return tmpl


def _template_pods(job: dict, lookup: Any = None) -> list[tuple[str, dict, str]]:
    """(pod name, pod template, role) for every pod the operator would create; ``lookup(job)``
    reads a TrainJob's runtime."""
    name, spec, kind = job["metadata"]["name"], job.get("spec") or {}, job["kind"]
    out: list[tuple[str, dict, str]] = []
    if kind == "MPIJob":
        for rtype, r in (spec.get("mpiReplicaSpecs") or {}).items():
            for i in range(int(r.get("replicas", 1))):
                role = "mpi-launcher" if rtype == "Launcher" else "idle"
                out.append((f"{name}-{rtype.lower()}" + ("" if rtype == "Launcher" else f"-{i}"),
                            r.get("template") or {}, role))
        out.sort(key=lambda t: t[2] != "mpi-launcher")
    elif kind == "PyTorchJob":
        reps = spec.get("pytorchReplicaSpecs") or {}
        for rtype in sorted(reps, key=lambda k: k != "Master"):
            for i in range(int(reps[rtype].get("replicas", 1))):
                out.append((f"{name}-{rtype.lower()}-{i}", reps[rtype].get("template") or {}, "rank"))
    elif kind == "TrainJob":
        t = spec.get("trainer") or {}
        runtime = lookup(job) if lookup is not None else None
        nodes = int(t.get("numNodes") or ((((runtime or {}).get("spec") or {}).get("mlPolicy") or {})
                                          .get("numNodes")) or 1)
        tmpl = trainjob_node_template(job, runtime)
        for i in range(nodes):
            pod = copy.deepcopy(tmpl)
            c = next(c for c in pod["spec"]["containers"] if c["name"] == "node")
            c["env"] = [e for e in c.get("env") or [] if e["name"] != "PET_NODE_RANK"] + [
                {"name": "PET_NODE_RANK", "value": str(i)}]
            # JobSet -> Indexed Job <trainjob>-node-0 -> pods <job>-<index>-<random 5>, labelled with
            # batch.kubernetes.io/job-completion-index (kubernetes.io docs, Job completion mode) and
            # jobset.sigs.k8s.io/replicatedjob-name / job-index (jobset api/jobset/v1alpha2 labels)
            import secrets as _secrets
            pod.setdefault("metadata", {}).setdefault("labels", {}).update({
                "batch.kubernetes.io/job-completion-index": str(i), "jobset.sigs.k8s.io/replicatedjob-name": "node",
                "jobset.sigs.k8s.io/job-index": "0", "jobset.sigs.k8s.io/jobset-name": name})
            out.append((f"{name}-node-0-{i}-{_secrets.token_hex(3)[:5]}", pod, "rank"))
    elif kind == "RayJob":
        # the RayCluster's pods: the head runs `ray start --head --block` and the workers `ray start
        # --block` (KubeRay builds their commands); the entrypoint is not run here but in the
        # submitter Job (kuberay@v1.7.0 ray-operator/controllers/ray/rayjob_controller.go
        # createK8sJobIfNeed), see _ray_submitter
        rc = spec.get("rayClusterSpec") or {}
        out.append((f"{name}-head", (rc.get("headGroupSpec") or {}).get("template") or {}, "idle"))
        for g in rc.get("workerGroupSpecs") or []:
            for i in range(int(g.get("replicas", 1)) * int(g.get("numOfHosts", 1))):
                out.append((f"{name}-{g.get('groupName', 'worker')}-{i}", g.get("template") or {}, "idle"))
    elif kind == "Job":  # Volcano Job
        plugins = spec.get("plugins") or {}
        for ti, t in enumerate(spec.get("tasks") or []):
            for i in range(int(t.get("replicas", 1))):
                role = "rank"
                if "mpi" in plugins:
                    role = "mpi-launcher" if ti == 0 else "idle"
                out.append((f"{name}-{t['name']}-{i}", t.get("template") or {}, role))
    return out


def operate(ctrl: Any, job: dict) -> None:
    store = ctrl.store
    md = job["metadata"]
    if md.get("deletionTimestamp"):
        return
    if job["kind"] == "AppWrapper":
        return _appwrapper(ctrl, job)
    if job["kind"] == "RayJob" and _ray_invalid(ctrl, job):
        return
    pods = ctrl._pods_of(job)
    if outcome(job).finished:
        for p in pods:  # stop idle helpers (MPI workers, Ray workers)
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
            from . import mpi_operator
            store.delete("batch/v1", "Job", f"{md['name']}-launcher", md["namespace"])
            mpi_operator.write_status(ctrl, job, [], suspended=True)
            return
        _write_status(ctrl, job, [], suspended=True)
        return
    if job["kind"] == "MPIJob":  # its own controller model (mpi_operator.py, from mpi-operator's source)
        from . import mpi_operator
        spec = job.get("spec") or {}
        workers = int(((spec.get("mpiReplicaSpecs") or {}).get("Worker") or {}).get("replicas", 0))
        world = str(max(1, workers) * max(1, int(spec.get("slotsPerWorker") or 1)))
        port = (job["metadata"].get("annotations") or {}).get(ANN_PORT) or str(ctrl.next_port())

        def sim_ann(role: str) -> dict:
            return {ANN_ROLE: role, ANN_WORLD: world, ANN_PORT: port, **({ANN_IDLE: "true"} if role == "idle" else {})}
        pods = mpi_operator.reconcile(ctrl, job, pods, sim_ann)
        mpi_operator.write_status(ctrl, job, pods, suspended=False)
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


# kuberay@v1.7.0 ray-operator/controllers/ray/utils/constant.go: MaxRayClusterNameLength = 53,
# MaxRayJobNameLength = MaxRayClusterNameLength - 6
RAY_MAX_JOB_NAME = 47


def _ray_invalid(ctrl: Any, job: dict) -> bool:
    """KubeRay validates the RayJob at the start of every reconcile, suspended or not, and on an
    error only writes the status (rayjob_controller.go Reconcile)."""
    md, st = job["metadata"], job.get("status") or {}
    if st.get("jobDeploymentStatus") == "ValidationFailed":
        return True
    err = kuberay_validation_error(job)
    if err:
        ctrl.store.mutate(job["apiVersion"], "RayJob", md["name"], md["namespace"], lambda o: o.setdefault(
            "status", {}).update(jobDeploymentStatus="ValidationFailed", reason="ValidationFailed", message=err))
    return bool(err)


def kuberay_validation_error(job: dict) -> str:
    """The first of KubeRay's own RayJob checks that ``job`` fails ('' if none): KubeRay validates in
    its controller, not a webhook, and writes jobDeploymentStatus ValidationFailed, reason
    ValidationFailed, message = the error (kuberay@v1.7.0 ray-operator/controllers/ray/
    rayjob_controller.go Reconcile -> validateRayJob; checks from controllers/ray/utils/validation.go
    ValidateRayJobMetadata / ValidateRayJobSpec / ValidateRayClusterSpec; a subset)."""
    name, spec = job["metadata"]["name"], job.get("spec") or {}
    if len(name) > RAY_MAX_JOB_NAME:
        return f"The RayJob metadata is invalid: RayJob name should be no more than {RAY_MAX_JOB_NAME} characters"
    if not spec.get("shutdownAfterJobFinishes") and spec.get("suspend"):
        return ("The RayJob spec is invalid: a RayJob with shutdownAfterJobFinishes set to false is not "
                "allowed to be suspended")
    if spec.get("activeDeadlineSeconds") is not None and int(spec["activeDeadlineSeconds"]) <= 0:
        return "The RayJob spec is invalid: activeDeadlineSeconds must be a positive integer"
    if spec.get("backoffLimit") is not None and int(spec["backoffLimit"]) < 0:
        return "The RayJob spec is invalid: backoffLimit must be a positive integer"
    if spec.get("ttlSecondsAfterFinished") is not None and int(spec["ttlSecondsAfterFinished"]) < 0:
        return "The RayJob spec is invalid: TTLSecondsAfterFinished must be a non-negative integer"
    rc = spec.get("rayClusterSpec") or {}
    head = (((rc.get("headGroupSpec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
    if not head:
        return "The RayJob spec is invalid: headGroupSpec should have at least one container"
    if any(e.get("name") == "RAY_REDIS_ADDRESS" for e in head[0].get("env") or []) and \
            not rc.get("gcsFaultToleranceOptions"):
        return ("The RayJob spec is invalid: RAY_REDIS_ADDRESS is set which implicitly enables GCS fault "
                "tolerance, but GcsFaultToleranceOptions is not set. Please set GcsFaultToleranceOptions "
                "to enable GCS fault tolerance")
    for g in rc.get("workerGroupSpecs") or []:
        if g.get("minReplicas") is None or g.get("maxReplicas") is None:
            if not rc.get("enableInTreeAutoscaling"):
                return (f"The RayJob spec is invalid: worker group {g.get('groupName')} must set both "
                        "minReplicas and maxReplicas when autoscaling is disabled")
    return ""


def _ray_submitter(ctrl: Any, job: dict, cluster_pods: list[dict]) -> list[dict]:
    """KubeRay's K8sJobMode: once the RayCluster is up, a batch/v1 Job named after the RayJob runs
    ``ray job submit --no-wait -- <entrypoint>; ray job logs --follow`` (kuberay@v1.7.0
    controllers/ray/common/job.go BuildJobSubmitCommand). Its pod template is
    ``spec.submitterPodTemplate`` or KubeRay's default (common/job.go GetSubmitterTemplate: one
    ``ray-job-submitter`` container, the head's image), to whose labels KubeRay adds only
    ``ray.io/originated-from-cr-name``, ``ray.io/originated-from-crd`` and
    ``app.kubernetes.io/created-by`` (rayjob_controller.go getSubmitterTemplate); the Job controller
    names its pod ``<job>-<5 random chars>`` and adds ``batch.kubernetes.io/job-name``. The pod's log
    is the driver's output (`ray job logs --follow`). Returns the submitter pods."""
    import secrets as _secrets
    store, md, spec = ctrl.store, job["metadata"], job.get("spec") or {}
    if (spec.get("submissionMode") or "K8sJobMode") != "K8sJobMode":
        return []
    mine = store.list("v1", "Pod", md["namespace"], f"{OWNER}={md['uid']}-submitter")
    if mine:
        return mine
    if not cluster_pods or not all(p["status"].get("phase") == "Running" for p in cluster_pods):
        return []
    head = next((p for p in cluster_pods if p["metadata"]["name"].endswith("-head")), cluster_pods[0])
    tmpl = copy.deepcopy(spec.get("submitterPodTemplate") or {"spec": {
        "containers": [{"name": "ray-job-submitter", "image": head["spec"]["containers"][0].get("image", ""),
                        "resources": {"limits": {"cpu": "1", "memory": "1Gi"},
                                      "requests": {"cpu": "500m", "memory": "200Mi"}}}],
        "restartPolicy": "Never"}})
    kr = {"ray.io/originated-from-cr-name": md["name"], "ray.io/originated-from-crd": "RayJob",
          "app.kubernetes.io/created-by": "kuberay-operator"}
    bjob = store.get("batch/v1", "Job", md["name"], md["namespace"])
    if bjob is None:
        bjob = store.create({"apiVersion": "batch/v1", "kind": "Job", "metadata": {
            "name": md["name"], "namespace": md["namespace"], "labels": dict(kr),
            "ownerReferences": [{"apiVersion": job["apiVersion"], "kind": "RayJob", "name": md["name"],
                                 "uid": md["uid"], "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"backoffLimit": int((spec.get("submitterConfig") or {}).get("backoffLimit", 2)),
                     "template": tmpl}})
    tmd = tmpl.get("metadata") or {}
    labels = {**(tmd.get("labels") or {}), **kr, "batch.kubernetes.io/job-name": md["name"],
              "job-name": md["name"], OWNER: f"{md['uid']}-submitter"}
    ann = {**(tmd.get("annotations") or {}), ANN_ROLE: RAY_SUBMITTER, ANN_RAY_HEAD: head["metadata"]["name"],
           ANN_WORLD: "1"}
    pod_spec = copy.deepcopy(tmpl.get("spec") or {})
    store.create({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": f"{md['name']}-{_secrets.token_hex(3)[:5]}", "namespace": md["namespace"], "labels": labels,
        "annotations": ann, "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": md["name"],
                                                 "uid": bjob["metadata"]["uid"], "controller": True,
                                                 "blockOwnerDeletion": True}]},
        "spec": pod_spec})
    return store.list("v1", "Pod", md["namespace"], f"{OWNER}={md['uid']}-submitter")


def _runtime_of(ctrl: Any, job: dict) -> dict | None:
    ref = (job.get("spec") or {}).get("runtimeRef") or {}
    if not ref.get("name"):
        return None
    return ctrl.store.get("trainer.kubeflow.org/v1alpha1", ref.get("kind", "ClusterTrainingRuntime"), ref["name"],
                          None if ref.get("kind", "ClusterTrainingRuntime") == "ClusterTrainingRuntime"
                          else job["metadata"]["namespace"])


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


def _write_status(ctrl: Any, job: dict, pods: list[dict], suspended: bool = False) -> None:
    md, kind = job["metadata"], job["kind"]
    phases = [p["status"].get("phase") for p in pods]
    ann = lambda p: p["metadata"].get("annotations") or {}  # noqa: E731
    main = [p for p in pods if ann(p).get(ANN_ROLE) in ("rank", "mpi-launcher")]
    head_ok = bool(main) and all(p["status"].get("phase") == "Succeeded" for p in main)
    failed = any(ph == "Failed" for ph in phases)
    all_running = bool(pods) and all(ph in ("Running", "Succeeded") for ph in phases)
    now = now_iso()

    def upd(o: dict) -> None:
        st = o.setdefault("status", {})
        if kind in ("MPIJob", "PyTorchJob"):
            if suspended:
                if any(c.get("type") == "Created" for c in st.get("conditions") or []):
                    _cond(o, "Suspended", "True", f"{kind}Suspended", f"{kind} {md['name']} is suspended.")
                    _cond(o, "Running", "False", f"{kind}Suspended", "")
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
            if suspended:
                return
            if failed:
                _cond(o, "Failed", "True", "TrainJobFailed", "a node failed")
            elif head_ok:
                _cond(o, "Complete", "True", "JobsCompleted", "TrainJob is completed")
        elif kind == "RayJob":
            if suspended:
                if st.get("jobDeploymentStatus"):
                    st["jobDeploymentStatus"] = "Suspended"
                return
            sub = [p for p in pods if ann(p).get(ANN_ROLE) == RAY_SUBMITTER]
            cluster = [p for p in pods if p not in sub]
            cphases = [p["status"].get("phase") for p in cluster]
            up = bool(cluster) and all(ph in ("Running", "Succeeded") for ph in cphases)
            # the Ray job's status is the driver's (the dashboard's job status), read here from the
            # submitter pod that followed it
            done_ok = bool(sub) and all(p["status"].get("phase") == "Succeeded" for p in sub)
            broke = any(p["status"].get("phase") == "Failed" for p in sub) or \
                any(ph == "Failed" for ph in cphases)
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
            if broke:
                st.update(jobStatus="FAILED", jobDeploymentStatus="Failed", reason="AppFailed",
                          message="the Ray job failed", endTime=now)
            elif done_ok:
                st.update(jobStatus="SUCCEEDED", jobDeploymentStatus="Complete", endTime=now,
                          message="Job finished successfully.")
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
