"""Kind selection, bad input, YAML output, payload limits, upstream examples vs the validator."""
from __future__ import annotations

import base64
import json
import os
import stat

import pytest
import yaml

import gpujobs
from gpujobs_sim import crds
from gpujobs.backends.kubernetes import keys, naming, render_yaml
from gpujobs.backends.kubernetes.kinds import resolve_kind
from gpujobs.backends.kubernetes.render.payload_objects import ANN_PAYLOAD, INLINE_LIMIT, JOB_DIR
from gpujobs.backends.kubernetes.render.job import RenderOptions, render_job
from gpujobs.errors import PayloadError, SpecError
from gpujobs.payload import derive_key, open_envelope, unpack_call
from tests.job_calls import f
from tests.support import MPI_IMAGE

needs_crds = pytest.mark.skipif(not crds.crds_available(),
                                reason=f"upstream CRDs not found at {crds.crds_dir()} "
                                       "(set GPUJOBS_CRDS_DIR to shared/crds)")


def b():
    return gpujobs.job(f, 1)


@pytest.mark.parametrize("builder, kind", [
    (lambda: b().ddp(gpus=2), "TrainJob"),
    (lambda: b().fsdp(gpus=2), "TrainJob"),
    (lambda: b().mpi(ranks=2).image(MPI_IMAGE), "MPIJob"),
    (lambda: b().ray(workers=2), "RayJob"),
    (lambda: b().ddp(gpus=2).kubernetes(volcano="job"), "VolcanoJob"),
    (lambda: b().mpi(ranks=2).image(MPI_IMAGE).kubernetes(volcano="appwrapper"), "AppWrapper"),
    (lambda: b().ddp(gpus=2).kubernetes(volcano="gang", kind="PyTorchJob"), "PyTorchJob"),
])
def test_default_kinds(builder, kind):
    assert resolve_kind(builder().spec()) == kind


@pytest.mark.parametrize("builder, field", [
    (lambda: b().ray(workers=1).kubernetes(volcano="job"), "volcano"),
    (lambda: b().ddp(gpus=1).kubernetes(volcano="job", kind="TrainJob"), "kind"),
    (lambda: b().ddp(gpus=1).kubernetes(volcano="appwrapper", kind="PyTorchJob"), "kind"),
    (lambda: b().ddp(gpus=1).kubernetes(volcano="gang", kind="VolcanoJob"), "volcano"),
    (lambda: b().ddp(gpus=1).kubernetes(volcano="job").topology(required="rack"), "topology"),
    (lambda: b().ddp(gpus=1).topology(required="rack", preferred="block"), "topology"),
    # Volcano ends the sshd workers when the MPI master completes; the AppWrapper counts it a failure
    (lambda: b().mpi(ranks=2).image(MPI_IMAGE).kubernetes(volcano="appwrapper"), "volcano"),
])
def test_bad_combinations_name_the_field(builder, field):
    with pytest.raises(SpecError) as ei:
        render_job(builder().spec())
    assert ei.value.field == field and ei.value.fix


def test_explicit_kind_argument_overrides_default():
    assert render_job(b().ddp(gpus=2).spec(), "PyTorchJob").kind == "PyTorchJob"
    with pytest.raises(SpecError):
        render_job(b().mpi(ranks=2).image(MPI_IMAGE).spec(), "TrainJob")


def test_payload_over_secret_limit_names_the_fix():
    with pytest.raises(PayloadError) as ei:
        render_job(gpujobs.job(f, b"x" * 1_100_000).ddp(gpus=1).spec())
    assert ei.value.field == "payload"
    assert "usable bytes of a Kubernetes Secret" in ei.value.problem and "PVC" in ei.value.fix


def test_small_call_travels_inline_in_the_job():
    r = render_job(gpujobs.job(f, b"x" * 1000).ddp(nodes=2, gpus_per_node=1).spec(), "PyTorchJob")
    assert r.files.inline and r.payload_secret is None
    assert [o["kind"] for o in r.objects] == ["ConfigMap", "Secret", "PyTorchJob"]
    for role in ("Master", "Worker"):
        tmpl = r.job["spec"]["pytorchReplicaSpecs"][role]["template"]
        sealed = base64.b64decode(tmpl["metadata"]["annotations"][ANN_PAYLOAD])
        assert unpack_call(open_envelope(sealed, r.key))[1] == (b"x" * 1000,)
        env = {e["name"]: e.get("value") for e in tmpl["spec"]["containers"][0]["env"]}
        assert env["GPUJOBS_PAYLOAD"] == f"{JOB_DIR}/payload.b64"


