"""KubernetesBackend.submit over real HTTP against the fake apiserver."""
from __future__ import annotations

import base64
import copy
import json
import os
import stat
import time

import pytest

import gpujobs
from gpujobs.backends.kubernetes import keys, naming
from gpujobs.backends.kubernetes.kinds import KINDS
from gpujobs.backends.kubernetes.retry import ATTEMPTS
from gpujobs.backends.kubernetes.submit.create import submit_rendered
from gpujobs.errors import PayloadError, PreflightError, QuotaError, SubmitError

from .conftest import NS, namespaced_objects, shared_keys
from tests.job_calls import double
from tests.support import MPI_IMAGE


def ddp(gpus_per_node=2, nodes=2, **opts):
    return gpujobs.job(double, 21).ddp(nodes=nodes, gpus_per_node=gpus_per_node).queue("team-a") \
        .options(**opts)


SPECS = {
    "TrainJob": lambda: ddp().spec(),
    "PyTorchJob": lambda: ddp(kind="PyTorchJob").priority("high").spec(),
    "MPIJob": lambda: gpujobs.job(double, 1).mpi(ranks=4, ranks_per_node=2).image(MPI_IMAGE).queue("team-a").spec(),
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
    assert r.kind == kind and r.payload_secret is None  # a small call travels in the job
    job_id = submit_rendered(backend, r)
    assert job_id == f"{NS}/{r.name}"

    objs = namespaced_objects(server)
    api_kind = KINDS[kind].api_kind
    assert set(objs) == {(api_kind, r.name)} | shared_keys(r)
    for rendered in (r.job, *r.shared):
        stored = objs[(KINDS[kind].api_kind if rendered is r.job else rendered["kind"],
                       rendered["metadata"]["name"])]
        assert _strip_server_fields(stored) == _strip_server_fields(rendered)

    # the submitter keeps a record with the job's key (one 0600 file), so a new kernel can attach
    path = keys.record_path(NS, r.name, backend.home)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) & 0o077 == 0
    assert backend.job_key(job_id) == r.key
    rec = keys.load_record(NS, r.name, backend.home)
    assert rec.kind == kind and rec.submission_id == r.submission_id
    assert not keys.key_path(NS, r.name, backend.home).exists()  # no second file per submit

    # deleting the job leaves only the shared runtime ConfigMap and key Secret
    server.store.delete(r.job["apiVersion"], api_kind, r.name, NS)
    assert set(namespaced_objects(server)) == shared_keys(r)


def test_big_call_goes_in_a_secret_the_job_owns(server, backend):
    from gpujobs.backends.kubernetes.render.payload_objects import INLINE_LIMIT

    r = backend.render_job(gpujobs.job(double, b"x" * INLINE_LIMIT).ddp(nodes=2, gpus_per_node=1)
                           .queue("team-a").spec())
    assert r.payload_secret is not None
    server.reset_counts()
    submit_rendered(backend, r)
    objs = namespaced_objects(server)
    key = ("Secret", naming.payload_secret_name(r.name))
    assert set(objs) == {("TrainJob", r.name), key} | shared_keys(r)
    assert _strip_server_fields(objs[key]) == _strip_server_fields(r.payload_secret)
    (ref,) = objs[key]["metadata"]["ownerReferences"]
    assert ref["uid"] == objs[("TrainJob", r.name)]["metadata"]["uid"] and ref["name"] == r.name
    server.store.delete(r.job["apiVersion"], "TrainJob", r.name, NS)  # GC takes the Secret along
    assert set(namespaced_objects(server)) == shared_keys(r)


def test_submit_through_builder_and_second_submit_is_cached(server, backend, monkeypatch):
    monkeypatch.setattr("gpujobs.backends.get_backend", lambda name=None: backend)
    server.reset_counts()
    job_id = backend.submit(ddp().spec())
    first = server.request_count
    server.reset_counts()
    job_id2 = backend.submit(ddp().spec())
    assert job_id != job_id2  # two submits are two jobs
    assert server.request_count == 1  # preflight answers cached: one create, the job
    assert first > 3
    assert len([k for k in namespaced_objects(server) if k[0] == "TrainJob"]) == 2


