"""docs/rbac.yaml judged by the real RBAC authorizer: its Role bound to a user with a client
certificate of their own (not system:masters) is enough for gpujobs' submit, status, queue
position and cancel; a user without it is refused before anything is created; the optional
ClusterRole lets that user's forecast read the cluster's queues."""
from __future__ import annotations

import copy
import warnings
from pathlib import Path

import pytest
import yaml

from gpujobs.backends.kubernetes import KubernetesBackend, naming
from gpujobs.backends.kubernetes.submit import rbac
from gpujobs.errors import GpuJobsError

from .conftest import NS, QUEUE, _apply
from .kube import spec_of, wait_for, workload_of, is_true
from tests.kubeconfig import token_kubeconfig

DOC = Path(__file__).resolve().parents[2] / "docs" / "rbac.yaml"


def _docs_for(user: str, kinds: tuple[str, ...]) -> list[dict]:
    out = []
    for doc in yaml.safe_load_all(DOC.read_text()):
        if not doc or doc["kind"] not in kinds:
            continue
        doc = copy.deepcopy(doc)
        for s in doc.get("subjects") or []:
            s["name"] = user
        if doc["kind"] in ("Role", "RoleBinding"):
            doc["metadata"]["namespace"] = NS
            doc["metadata"]["name"] += f"-{user}"
            if doc["kind"] == "RoleBinding":
                doc["roleRef"]["name"] += f"-{user}"
        else:
            doc["metadata"]["name"] += f"-{user}"
            if doc["kind"] == "ClusterRoleBinding":
                doc["roleRef"]["name"] += f"-{user}"
        out.append(doc)
    return out


@pytest.fixture(scope="module")
def alice(controlplane, admin_api):
    """User alice: docs/rbac.yaml's Role and RoleBinding in the namespace, nothing else."""
    _apply(admin_api, _docs_for("alice", ("Role", "RoleBinding")))
    kubeconfig = controlplane.user_kubeconfig("alice")
    group, resources, verbs = rbac.RULES[0]
    _until_granted(controlplane.api(kubeconfig), verbs[0], group, resources[0])
    return kubeconfig


def _until_granted(api, verb, group, resource):
    """The authorizer reads Roles and bindings from an informer: a binding just created is denied
    until the informer has it (under load a Role's first rule was once still denied). One granted
    rule means the whole Role and its binding are in the cache."""
    wait_for(lambda: _can(api, verb, group, resource), 30, f"the binding to grant {verb} {resource}")


def _backend(kubeconfig, home) -> KubernetesBackend:
    return KubernetesBackend(kubeconfig=str(kubeconfig), namespace=NS, home=home,
                             default_queue=QUEUE, request_timeout=20.0)


def _can(api, verb, group, resource, sub=None) -> bool:
    from kubernetes import client
    attrs = client.V1ResourceAttributes(namespace=NS, verb=verb, group=group, resource=resource,
                                        subresource=sub)
    r = client.AuthorizationV1Api(api).create_self_subject_access_review(
        client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=attrs)))
    return bool(r.status.allowed)


def test_the_documented_role_grants_every_rule_gpujobs_lists(controlplane, alice):
    api = controlplane.api(alice)
    denied = []
    for group, resources, verbs in rbac.RULES:
        for res in resources:
            resource, _, sub = res.partition("/")
            for verb in verbs:
                if not _can(api, verb, group, resource, sub or None):
                    denied.append(f"{verb} {group}/{res}")
    assert not denied, denied
    # and nothing cluster-wide
    assert not _can(api, "list", "kueue.x-k8s.io", "clusterqueues")