def test_call_over_the_inline_limit_goes_in_a_secret_owned_at_submit():
    r = render_job(gpujobs.job(f, b"x" * (INLINE_LIMIT + 1)).ddp(nodes=2, gpus_per_node=1).spec(),
                   "PyTorchJob")
    assert not r.files.inline and r.payload_secret is not None
    assert [o["kind"] for o in r.objects] == ["ConfigMap", "Secret", "PyTorchJob", "Secret"]
    sec = r.payload_secret
    assert sec["metadata"]["name"] == naming.payload_secret_name(r.name)
    assert sec["metadata"]["labels"][naming.LABEL_JOB] == r.name
    sealed = base64.b64decode(sec["data"]["payload.bin"])
    assert unpack_call(open_envelope(sealed, r.key))[1] == (b"x" * (INLINE_LIMIT + 1),)
    assert json.loads(base64.b64decode(sec["data"]["bootstrap.json"]))["job_id"] == r.job_id
    tmpl = r.job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    assert ANN_PAYLOAD not in (tmpl["metadata"].get("annotations") or {})
    vols = {v["name"]: v for v in tmpl["spec"]["volumes"]}
    assert vols["gpujobs-job"]["secret"]["secretName"] == sec["metadata"]["name"]
    env = {e["name"]: e.get("value") for e in tmpl["spec"]["containers"][0]["env"]}
    assert env["GPUJOBS_PAYLOAD"] == f"{JOB_DIR}/payload.bin"
    assert len(json.dumps(r.job)) < 20_000  # the big call is not in the job object


def test_name_is_deterministic_when_given_and_unique_otherwise():
    spec = b().ddp(gpus=1).spec()
    r1, r2 = render_job(spec), render_job(spec)
    assert r1.name != r2.name and r1.name.startswith("f-")
    assert render_job(spec, submission_id="abc").name == render_job(spec, submission_id="abc").name
    named = b().ddp(gpus=1).name("exp-7").spec()
    assert render_job(named).name == "exp-7"


def test_default_queue_from_options_and_namespace():
    r = render_job(b().ddp(gpus=1).spec(), opts=RenderOptions(namespace="t", default_queue="team-q"))
    assert r.job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-q"
    assert r.namespace == "t" and all(o["metadata"]["namespace"] == "t" for o in r.objects)
    r = render_job(b().ddp(gpus=1).queue("mine").options(namespace="x").spec(),
                   opts=RenderOptions(namespace="t", default_queue="team-q"))
    assert r.job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "mine" and r.namespace == "x"


def test_ray_image_matches_client_versions():
    import sys

    import ray
    r = render_job(b().ray(workers=1, gpus_per_worker=1).spec())
    img = r.job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"]
    assert img == f"rayproject/ray:{ray.__version__}-py{sys.version_info[0]}{sys.version_info[1]}-gpu"
    assert r.job["spec"]["rayClusterSpec"]["rayVersion"] == ray.__version__


@needs_crds
def test_render_yaml_round_trips_and_keeps_the_key(gpujobs_home, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(gpujobs_home / "none"))
    text = render_yaml(b().ddp(nodes=2, gpus_per_node=1).spec(), "PyTorchJob")
    docs = list(yaml.safe_load_all(text))
    assert [d["kind"] for d in docs] == ["ConfigMap", "Secret", "PyTorchJob"]
    assert crds.schema_errors(docs[2]) == []
    assert "bootstrap.py: |" in text  # readable block scalars
    ns, name = docs[2]["metadata"]["namespace"], docs[2]["metadata"]["name"]
    path = keys.key_path(ns, name, gpujobs_home)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    signing = bytes.fromhex(base64.b64decode(docs[1]["data"]["key"]).decode())
    assert derive_key(signing, f"{ns}/{name}").hex() == path.read_text()  # the job's own key


