"""The fake apiserver, driven over real HTTP by the official kubernetes client."""
from __future__ import annotations

import threading
import time

import pytest
from kubernetes import client, dynamic, watch

from gpujobs_sim import FakeApiServer

G, V, P = "kubeflow.org", "v2beta1", "mpijobs"


@pytest.fixture
def server():
    s = FakeApiServer().start()
    yield s
    s.stop()
    assert s._httpd is None


@pytest.fixture
def api(server):
    with client.ApiClient(server.configuration()) as a:
        yield a


def mpijob(name="m1", **labels):
    return {"apiVersion": f"{G}/{V}", "kind": "MPIJob",
            "metadata": {"name": name, "labels": labels}, "spec": {"runPolicy": {"suspend": True}},
            "status": {"conditions": [{"type": "Succeeded", "status": "True"}]}}


def test_create_get_conflict_notfound_invalid(api):
    co, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    obj = co.create_namespaced_custom_object(G, V, "default", P, mpijob())
    md = obj["metadata"]
    assert md["uid"] and md["creationTimestamp"] and int(md["resourceVersion"]) > 0
    assert "status" not in obj  # status subresource: create drops status
    with pytest.raises(client.ApiException) as e:
        co.create_namespaced_custom_object(G, V, "default", P, mpijob())
    assert e.value.status == 409 and "AlreadyExists" in e.value.body
    with pytest.raises(client.ApiException) as e:
        co.get_namespaced_custom_object(G, V, "default", P, "nope")
    assert e.value.status == 404 and '"reason":"NotFound"' in e.value.body
    with pytest.raises(client.ApiException) as e:
        core.create_namespaced_config_map("default", {"metadata": {"name": "Bad_Name"}})
    assert e.value.status == 422
    cm = core.create_namespaced_config_map("default", {"metadata": {"generateName": "pay-"}})
    assert cm.metadata.name.startswith("pay-") and len(cm.metadata.name) == 9


def test_create_status_code_is_201(server, api):
    resp = api.call_api("/api/v1/namespaces/default/configmaps", "POST",
                        body={"metadata": {"name": "x"}}, response_type="object",
                        _return_http_data_only=False)
    assert resp[1] == 201


def test_selectors_and_pagination(api):
    core = client.CoreV1Api(api)
    for i in range(5):
        core.create_namespaced_config_map("default", {"metadata": {
            "name": f"c{i}", "labels": {"app": "a" if i < 3 else "b", "i": str(i)}}})
    names = lambda r: sorted(o.metadata.name for o in r.items)  # noqa: E731
    assert names(core.list_namespaced_config_map("default", label_selector="app=a")) == ["c0", "c1", "c2"]
    assert names(core.list_namespaced_config_map("default", label_selector="app!=a,i")) == ["c3", "c4"]
    assert names(core.list_namespaced_config_map("default", label_selector="i in (1, 4)")) == ["c1", "c4"]
    assert names(core.list_namespaced_config_map("default", label_selector="!i")) == []
    assert names(core.list_namespaced_config_map("default", field_selector="metadata.name=c2")) == ["c2"]
    page = core.list_namespaced_config_map("default", limit=2)
    seen = names(page)
    while page.metadata._continue:
        page = core.list_namespaced_config_map("default", limit=2, _continue=page.metadata._continue)
        seen += names(page)
    assert sorted(seen) == [f"c{i}" for i in range(5)]