def test_shared_objects_are_made_once_per_namespace(server, backend):
    backend.submit(ddp().spec())
    other = type(backend)(backend.api_client, namespace=NS, home=backend.home)  # cold cache
    server.reset_counts()
    other.submit(ddp().spec())
    assert server.counts[("create", "configmaps")] == 0 and server.counts[("create", "secrets")] == 0
    assert server.counts[("get", "configmaps")] == 1 and server.counts[("get", "secrets")] == 1
    runtime = [k for k in namespaced_objects(server) if k[0] == "ConfigMap"]
    assert len(runtime) == 1 and runtime[0][1].startswith("gpujobs-runtime-")


def test_deleted_runtime_is_made_again_once_the_cache_expires(server, backend):
    r = backend.render_job(ddp().spec())
    submit_rendered(backend, r)
    server.store.delete("v1", "ConfigMap", r.runtime["metadata"]["name"], NS)
    backend.preflight_ttl = 0
    backend.submit(ddp().spec())
    assert ("ConfigMap", r.runtime["metadata"]["name"]) in namespaced_objects(server)


def test_stranger_in_place_of_the_key_secret_is_a_preflight_error(server, backend):
    r = backend.render_job(ddp().spec())
    name = r.key_secret["metadata"]["name"]
    server.store.create({"apiVersion": "v1", "kind": "Secret",
                         "metadata": {"name": name, "namespace": NS}, "data": {"key": "c3Rvcg=="}})
    with pytest.raises(PreflightError) as ei:
        submit_rendered(backend, r)
    assert ei.value.obj == f"Secret {NS}/{name}" and "kubectl delete secret" in str(ei.value)
    assert not any(k[0] == "TrainJob" for k in namespaced_objects(server))


def local_records(backend):
    """The submit records (each with its job's key) this submitter keeps for NS."""
    root = backend.home / "k8s-jobs" / NS
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


def _assert_nothing_created(server, backend):
    assert namespaced_objects(server) == {}
    assert local_records(backend) == []


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


@pytest.mark.parametrize("deleted,make,obj,fix", [
    (None, lambda: ddp().queue("nope"), f"LocalQueue {NS}/nope", "kubectl get localqueues"),
    (("kueue.x-k8s.io/v1beta2", "ClusterQueue", "cq-a"), ddp, "ClusterQueue cq-a", None),
    (None, lambda: ddp().priority("urgent"), "WorkloadPriorityClass urgent", None),
    (("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime", "gpujobs-torch"), ddp,
     "ClusterTrainingRuntime gpujobs-torch", "gpujobs admin trainer-runtimes | kubectl apply -f -"),
    (None, lambda: ddp(volcano="job", volcano_queue="gold"), "Volcano Queue gold", None),
], ids=["local_queue", "cluster_queue", "priority_class", "trainjob_runtime", "volcano_queue"])
def test_preflight_missing_object(server, backend, deleted, make, obj, fix):
    """Each object the job needs, missing: a PreflightError naming it, nothing created."""
    if deleted is not None:
        server.store.delete(*deleted)
    with pytest.raises(PreflightError) as ei:
        backend.submit(make().spec())
    assert ei.value.obj == obj
    if fix is not None:
        assert fix in str(ei.value)
    _assert_nothing_created(server, backend)


def test_quota_never_fits(server, backend):
    with pytest.raises(QuotaError) as ei:
        backend.submit(ddp(gpus_per_node=8, nodes=2).spec())  # 16 GPUs, queue has 8
    msg = str(ei.value)
    assert "cq-a" in msg and "16" in msg and "nvidia.com/gpu" in msg
    assert msg.startswith("this job can never start: it asks for more nvidia.com/gpu"), msg  # #31
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
    assert "not allowed" in msg and f"gpujobs admin rbac -n {NS} --user NAME | kubectl apply -f -" in msg
    _assert_nothing_created(server, backend)
    server.allow_all()
    server.deny(verb="create", resource="secrets")
    # answers are kept preflight_ttl: the secrets review ran (allowed) alongside the failing one
    backend.state.preflight.clear()
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


