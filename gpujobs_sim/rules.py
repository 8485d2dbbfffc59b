"""The simulated cluster's own reading of the upstream rules: when a job of each kind is finished
(and whether it succeeded), when Kueue counts its pods as ready, how Kueue sizes its pod sets,
what a pod requests, and how Kubernetes parses quantities and timestamps.

Written from the upstream sources and docs cited beside each rule (snapshots in
docs/kubernetes-kinds.md, "Upstream sources the code cites"), never from gpujobs' own mapping code: the simulator must not call
``gpujobs.backends.kubernetes.status.mapping`` or ``.podsets``, so that a bug there cannot show up on
both sides of a test. Facts are data (tables) where they can be.
"""
from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Callable

# ------------------------------------------------------------------ quantities
# k8s.io/apimachinery pkg/api/resource/quantity.go (doc comment: the serialization format):
#   <quantity> ::= <signedNumber><suffix>; <binarySI> ::= Ki | Mi | Gi | Ti | Pi | Ei;
#   <decimalSI> ::= m | "" | k | M | G | T | P | E (plus n, u from suffix.go); <decimalExponent> ::= e|E <signedNumber>
QUANTITY_SUFFIXES: dict[str, Decimal] = {
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1), "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6, "G": Decimal(10) ** 9, "T": Decimal(10) ** 12, "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
}
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)$")


class QuantityError(ValueError):
    pass


def quantity(value: Any) -> Decimal:
    """A Kubernetes resource quantity (``"500m"``, ``"1Gi"``, ``2``, ``"1e3"``) as an exact Decimal."""
    if isinstance(value, bool):
        raise QuantityError(f"not a quantity: {value!r}")
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    m = _QUANTITY.match(str(value).strip())
    if not m:
        raise QuantityError(f"quantities must match the regular expression "
                            f"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {value!r}")
    try:
        number = Decimal(m.group(1))
    except InvalidOperation as exc:
        raise QuantityError(f"not a quantity: {value!r}") from exc
    if m.group(2):
        return number * (Decimal(10) ** int(m.group(2)[1:]))
    return number * QUANTITY_SUFFIXES[m.group(3) or ""]


def is_quantity(value: Any) -> bool:
    try:
        quantity(value)
        return True
    except QuantityError:
        return False


# ------------------------------------------------------------------ times, conditions
def parse_time(text: Any) -> float | None:
    """An RFC 3339 timestamp as metav1.Time writes it ("2026-08-22T10:00:00Z"), in epoch seconds."""
    if not text:
        return None
    try:
        return _dt.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def condition(obj: dict | None, type_: str) -> dict:
    """The object's status condition of that type ({} when none): metav1.Condition lists are
    keyed by ``type`` (x-kubernetes-list-map-keys: [type] in the CRDs)."""
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c
    return {}


def is_true(obj: dict | None, type_: str) -> bool:
    return condition(obj, type_).get("status") == "True"


# ------------------------------------------------------------------ finished
@dataclass(frozen=True)
class Outcome:
    finished: bool
    succeeded: bool = False


def _by_conditions(success: str, failure: str) -> Callable[[dict], Outcome]:
    def rule(job: dict) -> Outcome:
        if is_true(job, failure):
            return Outcome(True, False)
        if is_true(job, success):
            return Outcome(True, True)
        return Outcome(False)
    return rule


def _rayjob(job: dict) -> Outcome:
    # kuberay@feeaf72 ray-operator/apis/ray/v1/rayjob_types.go: JobDeploymentStatusComplete = "Complete",
    # JobDeploymentStatusFailed = "Failed" (terminal, IsJobDeploymentTerminal); JobStatusSucceeded = "SUCCEEDED".
    # Kueue's RayJob.Finished (pkg/controller/jobs/rayjob/rayjob_controller.go) is finished on those two
    # deployment statuses and successful when the Ray job status is SUCCEEDED.
    st = job.get("status") or {}
    dep = st.get("jobDeploymentStatus")
    if dep in ("Complete", "Failed"):
        return Outcome(True, dep == "Complete" and st.get("jobStatus") == "SUCCEEDED")
    return Outcome(False)


def _volcano_job(job: dict) -> Outcome:
    # volcano@ed72c7c staging/src/volcano.sh/apis/pkg/apis/batch/v1alpha1/job.go JobPhase: the final
    # phases are Completed, Failed, Terminated, Aborted (Completing/Terminating/Aborting are transient).
    phase = ((job.get("status") or {}).get("state") or {}).get("phase")
    if phase in ("Completed", "Failed", "Terminated", "Aborted"):
        return Outcome(True, phase == "Completed")
    return Outcome(False)