def test_patch_kinds_put_and_status_subresource(api):
    co = client.CustomObjectsApi(api)
    co.create_namespaced_custom_object(G, V, "default", P, mpijob())
    o = co.patch_namespaced_custom_object(G, V, "default", P, "m1", {"spec": {"runPolicy": {"suspend": False}},
                                                                       "status": {"x": 1}})
    assert o["spec"]["runPolicy"]["suspend"] is False and "status" not in o  # main resource ignores status
    assert o["metadata"]["generation"] == 2
    o = co.patch_namespaced_custom_object_status(G, V, "default", P, "m1", {"status": {"phase": "Running"},
                                                                             "spec": {"x": 1}})
    assert o["status"] == {"phase": "Running"} and "x" not in o["spec"]
    o = api.call_api(f"/apis/{G}/{V}/namespaces/default/{P}/m1", "PATCH",
                     header_params={"Content-Type": "application/json-patch+json"},
                     body=[{"op": "replace", "path": "/spec/runPolicy/suspend", "value": True},
                           {"op": "add", "path": "/metadata/labels", "value": {"k": "v"}}],
                     response_type="object", _return_http_data_only=True)
    assert o["spec"]["runPolicy"]["suspend"] is True and o["metadata"]["labels"] == {"k": "v"}
    o["spec"]["slotsPerWorker"] = 2
    o2 = co.replace_namespaced_custom_object(G, V, "default", P, "m1", o)
    assert o2["spec"]["slotsPerWorker"] == 2 and o2["status"] == {"phase": "Running"}
    with pytest.raises(client.ApiException) as e:  # stale resourceVersion
        co.replace_namespaced_custom_object(G, V, "default", P, "m1", o)
    assert e.value.status == 409


def test_watch_resume_and_410(server, api):
    core = client.CoreV1Api(api)
    first = core.create_namespaced_config_map("default", {"metadata": {"name": "a"}})
    core.create_namespaced_config_map("default", {"metadata": {"name": "b"}})
    rv = first.metadata.resource_version
    got = [(e["type"], e["object"].metadata.name) for e in watch.Watch().stream(
        core.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=1)]
    assert got == [("ADDED", "b")]
    server.compact()
    with pytest.raises(client.ApiException) as e:
        list(watch.Watch().stream(core.list_namespaced_config_map, "default", resource_version=rv,
                                  timeout_seconds=1))
    assert e.value.status == 410
    server.inject_watch_gone(count=1)
    with pytest.raises(client.ApiException) as e:
        list(watch.Watch().stream(core.list_namespaced_config_map, "default", timeout_seconds=1))
    assert e.value.status == 410


def test_watch_live_events_and_drop(server, api):
    core = client.CoreV1Api(api)
    events, errors = [], []

    def run():
        try:
            for e in watch.Watch().stream(core.list_namespaced_config_map, "default", timeout_seconds=5):
                events.append((e["type"], e["object"].metadata.name))
        except Exception as exc:  # the dropped connection surfaces as a protocol error
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.3)
    core.create_namespaced_config_map("default", {"metadata": {"name": "live"}})
    time.sleep(0.3)
    server.drop_watches()
    t.join(5)
    assert not t.is_alive()
    assert ("ADDED", "live") in events and errors, (events, errors)


def test_delete_propagation(server, api):
    co, core = client.CustomObjectsApi(api), client.CoreV1Api(api)

    def owned():
        job = co.create_namespaced_custom_object(G, V, "default", P, mpijob())
        ref = {"apiVersion": f"{G}/{V}", "kind": "MPIJob", "name": "m1", "uid": job["metadata"]["uid"]}
        core.create_namespaced_config_map("default", {"metadata": {"name": "cm", "ownerReferences": [ref]}})
        core.create_namespaced_pod("default", {"metadata": {"name": "p", "ownerReferences": [ref]},
                                               "spec": {"containers": [{"name": "c", "image": "i"}]}})

    for policy in ("Foreground", "Background"):
        owned()
        co.delete_namespaced_custom_object(G, V, "default", P, "m1", propagation_policy=policy)
        assert core.list_namespaced_config_map("default").items == []
        assert core.list_namespaced_pod("default").items == []
    owned()
    co.delete_namespaced_custom_object(G, V, "default", P, "m1", propagation_policy="Orphan")
    cm = core.read_namespaced_config_map("cm", "default")
    assert not cm.metadata.owner_references


def test_finalizers_block_deletion(server, api):
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map("default", {"metadata": {"name": "f", "finalizers": ["x/y"]}})
    core.delete_namespaced_config_map("f", "default")
    cm = core.read_namespaced_config_map("f", "default")
    assert cm.metadata.deletion_timestamp
    core.patch_namespaced_config_map("f", "default", {"metadata": {"finalizers": None}})
    with pytest.raises(client.ApiException):
        core.read_namespaced_config_map("f", "default")


