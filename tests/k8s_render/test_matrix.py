"""Every kind x framework x option renders objects that match the upstream CRD schemas.

Beyond the schema (python-jsonschema on each CRD's openAPIV3Schema, plus a check that
no field would be pruned by the apiserver) and the CRDs' CEL rules (x-kubernetes-validations,
gpujobs_sim.cel; also on the Workload the simulated Kueue makes for the job), rules a schema cannot express:
gang size = minAvailable, replicas x GPUs per pod = GPUs requested, Kueue labels,
RayJob under Kueue shuts down after the job, pod security, secrets only by reference.
"""
from __future__ import annotations

import base64
import itertools
import json
import re

import pytest

import gpujobs
from gpujobs_sim import crds
from gpujobs_sim import rules as sim_rules
from gpujobs_sim.kueue import workload_for
from gpujobs.backends.kubernetes import naming
from gpujobs.backends.kubernetes.kinds import KUEUE_KINDS
from gpujobs.backends.kubernetes.render.payload_objects import (ANN_BOOTSTRAP, ANN_PAYLOAD, JOB_DIR,
                                                         KEY_DIR, RUNTIME_DIR)
from gpujobs.backends.kubernetes.render.podsets import pod_sets
from gpujobs.backends.kubernetes.render.job import RenderOptions, render_job
from gpujobs.payload import derive_key, open_envelope, unpack_call
from tests.job_calls import train
from tests.support import MPI_IMAGE

pytestmark = [pytest.mark.skipif(
    not crds.crds_available(),
    reason=f"upstream CRDs not found at {crds.crds_dir()} (set GPUJOBS_CRDS_DIR to shared/crds)"),
    # PyTorchJob under Kueue warns (test_kueue_v020.py); here it is rendered on purpose
    pytest.mark.filterwarnings("ignore::gpujobs.errors.DeprecatedPathWarning")]


# (framework, kind, volcano mode)
VARIANTS = [
    ("ddp", "TrainJob", "none"), ("fsdp", "TrainJob", "gang"),
    ("ddp", "PyTorchJob", "none"), ("fsdp", "PyTorchJob", "gang"),
    ("ddp", "VolcanoJob", "job"), ("fsdp", "AppWrapper", "appwrapper"),
    ("mpi", "MPIJob", "none"), ("mpi", "MPIJob", "gang"),
    ("mpi", "VolcanoJob", "job"),  # mpi in an AppWrapper is refused (test_render_misc)
    ("ray", "RayJob", "none"), ("ray", "RayJob", "gang"),
    ("ddp", "BatchJob", "none"),
]
BUILT_IN = {"BatchJob"}  # a kind the apiserver serves itself: no CRD to check here (tests/realcp checks it)
NODES = [1, 2, 4]
GPUS = [0, 1, 8]  # GPUs per node
OPTIONS = ["plain", "queue-priority", "mig", "env-secrets", "pvc", "topology", "placement"]