@needs_crds
def test_builder_render_uses_this_backend(gpujobs_home, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(gpujobs_home / "none"))
    objs = b().mpi(ranks=4, ranks_per_node=2).image(MPI_IMAGE).render()
    assert [o["kind"] for o in objs] == ["ConfigMap", "Secret", "MPIJob"]
    assert objs[2]["spec"]["slotsPerWorker"] == 2
    assert objs[2]["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2


@needs_crds
def test_validator_agrees_with_upstream_examples():
    """Upstream examples pass, except the quirks shared/crds/README.md documents."""
    failing = set()
    checked = 0
    for path, obj in crds.iter_examples():
        if "apiVersion" not in obj or (obj["apiVersion"], obj.get("kind")) not in crds.known_kinds():
            continue
        checked += 1
        if crds.schema_errors(obj):
            failing.add(path.name)
    assert checked >= 20
    assert failing == {"pi-intel.yaml", "pi-mpich.yaml"}


@needs_crds
def test_validator_catches_real_mistakes():
    r = render_job(b().ddp(nodes=2, gpus_per_node=1).spec(), "PyTorchJob")
    job = r.job
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "two"
    assert any("replicas" in e for e in crds.schema_errors(job))
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 1
    job["spec"]["runPolicy"]["suspnd"] = True
    assert crds.unknown_fields(job) == ["spec.runPolicy.suspnd"]
    with pytest.raises(SpecError):
        crds.validate(job)


@pytest.mark.parametrize("memory,expected", [("16Gi", "32Gi"), ("1e9", "2000000000"),
                                             ("+1Gi", "2Gi"), (".5Gi", "1Gi")])
def test_pod_memory_is_per_process_memory_times_processes(memory, expected):
    """Every quantity form the spec accepts is scaled to the pod (2 processes a pod)."""
    from gpujobs.quantity import parse_quantity

    spec = b().ddp(nodes=1, gpus_per_node=2).resources(memory=memory).spec()
    r = render_job(spec, "PyTorchJob")
    res = r.job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0][
        "resources"]
    assert parse_quantity(res["requests"]["memory"], "m") == parse_quantity(expected, "m")
    assert res["limits"]["memory"] == res["requests"]["memory"]


def _deadlines(obj):
    """Every activeDeadlineSeconds in a rendered object."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "activeDeadlineSeconds":
                yield v
            else:
                yield from _deadlines(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _deadlines(v)


@pytest.mark.parametrize("build", [
    lambda: gpujobs.job(f, 1).ddp(gpus=2),
    lambda: gpujobs.job(f, 1).ddp(gpus=2).options(kind="PyTorchJob"),
    lambda: gpujobs.job(f, 1).mpi(ranks=2).image(MPI_IMAGE),
    lambda: gpujobs.job(f, 1).ray(workers=1),
])
@pytest.mark.parametrize("limit, whole", [(1.5, 2), (0.5, 1), (3600, 3600)])
def test_a_fractional_limit_is_rounded_up_not_down(build, limit, whole):
    # int() made 1.5 s a 1 s limit and 0.5 s a 0, which Kueue's max-exec-time (minimum 1) refuses
    r = render_job(build().max_runtime(limit).spec(), opts=RenderOptions(namespace="ml"))
    # Kueue's timer counts from admission: a margin (300 s, or 10%) after the operator's deadline
    assert r.job["metadata"]["labels"]["kueue.x-k8s.io/max-exec-time-seconds"] == str(whole + max(300, whole // 10))
    assert set(_deadlines(r.job["spec"])) == {whole}


def test_an_appwrapper_s_limit_is_kueue_s_alone():
    """A Volcano Job has no deadline of its own: Kueue's label is the limit, unchanged."""
    r = render_job(gpujobs.job(f, 1).ddp(gpus=2).options(volcano="appwrapper").max_runtime(60).spec(),
                   opts=RenderOptions(namespace="ml"))
    assert r.kind == "AppWrapper" and r.job["metadata"]["labels"]["kueue.x-k8s.io/max-exec-time-seconds"] == "60"