def test_pod_logs_follow(server, api):
    core = client.CoreV1Api(api)
    core.create_namespaced_pod("default", {"metadata": {"name": "p"},
                                           "spec": {"containers": [{"name": "main", "image": "i"}]}})
    with pytest.raises(client.ApiException) as e:
        core.read_namespaced_pod_log("p", "default")
    assert e.value.status == 400 and "waiting to start" in e.value.body
    server.store.patch("v1", "Pod", "p", "default", {"status": {"phase": "Running"}}, subresource="status")
    server.logs.append("default", "p", "one\n")

    def later():
        time.sleep(0.3)
        server.logs.append("default", "p", "two\n")
        time.sleep(0.2)
        server.store.patch("v1", "Pod", "p", "default", {"status": {"phase": "Succeeded"}}, subresource="status")

    threading.Thread(target=later).start()
    lines = list(watch.Watch().stream(core.read_namespaced_pod_log, "p", "default"))
    assert lines == ["one", "two"]
    assert core.read_namespaced_pod_log("p", "default", tail_lines=1) == "two\n"


def test_faults_429_and_500(server, api):
    core = client.CoreV1Api(api)
    server.inject(500, count=1, verb="list", path="configmaps")
    with pytest.raises(client.ApiException) as e:
        core.list_namespaced_config_map("default")
    assert e.value.status == 500
    assert core.list_namespaced_config_map("default").items == []  # fault used up
    server.inject(429, count=1, verb="get", retry_after=2)
    cfg = server.configuration()
    cfg.retries = 0  # see the raw 429 instead of urllib3's own Retry-After handling
    with client.ApiClient(cfg) as raw:
        with pytest.raises(client.ApiException) as e:
            client.CoreV1Api(raw).read_namespace("default")
    assert e.value.status == 429 and e.value.headers["Retry-After"] == "2"
    assert server.counts["get"] == 1 and server.counts["list"] == 2


def test_crds_discovery_access_and_visibility(server, api):
    ext = client.ApiextensionsV1Api(api)
    names = {c.metadata.name for c in ext.list_custom_resource_definition().items}
    assert {"workloads.kueue.x-k8s.io", "rayjobs.ray.io", "podgroups.scheduling.volcano.sh"} <= names
    server.uninstall_crd("rayjobs.ray.io")
    with pytest.raises(client.ApiException) as e:
        ext.read_custom_resource_definition("rayjobs.ray.io")
    assert e.value.status == 404
    with pytest.raises(client.ApiException) as e:
        client.CustomObjectsApi(api).list_namespaced_custom_object("ray.io", "v1", "default", "rayjobs")
    assert e.value.status == 404
    dyn = dynamic.DynamicClient(api)
    wl = dyn.resources.get(api_version="kueue.x-k8s.io/v1beta2", kind="Workload")
    assert wl.namespaced and dyn.resources.get(api_version="v1", kind="Pod")
    authz = client.AuthorizationV1Api(api)
    review = {"spec": {"resourceAttributes": {"verb": "create", "group": "kubeflow.org",
                                              "resource": "mpijobs", "namespace": "default"}}}
    assert authz.create_self_subject_access_review(review).status.allowed
    server.deny("create", "kubeflow.org", "mpijobs")
    assert not authz.create_self_subject_access_review(review).status.allowed
    path = "/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/default/localqueues/q/pendingworkloads"
    with pytest.raises(client.ApiException) as e:  # no provider: not served
        api.call_api(path, "GET", response_type="object", _return_http_data_only=True)
    assert e.value.status == 404
    server.visibility = lambda scope, ns, name: [{"metadata": {"name": "w"}, "positionInLocalQueue": 0}]
    out = api.call_api(path, "GET", response_type="object", _return_http_data_only=True)
    assert out["kind"] == "PendingWorkloadsSummary" and out["items"][0]["positionInLocalQueue"] == 0
    server.set_visibility(False)
    with pytest.raises(client.ApiException) as e:
        api.call_api(path, "GET", response_type="object", _return_http_data_only=True)
    assert e.value.status == 404


def test_many_requests_keep_no_log(server, api):
    core = client.CoreV1Api(api)
    for i in range(300):
        core.create_namespaced_config_map("default", {"metadata": {"name": f"n{i}"}})
    assert server.counts["create"] == 300
    assert not hasattr(server, "requests_log")
