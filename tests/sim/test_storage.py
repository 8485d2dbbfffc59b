"""The simulator's StorageClass / PersistentVolumeClaim rules (gpujobs_sim/storage.py, upstream
sources there): the default class at create (dry runs included), binding, pods waiting."""
from __future__ import annotations

import pytest

from gpujobs_sim.store import Store
from gpujobs_sim import storage

DEFAULT = "storageclass.kubernetes.io/is-default-class"
BETA = "storageclass.beta.kubernetes.io/is-default-class"


@pytest.fixture
def server():
    from gpujobs_sim.apiserver import FakeApiServer
    return FakeApiServer()


def _class(store, name, ann=None, mode=None, created="2026-01-01T00:00:00Z"):
    obj = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "provisioner": "x",
           "metadata": {"name": name, "annotations": ann or {}}}
    if mode:
        obj["volumeBindingMode"] = mode
    store.create(obj)
    store.mutate("storage.k8s.io/v1", "StorageClass", name, None,
                 lambda o: o["metadata"].__setitem__("creationTimestamp", created))


def _claim(store, name, **spec):
    res = store.resolve("v1", "PersistentVolumeClaim")
    return store.create_res(res, {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                  "metadata": {"name": name}, "spec": {"accessModes": ["ReadWriteOnce"], **spec}},
                            "default")


def test_the_newest_default_class_is_filled_in_and_an_explicit_one_kept(server):
    st: Store = server.store
    assert _claim(st, "none")["spec"].get("storageClassName") is None  # no default: left unset
    _class(st, "old", {DEFAULT: "true"}, created="2026-01-01T00:00:00Z")
    _class(st, "new", {BETA: "true"}, created="2026-02-01T00:00:00Z")
    _class(st, "plain", {DEFAULT: "false"}, created="2026-03-01T00:00:00Z")
    assert _claim(st, "a")["spec"]["storageClassName"] == "new"
    assert _claim(st, "b", storageClassName="plain")["spec"]["storageClassName"] == "plain"
    assert _claim(st, "c", storageClassName="")["spec"]["storageClassName"] == ""  # "" is no class


def test_a_dry_run_create_is_defaulted_and_not_stored(server):
    st = server.store
    _class(st, "std", {DEFAULT: "true"})
    res = st.resolve("v1", "PersistentVolumeClaim")
    out = st.create_res(res, {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "d"},
                              "spec": {}}, "default", dry_run=True)
    assert out["spec"]["storageClassName"] == "std"
    assert st.get("v1", "PersistentVolumeClaim", "d", "default") is None


def test_binding_immediate_at_once_wait_for_first_consumer_with_a_pod_and_no_class_never(server):
    st = server.store
    _class(st, "now")
    _class(st, "later", mode="WaitForFirstConsumer")
    for name, cls in (("a", "now"), ("b", "later"), ("c", "missing")):
        _claim(st, name, storageClassName=cls)
    get = lambda n: st.get("v1", "PersistentVolumeClaim", n, "default")  # noqa: E731
    assert [storage.bind(st, get(n), consumer=False) for n in "abc"] == [True, False, False]
    assert get("a")["status"]["phase"] == "Bound" and get("a")["spec"]["volumeName"].startswith("pvc-")
    assert storage.bind(st, get("b"), consumer=True) and get("b")["status"]["phase"] == "Bound"
    assert not storage.bind(st, get("c"), consumer=True)