def _appwrapper(job: dict) -> Outcome:
    # project-codeflare/appwrapper api/v1beta2/appwrapper_types.go AppWrapperPhase: Succeeded, Failed final
    # (the CRD's status.phase enum in shared/crds/appwrapper).
    phase = (job.get("status") or {}).get("phase")
    return Outcome(phase in ("Succeeded", "Failed"), phase == "Succeeded")


FINISHED: dict[str, Callable[[dict], Outcome]] = {
    # mpi@caa3c47 pkg/apis/kubeflow/v2beta1/types.go: JobSucceeded = "Succeeded", JobFailed = "Failed";
    # Kueue's MPIJob.Finished reads those two conditions (pkg/controller/jobs/mpijob/mpijob_controller.go).
    "MPIJob": _by_conditions("Succeeded", "Failed"),
    # to@4445c12 pkg/apis/kubeflow.org/v1/common_types.go JobConditionType: JobSucceeded "Succeeded",
    # JobFailed "Failed"; Kueue's kubeflowjob Finished (kubeflowjob_controller.go) reads them.
    "PyTorchJob": _by_conditions("Succeeded", "Failed"),
    # trainer@8c0f505 pkg/apis/trainer/v1alpha1/trainjob_types.go: TrainJobComplete = "Complete",
    # TrainJobFailed = "Failed" condition types.
    "TrainJob": _by_conditions("Complete", "Failed"),
    "RayJob": _rayjob,
    "Job": _volcano_job,
    "AppWrapper": _appwrapper,
}


def _batch_job(job: dict) -> Outcome:
    # k8s.io/api@v0.37.2 batch/v1 types.go JobConditionType: Complete and Failed are the terminal
    # conditions (Kueue's batch/job Finished reads them, kueue@ff69552 pkg/controller/jobs/job/job_controller.go)
    return _by_conditions("Complete", "Failed")(job)


def _is_batch(job: dict) -> bool:
    return job.get("kind") == "Job" and str(job.get("apiVersion", "")).startswith("batch/")


def outcome(job: dict) -> Outcome:
    rule = _batch_job if _is_batch(job) else FINISHED.get(job.get("kind", ""))
    if rule is None:
        raise ValueError(f"the simulator has no finished rule for {job.get('apiVersion')}/{job.get('kind')}")
    return rule(job)


# ------------------------------------------------------------------ pods ready (Kueue)
def _pod_is_ready(p: dict) -> bool:
    return (p.get("status") or {}).get("phase") in ("Running", "Succeeded")


def pods_ready(job: dict, pods: list[dict], expected: int) -> bool:
    """Whether Kueue sets the Workload's PodsReady, per kind (each kind's Kueue integration, cited
    below)."""
    kind = job.get("kind")
    if _is_batch(job):
        # kueue@ff69552 pkg/controller/jobs/job/job_controller.go#L427-434: status.succeeded + status.ready
        # (+ uncounted succeeded) >= the pod count
        st = job.get("status") or {}
        return int(st.get("succeeded") or 0) + int(st.get("ready") or 0) >= expected or outcome(job).finished
    if kind in ("MPIJob", "PyTorchJob"):
        # kueue@ff69552 mpijob_controller.go#L203-210, kubeflowjob_controller.go#L143-150: Running=True
        return is_true(job, "Running") or outcome(job).finished
    if kind == "RayJob":
        # kueue@ff69552 rayjob_controller.go#L228-230: status.rayClusterStatus.state == "ready"
        return (((job.get("status") or {}).get("rayClusterStatus") or {}).get("state") == "ready"
                or outcome(job).finished)
    # TrainJob: ready + succeeded over the child JobSet's jobs >= replicas (trainjob_controller.go#L342-360),
    # here over the pods; AppWrapper: all its pods ready (inference)
    return len(pods) >= expected and all(_pod_is_ready(p) for p in pods)


# ------------------------------------------------------------------ pod requests
def with_runtime_class_overhead(template: dict, runtime_classes: list[dict]) -> dict:
    """The template as Kueue counts it (kueue v0.17 pkg/workload/resources.go handlePodOverhead):
    a pod that names a RuntimeClass and sets no overhead gets the class's ``overhead.podFixed``
    (what the RuntimeClass admission controller gives its pods). The template is not changed."""
    spec = template.get("spec") or {}
    name = spec.get("runtimeClassName")
    if not name or spec.get("overhead"):
        return template
    for rc in runtime_classes:
        if rc["metadata"]["name"] == name and (rc.get("overhead") or {}).get("podFixed"):
            return {**template, "spec": {**spec, "overhead": dict(rc["overhead"]["podFixed"])}}
    return template


