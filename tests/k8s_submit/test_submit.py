"""KubernetesBackend.submit over real HTTP against the fake apiserver."""
from __future__ import annotations

import copy
import os
import stat
import time

import pytest

import gpujobs
from gpujobs.backends.kubernetes import naming
from gpujobs.backends.kubernetes.kinds import KINDS
from gpujobs.backends.kubernetes.retry import ATTEMPTS
from gpujobs.backends.kubernetes.submit import submit_rendered
from gpujobs.errors import PayloadError, PreflightError, QuotaError, SubmitError

from .conftest import NS, namespaced_objects


def double(x):
    return 2 * x


def ddp(gpus_per_node=2, nodes=2, **opts):
    return gpujobs.job(double, 21).ddp(nodes=nodes, gpus_per_node=gpus_per_node).queue("team-a") \
        .options(**opts)


SPECS = {
    "TrainJob": lambda: ddp().spec(),
    "PyTorchJob": lambda: ddp(kind="PyTorchJob").priority("high").spec(),
    "MPIJob": lambda: gpujobs.job(double, 1).mpi(ranks=4, ranks_per_node=2).queue("team-a").spec(),
    "RayJob": lambda: gpujobs.job(double, 1).ray(workers=2).queue("team-a").spec(),
    "VolcanoJob": lambda: ddp(volcano="job").spec(),
    "AppWrapper": lambda: ddp(volcano="appwrapper").spec(),
}


def _strip_server_fields(obj: dict) -> dict:
    obj = copy.deepcopy(obj)
    md = obj["metadata"]
    for k in ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields",
              "ownerReferences"):
        md.pop(k, None)
    obj.pop("status", None)
    return obj


@pytest.mark.parametrize("kind", list(SPECS))
def test_submit_creates_exactly_the_rendered_objects(server, backend, kind):
    r = backend.render_job(SPECS[kind]())
    assert r.kind == kind
    job_id = submit_rendered(backend, r)
    assert job_id == f"{NS}/{r.name}"

    objs = namespaced_objects(server)
    api_kind = KINDS[kind].api_kind
    assert set(objs) == {(api_kind, r.name), ("ConfigMap", naming.configmap_name(r.name)),
                         ("Secret", naming.secret_name(r.name))}
    job = objs[(api_kind, r.name)]
    uid = job["metadata"]["uid"]
    for rendered, key in ((r.job, (api_kind, r.name)),
                          (r.configmap, ("ConfigMap", naming.configmap_name(r.name))),
                          (r.secret, ("Secret", naming.secret_name(r.name)))):
        stored = objs[key]
        assert _strip_server_fields(stored) == _strip_server_fields(rendered)
    for key in (("ConfigMap", naming.configmap_name(r.name)), ("Secret", naming.secret_name(r.name))):
        (ref,) = objs[key]["metadata"]["ownerReferences"]
        assert ref["uid"] == uid and ref["kind"] == api_kind and ref["name"] == r.name

    # the submitter keeps the key (0600) and a record, so a new kernel can attach
    path = naming.key_path(NS, r.name, backend.home)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert backend.job_key(job_id) == r.key
    rec = naming.load_record(NS, r.name, backend.home)
    assert rec.kind == kind and rec.uid == uid and rec.submission_id == r.submission_id

    # deleting the job garbage-collects the payload objects (ownerReferences work)
    server.store.delete(job["apiVersion"], api_kind, r.name, NS)
    assert namespaced_objects(server) == {}


def test_submit_through_builder_and_second_submit_is_cached(server, backend, monkeypatch):
    monkeypatch.setattr("gpujobs.backends.get_backend", lambda name=None: backend)
    server.reset_counts()
    job_id = backend.submit(ddp().spec())
    first = server.request_count
    server.reset_counts()
    job_id2 = backend.submit(ddp().spec())
    assert job_id != job_id2  # two submits are two jobs
    assert server.request_count == 3  # preflight answers cached: just the three creates
    assert first > 3
    assert len([k for k in namespaced_objects(server) if k[0] == "TrainJob"]) == 2


def _assert_nothing_created(server, backend):
    assert namespaced_objects(server) == {}
    assert not (backend.home / "k8s-keys" / NS).exists() or \
        not any((backend.home / "k8s-keys" / NS).iterdir())


def test_preflight_missing_crd(server, backend):
    server.uninstall_crd("trainjobs.trainer.kubeflow.org")
    with pytest.raises(PreflightError) as ei:
        backend.submit(ddp().spec())
    assert ei.value.obj == "CRD trainjobs.trainer.kubeflow.org"
    assert "not installed" in str(ei.value)
    _assert_nothing_created(server, backend)