def test_a_user_with_the_role_submits_reads_and_cancels(controlplane, alice, gpujobs_home):
    controlplane.require_kueue()
    be = _backend(alice, gpujobs_home)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the optional cluster-scoped preflight reads: 403
        job_id = be.submit(spec_of("PyTorchJob"))
    name = naming.parse_job_id(job_id)[1]
    admin = controlplane.api()
    wait_for(lambda: is_true(workload_of(admin, "PyTorchJob", name), "Admitted"), 60,
             "admission")
    st = wait_for(lambda: (s := be.status(job_id)).phase != "queued" and s, 30,
                  "alice's status to show the admission")
    assert st.phase in ("admitted", "starting")
    be.cancel(job_id)
    wait_for(lambda: workload_of(admin, "PyTorchJob", name) is None, 60, "the job gone")


def test_a_user_without_the_role_is_refused_before_anything_is_created(controlplane, gpujobs_home,
                                                                       admin_api):
    be = _backend(controlplane.user_kubeconfig("mallory"), gpujobs_home)
    from kubernetes import client
    before = client.CoreV1Api(admin_api).list_namespaced_config_map(NS).items
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(GpuJobsError) as e:
            be.submit(spec_of("PyTorchJob"))
    # the preflight's SelfSubjectAccessReview answers before the apiserver would say 403
    assert "not allowed to create pytorchjobs.kubeflow.org" in str(e.value), e.value
    # the fix is a command a pip user can run (gpujobs admin rbac), not a repository path
    assert "gpujobs admin rbac" in str(e.value), e.value
    after = client.CoreV1Api(admin_api).list_namespaced_config_map(NS).items
    assert len(after) == len(before)


def test_queue_position_with_the_role_alone(controlplane, alice, gpujobs_home, admin_api):
    """localqueues/pendingworkloads in visibility.kueue.x-k8s.io is what the Role must grant for
    the position (Kueue's own pending_workloads_lq_viewer_role.yaml, v0.17.0)."""
    controlplane.require_kueue()
    be = _backend(alice, gpujobs_home)
    made = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(2):
                made.append(be.submit(spec_of("PyTorchJob", gpus=4)))
        # the first holds all 8 GPUs once Kueue admits it: until then both are pending, the second 2nd
        wait_for(lambda: be.status(made[0]).phase != "queued", 60, "alice's first job admitted")
        st = wait_for(lambda: (s := be.status(made[1])).queue_position and s, 60,
                      "a queue position for alice's second job")
        assert (st.phase, st.queue_position, st.position_available) == ("queued", 1, True)
    finally:
        for j in made:
            be.cancel(j)
        for j in made:
            wait_for(lambda j=j: workload_of(admin_api, "PyTorchJob", naming.parse_job_id(j)[1])
                     is None, 60, "cleanup")


def test_plan_with_the_forecast_reader_cluster_role(controlplane, alice, gpujobs_home, admin_api):
    """docs/rbac.yaml's optional ClusterRole is what plan() reads the ClusterQueue with: with it,
    an 8-GPU job on an idle 8-GPU queue would be admitted now; a 16-GPU job never fits."""
    controlplane.require_kueue()
    _apply(admin_api, _docs_for("alice", ("ClusterRole", "ClusterRoleBinding")))
    _until_granted(controlplane.api(alice), "list", "kueue.x-k8s.io", "clusterqueues")
    be = _backend(alice, gpujobs_home)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fits = be.plan(spec_of("PyTorchJob", gpus=4))
        never = be.plan(spec_of("PyTorchJob", gpus=8))
    assert fits.admit_now and fits.position is None, fits
    assert not never.admit_now and never.expected_start is None, never


def test_a_user_without_the_role_reading_the_queue_is_told_the_fix_not_shown_an_empty_queue(
        controlplane, gpujobs_home):
    """The real authorizer's 403 on the namespace's Workloads: an error with `gpujobs admin rbac`
    (before: `gpujobs queue` printed an empty table and exited 0)."""
    from gpujobs.errors import KubernetesError
    be = _backend(controlplane.user_kubeconfig("mallory"), gpujobs_home)
    try:
        with pytest.raises(KubernetesError) as e:
            be.jobs()
    finally:
        be.state.stop_watches()
    assert (e.value.status, e.value.reason) == (403, "Forbidden")
    assert f"you may not list workloads in namespace '{NS}'" in str(e.value)
    assert f"gpujobs admin rbac -n {NS} --user NAME" in str(e.value)