def test_the_documented_trainer_runtimes_manifest_is_what_the_admin_command_prints(capsys):
    """docs/trainer-runtimes.yaml (what an admin applies, and the simulated cluster installs) is
    `gpujobs admin trainer-runtimes`'s output: regenerate it with that command when this fails."""
    from pathlib import Path

    import yaml

    from gpujobs.backends.kubernetes.render.kubeflow import training_runtimes
    from gpujobs.cli import main
    assert main(["admin", "trainer-runtimes"]) == 0
    printed = list(yaml.safe_load_all(capsys.readouterr().out))
    assert printed == training_runtimes()
    doc = Path(__file__).resolve().parents[2] / "docs" / "trainer-runtimes.yaml"
    assert list(yaml.safe_load_all(doc.read_text())) == printed
    for rt in printed:
        node = rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
        assert node["backoffLimit"] == 0 and node["template"]["spec"]["restartPolicy"] == "Never"


@pytest.mark.parametrize("image,submitter", [
    (None, "rayproject/ray:{v}-py{py}"),  # the default GPU image's CPU twin
    ("rayproject/ray:2.52.0-py311-cu121", "rayproject/ray:2.52.0-py311"),
    ("registry.example/my-ray:1-gpu", "registry.example/my-ray:1-gpu"),  # unknown: kept
])
def test_rayjob_submitter_has_no_retries_and_a_cpu_image(image, submitter):
    """KubeRay's submitter Job retries twice unless submitterConfig.backoffLimit is set, and takes
    the head's image (kuberay@v1.7.0 rayjob_controller.go, common/job.go)."""
    import sys

    from gpujobs.backends.kubernetes.render.podspec import client_ray_version
    b = gpujobs.job(lambda: 1).ray(workers=1, gpus_per_worker=1).queue("q")
    if image:
        b = b.image(image)
    job = render_job(b.spec(), opts=RenderOptions()).job
    assert job["spec"]["submitterConfig"] == {"backoffLimit": 0}
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"]
    sub = job["spec"]["submitterPodTemplate"]["spec"]["containers"][0]["image"]
    want = submitter.format(v=client_ray_version() or "2.52.0", py="%d%d" % sys.version_info[:2])
    assert sub == want and (image is not None or head == want + "-gpu")
    if crds.crds_available():  # submitterConfig is in KubeRay v1.7.0's RayJob CRD
        assert crds.schema_errors(job) == []


def _returns_one():
    return 1


def test_render_yaml_says_what_each_object_is_and_how_many_lines_it_takes():
    """A full render is mostly the shared runtime ConfigMap: each document says what it is and
    its size, the runtime's that `--job-only` leaves it out; the YAML still parses back."""
    from gpujobs.backends.kubernetes.render.yamlout import to_yaml
    r = render_job(gpujobs.job(_returns_one).ddp(nodes=1, gpus_per_node=1).spec())
    docs = to_yaml(r.objects).split("---\n")
    assert len(docs) == len(r.objects)
    for obj, doc in zip(r.objects, docs):
        head, _, body = doc.partition("\n")
        assert head.startswith(f"# {obj['kind']} {obj['metadata']['name']}: ")
        assert head.endswith(f"({body.count(chr(10))} lines)")
        assert yaml.safe_load(doc) == obj
    assert "shared by every job" in docs[0].partition("\n")[0] and "--job-only" in docs[0].partition("\n")[0]


def _checkpoints():
    import gpujobs as g
    return g.context().checkpoint_dir


def test_render_of_a_checkpointing_job_says_submit_would_add_a_claim(tmp_path):
    from gpujobs.backends.kubernetes import KubernetesBackend
    from gpujobs.backends.kubernetes.render.yamlout import render_objects
    be = KubernetesBackend(host="http://127.0.0.1:9", namespace="ns", home=tmp_path)
    notes: list[str] = []
    objs = render_objects(gpujobs.job(_checkpoints).ddp(nodes=1, gpus_per_node=1).spec(), notes=notes, backend=be)
    assert not any("persistentVolumeClaim" in json.dumps(o) for o in objs)
    assert any("render mounts no claim" in n and "--volume CLAIM" in n for n in notes)
    notes.clear()
    render_objects(gpujobs.job(_checkpoints).ddp(nodes=1, gpus_per_node=1).volume("ckpt").spec(), notes=notes,
                   backend=be)
    assert not any("render mounts no claim" in n for n in notes)