def test_preflight_gang_needs_volcano(server, backend):
    server.uninstall_crd("podgroups.scheduling.volcano.sh")
    with pytest.raises(PreflightError) as ei:
        backend.submit(ddp(kind="PyTorchJob", volcano="gang").spec())
    assert ei.value.obj == "CRD podgroups.scheduling.volcano.sh"
    _assert_nothing_created(server, backend)
    backend.submit(ddp(kind="PyTorchJob").spec())  # without gang placement it goes through


def test_preflight_missing_local_queue(server, backend):
    with pytest.raises(PreflightError) as ei:
        backend.submit(ddp().queue("nope").spec())
    assert ei.value.obj == f"LocalQueue {NS}/nope"
    assert "kubectl get localqueues" in str(ei.value)
    _assert_nothing_created(server, backend)


def test_preflight_missing_cluster_queue(server, backend):
    server.store.delete("kueue.x-k8s.io/v1beta2", "ClusterQueue", "cq-a")
    with pytest.raises(PreflightError) as ei:
        backend.submit(ddp().spec())
    assert ei.value.obj == "ClusterQueue cq-a"
    _assert_nothing_created(server, backend)


def test_preflight_missing_priority_class(server, backend):
    with pytest.raises(PreflightError) as ei:
        backend.submit(ddp().priority("urgent").spec())
    assert ei.value.obj == "WorkloadPriorityClass urgent"
    _assert_nothing_created(server, backend)


def test_preflight_missing_trainjob_runtime(server, backend):
    server.store.delete("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime", "torch-distributed")
    with pytest.raises(PreflightError) as ei:
        backend.submit(ddp().spec())
    assert ei.value.obj == "ClusterTrainingRuntime torch-distributed"
    _assert_nothing_created(server, backend)


def test_preflight_missing_volcano_queue(server, backend):
    with pytest.raises(PreflightError) as ei:
        backend.submit(ddp(volcano="job", volcano_queue="gold").spec())
    assert ei.value.obj == "Volcano Queue gold"
    _assert_nothing_created(server, backend)


def test_quota_never_fits(server, backend):
    with pytest.raises(QuotaError) as ei:
        backend.submit(ddp(gpus_per_node=8, nodes=2).spec())  # 16 GPUs, queue has 8
    msg = str(ei.value)
    assert "cq-a" in msg and "16" in msg and "nvidia.com/gpu" in msg
    _assert_nothing_created(server, backend)


def test_quota_resource_not_covered(server, backend):
    with pytest.raises(QuotaError) as ei:
        backend.submit(ddp().mig("1g.10gb").spec())
    assert "nvidia.com/mig-1g.10gb" in str(ei.value)
    _assert_nothing_created(server, backend)


def test_quota_counts_borrowing_limit_and_cohort(server, backend):
    server.store.delete("kueue.x-k8s.io/v1beta2", "ClusterQueue", "cq-a")
    server.store.delete("kueue.x-k8s.io/v1beta2", "LocalQueue", "team-a", NS)
    # nominal 8 + borrowingLimit 8 in a cohort: 16 fits, 24 does not
    server.store.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
                         "metadata": {"name": "cq-a"}, "spec": {"cohortName": "all", "resourceGroups": [
                             {"coveredResources": ["cpu", "nvidia.com/gpu"], "flavors": [{
                                 "name": "a100", "resources": [
                                     {"name": "cpu", "nominalQuota": "100"},
                                     {"name": "nvidia.com/gpu", "nominalQuota": "8",
                                      "borrowingLimit": "8"}]}]}]}})
    server.store.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                         "metadata": {"name": "team-a", "namespace": NS},
                         "spec": {"clusterQueue": "cq-a"}})
    backend.submit(ddp(gpus_per_node=8, nodes=2).spec())
    with pytest.raises(QuotaError):
        backend.submit(ddp(gpus_per_node=8, nodes=3).spec())


def test_unreadable_cluster_queue_skips_quota_check_with_warning(server, backend):
    server.inject(403, count=1, verb="get", path="/clusterqueues/")
    with pytest.warns(RuntimeWarning, match="ClusterQueue cq-a"):
        job_id = backend.submit(ddp().spec())
    assert ("TrainJob", job_id.split("/")[1]) in namespaced_objects(server)