def with_limit_range_defaults(template: dict, limit_ranges: list[dict]) -> dict:
    """The template as Kueue counts it in a namespace with these LimitRanges (kueue v0.17
    pkg/workload/resources.go, AdjustResources before a pending Workload is queued): every init and
    app container gets the ``Container`` items' ``default`` for each limit it lacks and
    ``defaultRequest`` for each request it lacks, the LimitRange listed first winning a resource
    (kueue pkg/util/limitrange Summarize keeps the first). The template itself is not changed."""
    default: dict[str, Any] = {}
    default_request: dict[str, Any] = {}
    for lr in limit_ranges:
        for item in (lr.get("spec") or {}).get("limits") or []:
            if item.get("type") != "Container":
                continue
            for k, v in (item.get("default") or {}).items():
                default.setdefault(k, v)
            for k, v in (item.get("defaultRequest") or {}).items():
                default_request.setdefault(k, v)
    if not default and not default_request:
        return template
    import copy
    out = copy.deepcopy(template)
    spec = out.setdefault("spec", {})
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        res = c.setdefault("resources", {})
        res["limits"] = {**default, **(res.get("limits") or {})}
        res["requests"] = {**default_request, **(res.get("requests") or {})}
    return out


def pod_requests(template: dict) -> dict[str, Decimal]:
    """What one pod of this template requests: the most it holds at once over its life (KEP-753,
    kubernetes.io/docs/concepts/workloads/pods/sidecar-containers/#resource-sharing-within-containers).
    Its init containers start one after another; a sidecar (``restartPolicy: Always``) keeps running,
    a regular one ends before the next starts; then the app containers run beside every sidecar. The
    pod's request is, per resource, the largest of those phases; pod-level ``spec.resources.requests``
    stand for the containers' cpu, memory and hugepages; ``spec.overhead`` comes on top. A container
    with a limit and no request requests its limit (the API server defaults requests from limits,
    kubernetes.io/docs/concepts/configuration/manage-resources-containers/#requests-and-limits)."""
    spec = template.get("spec") or {}

    def asks(c: dict) -> dict[str, Decimal]:
        res = c.get("resources") or {}
        return {k: quantity(v) for k, v in {**(res.get("limits") or {}), **(res.get("requests") or {})}.items()}

    def together(cs: list[dict]) -> dict[str, Decimal]:
        out: dict[str, Decimal] = {}
        for c in cs:
            for k, v in asks(c).items():
                out[k] = out.get(k, Decimal(0)) + v
        return out

    phases: list[dict[str, Decimal]] = []
    staying: list[dict] = []
    for c in spec.get("initContainers") or []:
        phases.append(together([*staying, c]))
        if c.get("restartPolicy") == "Always":
            staying.append(c)
    phases.append(together([*staying, *(spec.get("containers") or [])]))
    peak: dict[str, Decimal] = {}
    for phase in phases:
        for k, v in phase.items():
            peak[k] = max(peak.get(k, Decimal(0)), v)
    for k, v in ((spec.get("resources") or {}).get("requests") or {}).items():
        if k in ("cpu", "memory") or k.startswith("hugepages-"):
            peak[k] = quantity(v)
    for k, v in (spec.get("overhead") or {}).items():
        peak[k] = peak.get(k, Decimal(0)) + quantity(v)
    return peak


# ------------------------------------------------------------------ pod sets (Kueue's integrations)
@dataclass(frozen=True)
class SimPodSet:
    name: str
    count: int
    template: dict


# kueue@ff69552 pkg/controller/jobs/mpijob/mpijob_controller.go#L117 and kubeflowjob_controller.go#L117:
# one PodSet per replica type, named after the lower-cased type, in this order
REPLICA_ORDER = {"MPIJob": ("mpiReplicaSpecs", ["Launcher", "Worker"]),
                 "PyTorchJob": ("pytorchReplicaSpecs", ["Master", "Worker"])}
# kuberay@feeaf72 ray-operator/controllers/ray/common/job.go GetDefaultSubmitterTemplate: the submitter
# container requests cpu 500m, memory 200Mi (limits cpu 1, memory 1Gi)
RAY_DEFAULT_SUBMITTER = {"spec": {"restartPolicy": "Never", "containers": [{
    "name": "ray-job-submitter", "resources": {"limits": {"cpu": "1", "memory": "1Gi"},
                                               "requests": {"cpu": "500m", "memory": "200Mi"}}}]}}