def test_a_token_the_server_does_not_know_is_a_401_with_the_login_fix(controlplane, gpujobs_home, tmp_path):
    """The real authenticator's 401, for a status read and a submit alike."""
    from gpujobs.errors import KubernetesError
    kc = tmp_path / "kubeconfig-stale"
    kc.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": controlplane.server,
                                               "certificate-authority": str(controlplane.pki["ca"])}}],
        "users": [{"name": "u", "user": {"token": "expired-or-never-issued"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": NS}}]}))
    be = _backend(kc, gpujobs_home)
    errors = []
    try:
        for call in (be.jobs, lambda: be.submit(spec_of("PyTorchJob"))):
            with pytest.raises(KubernetesError) as e:
                call()
            errors.append(e.value)
    finally:
        be.state.stop_watches()
    for err in errors:
        assert (err.status, err.reason) == (401, "Unauthorized"), err
        assert "does not accept your credentials" in str(err) and "kubectl auth whoami" in str(err)


def test_a_new_login_written_to_the_kubeconfig_reaches_a_running_backend(controlplane, gpujobs_home, admin_api,
                                                                       backend, tmp_path):
    """The real authenticator: a backend whose token the server does not know is refused (401); a
    token the server issues (TokenRequest, for a ServiceAccount bound to docs/rbac.yaml's Role)
    written into the same kubeconfig is used by that same backend, with no restart."""
    controlplane.require_kueue()
    import time as _time

    from kubernetes import client
    from gpujobs.errors import KubernetesError

    core = client.CoreV1Api(admin_api)
    docs = _docs_for("carol", ("Role", "RoleBinding"))
    for d in docs:
        if d["kind"] == "RoleBinding":
            d["subjects"] = [{"kind": "ServiceAccount", "name": "carol", "namespace": NS}]
    kc, now = tmp_path / "kubeconfig-carol", _time.time()

    def login(token: str, at: float) -> None:
        token_kubeconfig(kc, controlplane.server, token, at, ca=controlplane.pki["ca"], namespace=NS)
    login("expired-or-never-issued", now)
    be = _backend(kc, gpujobs_home)
    job_id = None
    try:
        core.create_namespaced_service_account(NS, {"metadata": {"name": "carol"}})
        _apply(admin_api, docs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            job_id = backend.submit(spec_of("PyTorchJob"))
        with pytest.raises(KubernetesError) as e:
            be.status(job_id)
        assert e.value.status == 401
        token = core.create_namespaced_service_account_token(
            "carol", NS, {"spec": {"expirationSeconds": 600}}).status.token
        login(token, now + 2)  # what `kubectl login`-like commands do: a new token in the same file
        st = wait_for(lambda: _status_or_none(be, job_id), 60, "the same backend to read the job with the new token")
        assert st.job_id == job_id and not st.terminal
    finally:
        be.state.stop_watches()
        if be._api_client is not None:
            be._api_client.close()
        if job_id is not None:
            backend.cancel(job_id)
            wait_for(lambda: workload_of(admin_api, "PyTorchJob", naming.parse_job_id(job_id)[1]) is None, 60,
                     "cleanup")
        rbac_api = client.RbacAuthorizationV1Api(admin_api)
        for d in docs:
            delete = rbac_api.delete_namespaced_role if d["kind"] == "Role" else rbac_api.delete_namespaced_role_binding
            delete(d["metadata"]["name"], NS)
        core.delete_namespaced_service_account("carol", NS)


def _status_or_none(be, job_id):
    from gpujobs.errors import KubernetesError
    try:
        return be.status(job_id)
    except KubernetesError:
        return None
