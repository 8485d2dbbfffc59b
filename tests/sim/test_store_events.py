"""The store's change log: every change is one resourceVersion and one watch event; a delete
is one DELETED event (as in Kubernetes), whichever path removes the object."""
from __future__ import annotations

import pytest
from kubernetes import client, watch

from gpujobs_sim import FakeApiServer
from gpujobs_sim.store import Store


def cm(name: str, **md) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default", **md}}


@pytest.fixture
def store():
    s = Store()
    events: list = []
    s.subscribe(events.append)
    s.events = events  # type: ignore[attr-defined]
    return s


def changes(store: Store, since: int) -> list[tuple[str, str, int]]:
    """(type, name, rv) of the events after ``since``; checks each carries its own rv."""
    out = []
    for e in store.events:  # type: ignore[attr-defined]
        if e.rv > since:
            assert e.obj["metadata"]["resourceVersion"] == str(e.rv)
            out.append((e.type, e.obj["metadata"]["name"], e.rv))
    return out


def test_plain_delete_is_one_event_one_resource_version(store):
    store.create(cm("a"))
    rv = store.resource_version
    gone = store.delete("v1", "ConfigMap", "a", "default")
    assert changes(store, rv) == [("DELETED", "a", rv + 1)]
    assert store.resource_version == rv + 1 == int(gone["metadata"]["resourceVersion"])


@pytest.mark.parametrize("how", ["patch", "update", "mutate"])
def test_last_finalizer_removed_deletes_with_one_resource_version(store, how):
    store.create(cm("f", finalizers=["x.io/hold"]))
    rv = store.resource_version
    store.delete("v1", "ConfigMap", "f", "default")  # blocked: only marked
    assert changes(store, rv) == [("MODIFIED", "f", rv + 1)]
    marked = store.get("v1", "ConfigMap", "f", "default")
    assert marked["metadata"]["deletionTimestamp"]
    rv = store.resource_version
    if how == "patch":
        store.patch("v1", "ConfigMap", "f", "default", {"metadata": {"finalizers": None}})
    elif how == "update":
        marked["metadata"]["finalizers"] = []
        store.update(marked)
    else:
        store.mutate("v1", "ConfigMap", "f", "default", lambda o: o["metadata"].pop("finalizers"))
    assert changes(store, rv) == [("DELETED", "f", rv + 1)]
    assert store.resource_version == rv + 1
    assert store.get("v1", "ConfigMap", "f", "default") is None


@pytest.mark.parametrize("policy", ["Foreground", "Background", "Orphan"])
def test_cascading_delete_one_resource_version_per_event(store, policy):
    owner = store.create(cm("owner"))
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"]}
    store.create(cm("dep1", ownerReferences=[ref]))
    store.create(cm("dep2", ownerReferences=[ref]))
    rv = store.resource_version
    store.delete("v1", "ConfigMap", "owner", "default", propagation=policy)
    got = changes(store, rv)
    assert [e[2] for e in got] == list(range(rv + 1, rv + 1 + len(got)))  # no gaps, no repeats
    assert store.resource_version == rv + len(got)
    kinds = sorted((t, n) for t, n, _ in got)
    if policy == "Foreground":  # owner marked, dependents go, then the owner
        assert got[0][:2] == ("MODIFIED", "owner") and got[-1][:2] == ("DELETED", "owner")
        assert kinds == [("DELETED", "dep1"), ("DELETED", "dep2"), ("DELETED", "owner"), ("MODIFIED", "owner")]
    elif policy == "Background":
        assert got[0][:2] == ("DELETED", "owner")
        assert kinds == [("DELETED", "dep1"), ("DELETED", "dep2"), ("DELETED", "owner")]
    else:
        assert kinds == [("DELETED", "owner"), ("MODIFIED", "dep1"), ("MODIFIED", "dep2")]


def test_watch_sees_one_deleted_event_at_the_list_resource_version():
    with FakeApiServer() as server, client.ApiClient(server.configuration()) as api:
        core = client.CoreV1Api(api)
        core.create_namespaced_config_map("default", {"metadata": {"name": "w", "finalizers": ["x.io/hold"]}})
        start = core.list_namespaced_config_map("default").metadata.resource_version
        core.delete_namespaced_config_map("w", "default")
        core.patch_namespaced_config_map("w", "default", {"metadata": {"finalizers": None}})
        end = core.list_namespaced_config_map("default").metadata.resource_version
        got = [(e["type"], e["object"].metadata.resource_version) for e in watch.Watch().stream(
            core.list_namespaced_config_map, "default", resource_version=start, timeout_seconds=1)]
        assert [t for t, _ in got] == ["MODIFIED", "DELETED"]
        assert int(got[0][1]) == int(start) + 1 and got[1][1] == end == str(int(start) + 2)