def test_failed_payload_secret_create_removes_the_job(server, backend):
    from gpujobs.backends.kubernetes.render.payload_objects import INLINE_LIMIT

    backend.submit(ddp().spec())  # the shared objects exist now
    before = set(namespaced_objects(server))
    server.inject(500, count=ATTEMPTS, verb="create", path="/secrets$")
    with pytest.raises(SubmitError) as ei:
        backend.submit(gpujobs.job(double, b"x" * INLINE_LIMIT).ddp(nodes=1, gpus_per_node=1)
                       .queue("team-a").spec())
    msg = str(ei.value)
    assert "HTTP 500" in msg and "removed TrainJob" in msg and "Secret" in msg
    assert set(namespaced_objects(server)) == before
    assert len(local_records(backend)) == 1  # the first job's record (and key) only


def test_credentials_refused_mid_submit_remove_the_job_and_say_so(server, backend):
    """A 401 on the payload Secret's create (a token that expired mid-submit) is the access error
    (its login fix) and still says what the rollback removed (before the access errors, a
    GpuJobsError re-raised as is dropped the "removed TrainJob" part)."""
    from gpujobs.backends.kubernetes.render.payload_objects import INLINE_LIMIT

    backend.submit(ddp().spec())  # the shared objects exist now
    before = set(namespaced_objects(server))
    server.inject(401, count=1, verb="create", path="/secrets$")
    with pytest.raises(SubmitError) as ei:
        backend.submit(gpujobs.job(double, b"x" * INLINE_LIMIT).ddp(nodes=1, gpus_per_node=1)
                       .queue("team-a").spec())
    msg = str(ei.value)
    assert "does not accept your credentials" in msg and "kubectl auth whoami" in msg
    assert "removed TrainJob" in msg
    assert set(namespaced_objects(server)) == before
    assert len(local_records(backend)) == 1


def test_a_cluster_that_refuses_api_discovery_says_so_with_the_binding_that_grants_it(server, backend):
    """Before: "API discovery of trainer.kubeflow.org/v1alpha1 failed: HTTP 403 Forbidden: {...}"."""
    server.inject(403, count=10, verb="get", path="^/apis/trainer.kubeflow.org/v1alpha1$")
    with pytest.raises(PreflightError) as ei:
        backend.submit(ddp().spec())
    msg = str(ei.value)
    assert msg.startswith("API discovery of trainer.kubeflow.org/v1alpha1: this cluster refuses API discovery")
    assert "kubectl create clusterrolebinding gpujobs-discovery --clusterrole=system:discovery" in msg
    assert namespaced_objects(server) == {}  # nothing created


@pytest.mark.parametrize("fail_on", ["configmaps", "secrets", "trainjobs"])
def test_failed_create_leaves_no_job(server, backend, fail_on):
    server.inject(500, count=ATTEMPTS, verb="create", path=f"/{fail_on}$")
    with pytest.raises(SubmitError) as ei:
        backend.submit(ddp().spec())
    assert "HTTP 500" in str(ei.value)
    assert not any(k[0] == "TrainJob" for k in namespaced_objects(server))
    assert local_records(backend) == []


def test_transient_errors_are_retried_once_each(server, backend):
    server.inject(503, count=1, verb="create", path="/trainjobs$")
    server.inject(429, count=1, verb="create", path="/configmaps$", retry_after=0.1)
    job_id = backend.submit(ddp().spec())
    objs = namespaced_objects(server)
    assert [k for k in objs if k[0] == "TrainJob"] == [("TrainJob", job_id.split("/")[1])]
    assert len(objs) == 3  # the job, the runtime ConfigMap, the key Secret


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
    rec = keys.load_record(NS, jobs[0][1], backend.home)
    assert rec.submission_id == objs[jobs[0]]["metadata"]["labels"][naming.LABEL_SUBMISSION]