def make_spec(fw: str, kind: str, mode: str, nodes: int, gpus: int, option: str):
    b = gpujobs.job(train, 21, scale=3)
    if fw in ("ddp", "fsdp"):
        b = (b.ddp if fw == "ddp" else b.fsdp)(nodes=nodes, gpus_per_node=gpus,
                                               procs_per_node=None if gpus else 2)
    elif fw == "mpi":
        per_node = max(gpus, 1)
        b = b.mpi(ranks=nodes * per_node, gpus_per_rank=1 if gpus else 0, ranks_per_node=per_node).image(MPI_IMAGE)
    else:
        b = b.ray(workers=nodes, gpus_per_worker=gpus)
    b = b.options(kind=kind, volcano=mode)
    if mode in ("gang", "job"):
        b = b.options(volcano_queue="vq")
    if option == "queue-priority":
        b = b.queue("team-a").priority("high")
    elif option == "mig":
        b = b.mig("1g.10gb")
    elif option == "env-secrets":
        b = b.env(LR="0.1", NCCL_DEBUG="INFO").secret_env(HF_TOKEN=("hf", "token"))
    elif option == "pvc":
        b = b.volume("datasets", "/data").resources(memory="8Gi")
    elif option == "topology":
        b = b.topology(required="cloud.provider.com/topology-block")
    elif option == "placement":
        b = b.node_selector(**{"nvidia.com/gpu.product": "H100"}).tolerations(
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"})
        b = b.options(max_runtime_s=3600)
    return b.spec()


CASES = [c for c in itertools.product(VARIANTS, NODES, GPUS, OPTIONS)
         if not (c[0][1] == "VolcanoJob" and c[3] == "topology")]


def _id(case):
    (fw, kind, mode), nodes, gpus, opt = case
    return f"{kind}-{fw}-{mode}-n{nodes}-g{gpus}-{opt}"


_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _containers(tmpl):
    return tmpl["spec"].get("containers", [])


def _expected_pods(spec, kind):
    if spec.framework == "mpi":
        return spec.nodes + 1          # launcher / master + workers
    if spec.framework == "ray":
        return spec.nodes + 1          # head + workers
    return spec.nodes


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_render_matrix(case):
    (fw, kind, mode), nodes, gpus, option = case
    spec = make_spec(fw, kind, mode, nodes, gpus, option)
    r = render_job(spec, opts=RenderOptions(namespace="ml"))
    assert r.kind == kind
    runtime, key_secret, job = r.objects[:3]  # a small call travels inline: no payload Secret
    assert r.objects[3:] == r.companions  # a several-node BatchJob's headless Service
    assert [o["kind"] for o in r.objects][:2] == ["ConfigMap", "Secret"]
    assert r.payload_secret is None and r.files.inline

    # --- schema: CRD openAPIV3Schema, its CEL rules, and nothing the apiserver would prune
    if kind not in BUILT_IN:
        assert crds.schema_errors(job) == []
        assert crds.cel_errors(job) == []
        assert crds.unknown_fields(job) == []
    if kind == "AppWrapper":
        inner = job["spec"]["components"][0]["template"]
        assert inner["apiVersion"] == "batch.volcano.sh/v1alpha1"
        assert crds.schema_errors(inner) == [] and crds.unknown_fields(inner) == []
        assert crds.cel_errors(inner) == []
    if kind in KUEUE_KINDS:  # the Workload Kueue makes for it passes the Workload CRD too
        wl = workload_for(job, priority=1000 if spec.priority else None)
        assert crds.schema_errors(wl) == [] and crds.cel_errors(wl) == []

    # --- metadata: names and label values are valid Kubernetes syntax
    md = job["metadata"]
    assert _DNS1123.match(md["name"]) and len(md["name"]) <= 40
    assert md["namespace"] == "ml"
    for k, v in md["labels"].items():
        assert len(v) <= 63 and _LABEL_VALUE.match(v), (k, v)
    assert md["labels"][naming.LABEL_JOB] == r.name
    assert md["labels"][naming.LABEL_SUBMISSION] == r.submission_id

    # --- Kueue labels (a bare Volcano Job uses its Volcano queue instead)
    if kind in KUEUE_KINDS:
        assert md["labels"]["kueue.x-k8s.io/queue-name"] == spec.queue
        if spec.priority:
            assert md["labels"]["kueue.x-k8s.io/priority-class"] == spec.priority
        if spec.max_runtime_s:
            # the operators' own deadline first, Kueue's timer (from admission) 360 s later
            assert md["labels"]["kueue.x-k8s.io/max-exec-time-seconds"] == ("3600" if kind == "AppWrapper" else "3960")
    else:
        assert not any(k.startswith("kueue.x-k8s.io/") for k in md["labels"])
        assert job["spec"]["queue"] == "vq"

    # --- suspend until Kueue admits (AppWrapper: its controller creates the inner job later)
    if kind in ("TrainJob", "RayJob", "BatchJob"):
        assert job["spec"]["suspend"] is True
    if kind in ("PyTorchJob", "MPIJob"):
        assert job["spec"]["runPolicy"]["suspend"] is True

    # --- RayJob under Kueue: shut the cluster down, never reuse an existing one
    if kind == "RayJob":
        assert job["spec"]["shutdownAfterJobFinishes"] is True
        assert "clusterSelector" not in job["spec"]
        assert job["spec"]["rayClusterSpec"]["rayVersion"]
        if mode == "gang":
            assert md["labels"]["ray.io/scheduler-name"] == "volcano"
            assert md["labels"]["volcano.sh/queue-name"] == "vq"

    # --- pod sets: gpujobs' (quota preflight) match the simulator's own reading of Kueue's
    # integrations (gpujobs_sim.rules, written from upstream); the RayJob submitter is counted
    sets = pod_sets(job)
    if kind in KUEUE_KINDS:
        assert [(ps.name, ps.count) for ps in sets] == [(ps.name, ps.count) for ps in sim_rules.pod_sets(job)]
        assert [ps.requests for ps in sets] == [sim_rules.pod_requests(ps.template) for ps in sim_rules.pod_sets(job)]
    # --- gang size: minAvailable = the whole gang (the submitter Job is not part of it)
    pods = sum(ps.count for ps in sets if ps.name != "submitter")
    assert pods == _expected_pods(spec, kind)
    assert md["annotations"][naming.ANN_GANG] == str(pods)
    if kind in ("VolcanoJob", "AppWrapper"):
        vj = job if kind == "VolcanoJob" else job["spec"]["components"][0]["template"]
        assert vj["spec"]["minAvailable"] == sum(t["replicas"] for t in vj["spec"]["tasks"]) == pods
        assert all(t["minAvailable"] == t["replicas"] for t in vj["spec"]["tasks"])
        plugins = vj["spec"]["plugins"]
        assert set(plugins) == ({"mpi", "ssh", "svc"} if fw == "mpi" else {"pytorch", "svc", "env"})
        if kind == "AppWrapper":
            assert [ps["replicas"] for ps in job["spec"]["components"][0]["podSets"]] == \
                [t["replicas"] for t in vj["spec"]["tasks"]]
    if mode == "gang" and kind in ("PyTorchJob", "MPIJob"):
        assert job["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == pods
        assert job["spec"]["runPolicy"]["schedulingPolicy"]["queue"] == "vq"
    if mode == "gang" and kind == "TrainJob":
        assert job["spec"]["runtimeRef"]["name"] == "gpujobs-torch-volcano"

    # --- GPUs: replicas x GPUs per pod = GPUs requested, under the requested resource name
    gpu_total = sum(int(ps.requests.get(spec.gpu_resource, 0)) * ps.count for ps in sets)
    assert gpu_total == spec.total_gpus
    assert spec.total_gpus == nodes * gpus
    if option == "mig" and gpus:
        assert spec.gpu_resource == "nvidia.com/mig-1g.10gb"
        assert all("nvidia.com/gpu" not in ps.requests for ps in sets)
    for ps in sets:  # GPUs in limits equal requests (extended resources must)
        for c in _containers(ps.template):
            res = c.get("resources", {})
            if spec.gpu_resource in res.get("requests", {}):
                assert res["limits"][spec.gpu_resource] == res["requests"][spec.gpu_resource]

    # --- pod templates: security, volumes, env, secrets by reference, topology
    templates = [ps.template for ps in sets if ps.name != "submitter"] if kind != "TrainJob" else \
        [_trainjob_pod(job)]
    for tmpl in templates:
        pod = tmpl["spec"]
        vols = {v["name"]: v for v in pod.get("volumes", [])}
        assert not any("hostPath" in v for v in vols.values())
        assert vols["gpujobs-runtime"]["configMap"]["name"] == runtime["metadata"]["name"]
        assert vols["gpujobs-key"]["secret"]["secretName"] == key_secret["metadata"]["name"]
        assert {i["path"]: i["fieldRef"]["fieldPath"] for i in
                vols["gpujobs-job"]["downwardAPI"]["items"]} == {
            "bootstrap.json": f"metadata.annotations['{ANN_BOOTSTRAP}']",
            "payload.b64": f"metadata.annotations['{ANN_PAYLOAD}']"}
        ann = tmpl["metadata"]["annotations"]  # what the downwardAPI volume projects
        boot = json.loads(ann[ANN_BOOTSTRAP])
        assert boot["nnodes"] == spec.nodes and boot["nproc_per_node"] == spec.procs_per_node
        assert boot["job_id"] == f"ml/{r.name}"
        fn, _args, _kwargs = unpack_call(open_envelope(base64.b64decode(ann[ANN_PAYLOAD]), r.key))
        assert fn is train or fn.__name__ == "train"
        assert (_args, _kwargs) == ((21,), {"scale": 3})
        if spec.volume:
            assert vols["data"]["persistentVolumeClaim"]["claimName"] == "datasets"
        if option == "placement":
            assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "H100"}
            assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["privileged"] is False
            assert sc["capabilities"]["drop"] == ["ALL"]
            sshd = "sshd" in " ".join(c.get("command", []))
            launcher = "mpi-launcher" in c.get("command", [])
            if not (sshd or launcher):
                assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 1000
                assert "add" not in sc["capabilities"]
            mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
            assert all(mounts[d]["readOnly"] is True for d in (RUNTIME_DIR, JOB_DIR, KEY_DIR))
            if spec.volume:
                assert "/data" in mounts
            if fw in ("ddp", "fsdp") and kind != "TrainJob":
                assert "/dev/shm" in mounts and vols["dshm"]["emptyDir"]["medium"] == "Memory"
            env = {e["name"]: e for e in c["env"]}
            assert env["GPUJOBS_RESULT_SINK"]["value"] == "log"
            if option == "env-secrets":
                assert env["LR"]["value"] == "0.1"
                assert env["HF_TOKEN"] == {"name": "HF_TOKEN", "valueFrom": {
                    "secretKeyRef": {"name": "hf", "key": "token"}}}
        if option == "topology" and tmpl is not None:
            role = tmpl["metadata"]["labels"][naming.LABEL_ROLE]
            if role not in ("launcher", "master", "head") or fw in ("ddp", "fsdp"):
                assert tmpl["metadata"]["annotations"][naming.TOPOLOGY_REQUIRED] == \
                    "cloud.provider.com/topology-block"

    # --- shared runtime ConfigMap and key Secret: immutable, no per-job labels
    assert runtime["immutable"] is True and key_secret["immutable"] is True
    assert naming.LABEL_JOB not in runtime["metadata"]["labels"]
    assert set(runtime["data"]) == {"bootstrap.py"} and set(runtime["binaryData"]) == {"lib.zip"}
    assert base64.b64decode(key_secret["data"]["key"]).decode() == r.signing_key.hex()
    assert r.key == derive_key(r.signing_key, f"ml/{r.name}")  # the job's own key, as pods derive it
    assert r.key.hex() not in json.dumps(job) and r.signing_key.hex() not in json.dumps(job)


def _trainjob_pod(job):
    """The pod a TrainJob makes: trainer fields + the runtime patch's pod spec."""
    patch = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    pod_tmpl = patch["replicatedJobs"][0]["template"]["spec"]["template"]
    t = job["spec"]["trainer"]
    pc = pod_tmpl["spec"]["containers"][0]
    container = {"name": "node", "command": t["command"], "env": t["env"],
                 "resources": t["resourcesPerNode"], "securityContext": pc["securityContext"],
                 "volumeMounts": pc["volumeMounts"]}
    return {"metadata": pod_tmpl["metadata"], "spec": {**pod_tmpl["spec"], "containers": [container]}}