def pod_sets(job: dict, lookup: Callable[[str, str, str], dict | None] | None = None) -> list[SimPodSet]:
    """The Workload's podSets Kueue's integration builds for this job. ``lookup(apiVersion, kind, name)``
    reads cluster objects (a TrainJob's ClusterTrainingRuntime)."""
    kind, spec = job["kind"], job.get("spec") or {}
    if _is_batch(job):
        # kueue@ff69552 pkg/controller/jobs/job/job_controller.go#L253: one PodSet "main" of parallelism
        # pods (parallelism defaults to 1, batch/v1 types.go)
        return [SimPodSet("main", int(spec.get("parallelism", 1)), spec.get("template") or {})]
    if kind in REPLICA_ORDER:
        field, order = REPLICA_ORDER[kind]
        reps = spec.get(field) or {}
        # replicas default: 1 (kubeflow common defaulting, to@4445c12 pkg/apis/kubeflow.org/v1/*_defaults.go)
        return [SimPodSet(rt.lower(), int(reps[rt].get("replicas", 1)), reps[rt].get("template") or {})
                for rt in order if rt in reps]
    if kind == "RayJob":
        # kueue@ff69552 pkg/controller/jobs/rayjob/rayjob_controller.go#L286-330: head (1), one per worker
        # group (replicas x numOfHosts), and a submitter in K8sJobMode (the default submissionMode,
        # kuberay rayjob_types.go) with spec.submitterPodTemplate or KubeRay's default submitter template
        rc = spec.get("rayClusterSpec") or {}
        out = [SimPodSet("head", 1, (rc.get("headGroupSpec") or {}).get("template") or {})]
        for g in rc.get("workerGroupSpecs") or []:
            out.append(SimPodSet(g["groupName"], int(g.get("replicas", 1)) * int(g.get("numOfHosts", 1) or 1),
                                 g.get("template") or {}))
        if spec.get("submissionMode", "K8sJobMode") == "K8sJobMode":
            out.append(SimPodSet("submitter", 1, spec.get("submitterPodTemplate") or RAY_DEFAULT_SUBMITTER))
        return out
    if kind == "TrainJob":
        # trainer@8c0f505 trainjob_types.go: trainer.numNodes (default: the runtime's mlPolicy.numNodes, else 1)
        # nodes, each with trainer.resourcesPerNode on the 'node' container of the runtime's 'node'
        # replicated job; Kueue's TrainJob integration takes its PodSets from that JobSet
        t = spec.get("trainer") or {}
        runtime = None
        ref = spec.get("runtimeRef") or {}
        if lookup is not None and ref.get("name"):
            runtime = lookup("trainer.kubeflow.org/v1alpha1", ref.get("kind", "ClusterTrainingRuntime"), ref["name"])
        rspec = (runtime or {}).get("spec") or {}
        nodes = t.get("numNodes", ((rspec.get("mlPolicy") or {}).get("numNodes")) or 1)
        base: dict = {}
        for rj in ((rspec.get("template") or {}).get("spec") or {}).get("replicatedJobs") or []:
            if rj.get("name") == "node":
                base = ((rj.get("template") or {}).get("spec") or {}).get("template") or {}
        containers = [dict(c) for c in (base.get("spec") or {}).get("containers") or []] or [{"name": "node"}]
        for c in containers:
            if c.get("name") == "node" and t.get("resourcesPerNode") is not None:
                c["resources"] = t["resourcesPerNode"]
        return [SimPodSet("node", int(nodes), {"spec": {**(base.get("spec") or {}), "containers": containers}})]
    if kind == "AppWrapper":
        # project-codeflare/appwrapper: spec.components[].podSets[]{path, replicas (default 1)}; the path is
        # a JSONPath-like 'template.spec.template' into the component. Kueue names the podSets
        # "<appwrapper>-<index>", numbered over all components' podSets (kueue v0.17.0
        # pkg/controller/jobs/appwrapper/appwrapper_controller.go PodSets, line 150)
        sets = [(int(ps.get("replicas", 1)), _follow(comp, ps.get("path", "")))
                for comp in spec.get("components") or [] for ps in comp.get("podSets") or []]
        name = (job.get("metadata") or {}).get("name", "")
        return [SimPodSet(f"{name}-{i}", n, tmpl) for i, (n, tmpl) in enumerate(sets)]
    raise ValueError(f"Kueue has no integration for {job.get('apiVersion')}/{kind} in the simulator")


def _follow(obj: Any, path: str) -> dict:
    for part in [p for p in path.split(".") if p]:
        m = re.fullmatch(r"([A-Za-z]+)((?:\[\d+\])*)", part)
        if not m:
            raise ValueError(f"AppWrapper podSets path {path!r} is not a field path")
        obj = obj[m.group(1)]
        for idx in re.findall(r"\[(\d+)\]", m.group(2)):
            obj = obj[int(idx)]
    return obj if isinstance(obj, dict) else {}