def test_explicit_name_taken_by_another_submission(server, backend):
    server.store.create({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                         "metadata": {"name": "exp-1", "namespace": NS}, "spec": {}})
    with pytest.raises(PreflightError) as ei:
        backend.submit(ddp().name("exp-1").spec())
    assert ei.value.obj == f"TrainJob {NS}/exp-1" and "already exists" in str(ei.value)
    objs = namespaced_objects(server)
    assert {k for k in objs if k[0] == "TrainJob"} == {("TrainJob", "exp-1")}  # untouched
    assert objs[("TrainJob", "exp-1")]["spec"] == {}


def test_name_taken_by_our_own_earlier_job_keeps_its_record_and_key(server, backend):
    """Regression: the refused second submit wrote its record over the first job's, then
    removed it on rollback: the first job's key was gone and its results unreadable."""
    first = backend.submit(ddp().name("exp-1").spec())
    key, rec = backend.job_key(first), keys.load_record(NS, "exp-1", backend.home)
    with pytest.raises(PreflightError, match="already exists"):
        backend.submit(ddp().name("exp-1").spec())
    assert backend.job_key(first) == key
    assert keys.load_record(NS, "exp-1", backend.home) == rec
    assert stat.S_IMODE(os.stat(keys.record_path(NS, "exp-1", backend.home)).st_mode) == 0o600


def test_same_submission_retried_whole_is_idempotent(server, backend):
    """submit_rendered twice with one rendering (same submission id) -> one job."""
    r = backend.render_job(ddp().name("exp-2").spec())
    assert submit_rendered(backend, r) == submit_rendered(backend, r) == f"{NS}/exp-2"
    assert set(namespaced_objects(server)) == {("TrainJob", "exp-2")} | shared_keys(r)


def test_render_output_never_carries_the_long_lived_key(server, backend):
    """`gpujobs render` output is shown, saved and pasted: it is signed with a key of its own."""
    backend.submit(ddp().spec())
    ns_key = backend.signing_key(NS)
    live = {k for k in namespaced_objects(server) if k[0] == "Secret"}
    shown = backend.render(ddp().spec())
    secret = next(o for o in shown if o["kind"] == "Secret")
    assert base64.b64decode(secret["data"]["key"]).decode() != ns_key.hex()
    assert ("Secret", secret["metadata"]["name"]) not in live
    assert ns_key.hex() not in json.dumps(shown)


def test_damaged_namespace_key_file_is_replaced(server, backend):
    backend.submit(ddp().spec())
    path = next((backend.home / "k8s-keys" / "_namespaces").rglob(NS))
    path.write_text("")  # e.g. a crash of another tool mid-write
    other = type(backend)(backend.api_client, namespace=NS, home=backend.home)
    job_id = other.submit(ddp().spec())
    key = other.signing_key(NS)
    assert len(key) == 32 and path.read_text() == key.hex()
    assert other.job_key(job_id)  # results of the new job can be checked


def test_a_mutable_runtime_configmap_is_refused_even_with_the_right_contents(server, backend):
    """A mutable one could be edited under jobs waiting in the queue."""
    r = backend.render_job(ddp().spec(), for_submit=True)
    cm = copy.deepcopy(r.runtime)
    cm.pop("immutable")
    server.store.create(cm)
    with pytest.raises(PreflightError) as ei:
        submit_rendered(backend, r)
    assert ei.value.obj == f"ConfigMap {NS}/{cm['metadata']['name']}"
    assert "not immutable" in str(ei.value) and "kubectl delete configmap" in str(ei.value)
    assert not any(k[0] == "TrainJob" for k in namespaced_objects(server))


def test_a_failed_preflight_leaves_no_check_running(server, backend):
    """Every check ends before preflight raises, so none can write a stale answer into the
    cache afterwards (the RBAC test above once saw 'allowed' cached after it cleared it)."""
    from gpujobs.backends.kubernetes.submit import preflight as pf

    server.deny(verb="create", group="trainer.kubeflow.org", resource="trainjobs")
    server.latency_s = 0.05  # the other reads are still in flight when the denial arrives
    with pytest.raises(PreflightError):
        backend.submit(ddp().spec())
    cached = dict(backend.state.preflight)
    assert ("ssar", NS, "", "secrets") in cached  # it finished: before preflight returned
    pf._POOL.submit(lambda: None).result()  # nothing queued behind it either
    assert backend.state.preflight == cached