def test_rbac_denied_message(server, backend):
    server.deny(verb="create", group="trainer.kubeflow.org", resource="trainjobs")
    with pytest.raises(PreflightError) as ei:
        backend.submit(ddp().spec())
    msg = str(ei.value)
    assert ei.value.obj == f"RBAC: create trainjobs.trainer.kubeflow.org in namespace {NS}"
    assert "not allowed" in msg and "docs/rbac.yaml" in msg
    _assert_nothing_created(server, backend)
    server.allow_all()
    server.deny(verb="create", resource="secrets")
    with pytest.raises(PreflightError, match="create secrets in namespace"):
        backend.submit(ddp().spec())
    _assert_nothing_created(server, backend)


def test_payload_too_big_fails_before_any_request(server, backend):
    server.reset_counts()
    big = b"x" * 2_000_000
    with pytest.raises(PayloadError) as ei:
        backend.submit(gpujobs.job(double, big).ddp(nodes=1, gpus_per_node=1).queue("team-a").spec())
    assert ei.value.field == "payload" and "PVC" in ei.value.fix
    assert server.request_count == 0


@pytest.mark.parametrize("fail_on", ["configmaps", "secrets"])
def test_failed_create_cleans_up(server, backend, fail_on):
    server.inject(500, count=ATTEMPTS, verb="create", path=f"/{fail_on}$")
    spec = ddp().spec()
    with pytest.raises(SubmitError) as ei:
        backend.submit(spec)
    msg = str(ei.value)
    assert "HTTP 500" in msg and "removed" in msg and "TrainJob" in msg
    assert namespaced_objects(server) == {}
    assert not any((backend.home / "k8s-keys" / NS).iterdir())


def test_transient_errors_are_retried_once_each(server, backend):
    server.inject(503, count=1, verb="create", path="/trainjobs$")
    server.inject(429, count=1, verb="create", path="/configmaps$", retry_after=0.1)
    job_id = backend.submit(ddp().spec())
    objs = namespaced_objects(server)
    assert [k for k in objs if k[0] == "TrainJob"] == [("TrainJob", job_id.split("/")[1])]
    assert len(objs) == 3


def test_retry_after_lost_response_makes_no_second_job(server, backend):
    """The apiserver creates the job but the answer arrives after the client timed out."""
    handler = server._httpd.RequestHandlerClass
    original = handler._send_json
    delayed = {"n": 0}

    def slow_send(self, code, body, headers=None):
        if code == 201 and isinstance(body, dict) and body.get("kind") == "TrainJob" \
                and delayed["n"] == 0:
            delayed["n"] += 1
            time.sleep(1.5)  # > request_timeout: the client gives up, the job exists
        return original(self, code, body, headers)

    handler._send_json = slow_send
    backend.request_timeout = 0.5
    server.reset_counts()
    job_id = backend.submit(ddp().spec())
    assert delayed["n"] == 1
    assert server.counts[("create", "trainjobs")] == 2  # the retry hit AlreadyExists …
    objs = namespaced_objects(server)
    jobs = [k for k in objs if k[0] == "TrainJob"]
    assert jobs == [("TrainJob", job_id.split("/")[1])]  # … and adopted the first job
    uid = objs[jobs[0]]["metadata"]["uid"]
    assert objs[("ConfigMap", naming.configmap_name(jobs[0][1]))]["metadata"]["ownerReferences"][0][
        "uid"] == uid


def test_explicit_name_taken_by_another_submission(server, backend):
    server.store.create({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                         "metadata": {"name": "exp-1", "namespace": NS}, "spec": {}})
    with pytest.raises(PreflightError) as ei:
        backend.submit(ddp().name("exp-1").spec())
    assert ei.value.obj == f"TrainJob {NS}/exp-1" and "already exists" in str(ei.value)
    objs = namespaced_objects(server)
    assert set(objs) == {("TrainJob", "exp-1")}  # the other job is untouched
    assert objs[("TrainJob", "exp-1")]["spec"] == {}


def test_same_submission_retried_whole_is_idempotent(server, backend):
    """submit_rendered twice with one rendering (same submission id) -> one job."""
    r = backend.render_job(ddp().name("exp-2").spec())
    assert submit_rendered(backend, r) == submit_rendered(backend, r) == f"{NS}/exp-2"
    assert set(namespaced_objects(server)) == {("TrainJob", "exp-2"), ("ConfigMap", "exp-2-gpujobs"),
                                               ("Secret", "exp-2-gpujobs-key")}
