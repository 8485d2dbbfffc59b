"""The status hub's informer indexes (Workloads/PodGroups by owner uid, pods by job label)
stay equal to a full scan of the caches through adds, relabels, owner changes, deletes and
410 relists against the fake apiserver, and a flush reads them instead of scanning."""
from __future__ import annotations

import random
import time

import pytest
from kubernetes import client

from gpujobs.backends.kubernetes.status import mapping as status_map
from gpujobs.backends.kubernetes.naming import LABEL_JOB
from gpujobs.backends.kubernetes.status.hub import INDEXERS, PODS, WL, StatusHub
from gpujobs.backends.kubernetes.status.informer import Informer
from gpujobs_sim import FakeApiServer

WL_API = "kueue.x-k8s.io/v1beta2"


@pytest.fixture
def server():
    srv = FakeApiServer().start()
    informers: list[Informer] = []
    yield srv, informers
    for inf in informers:
        inf.stop()
    srv.stop()


def _start(srv, informers, res):
    inf = Informer(client.ApiClient(srv.configuration()), *res, "default", lambda t, o: None,
                   indexers=INDEXERS[res]).start()
    informers.append(inf)
    assert inf.synced.wait(10)
    return inf


def _scan(inf: Informer, index: str, key: str) -> list[str]:
    if index == "job":
        return [n for n, o in inf.cache.items() if (o["metadata"].get("labels") or {}).get(LABEL_JOB) == key]
    return [n for n, o in inf.cache.items() if key in status_map.owner_uids(o)]


def _caught_up(srv, inf: Informer, api: str, kind: str) -> bool:
    want = {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in srv.store.list(api, kind, "default")}
    with inf.lock:
        have = {n: o["metadata"]["resourceVersion"] for n, o in inf.cache.items()}
    return want == have


def _check(srv, inf, api, kind, index, keys):
    deadline = time.monotonic() + 10
    while not _caught_up(srv, inf, api, kind):
        assert time.monotonic() < deadline, "informer did not catch up"
        time.sleep(0.02)
    with inf.lock:
        for key in keys:
            assert [o["metadata"]["name"] for o in inf.indexed(index, key)] == _scan(inf, index, key), key
        indexed = {o["metadata"]["name"] for key in keys for o in inf.indexed(index, key)}
    assert indexed == {n for key in keys for n in _scan(inf, index, key)}


def test_pod_index_follows_relabels_deletes_and_relists(server):
    srv, informers = server
    inf = _start(srv, informers, PODS)
    jobs = ["a", "b", "c"]
    rng = random.Random(7)
    names: list[str] = []
    for step in range(60):
        op = rng.choice(["create", "create", "relabel", "delete", "relist"]) if names else "create"
        if op == "create":
            name = f"p{step}"
            names.append(name)
            srv.store.create({"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": name, "namespace": "default", "labels": {LABEL_JOB: rng.choice(jobs)}}})
        elif op == "relabel":
            new_job = rng.choice(jobs + [None])

            def relabel(o, job=new_job):
                o["metadata"]["labels"] = {LABEL_JOB: job} if job else {"other": "x"}
            srv.store.mutate("v1", "Pod", rng.choice(names), "default", relabel)
        elif op == "delete":
            srv.store.delete("v1", "Pod", names.pop(rng.randrange(len(names))), "default")
        else:
            srv.compact()
            srv.drop_watches()  # resumes from a compacted resourceVersion: 410 -> relist and diff
        if step % 6 == 5:
            _check(srv, inf, "v1", "Pod", "job", jobs)
    _check(srv, inf, "v1", "Pod", "job", jobs)
    assert inf.relists >= 2


def test_workload_owner_index_follows_owner_changes(server):
    srv, informers = server
    inf = _start(srv, informers, WL)

    def wl(name, owner=None, job_uid=None):
        md = {"name": name, "namespace": "default", "labels": {}}
        if owner:
            md["ownerReferences"] = [{"apiVersion": "v1", "kind": "X", "name": owner, "uid": owner}]
        if job_uid:
            md["labels"][status_map.JOB_UID_LABEL] = job_uid
        return {"apiVersion": WL_API, "kind": "Workload", "metadata": md, "spec": {"queueName": "q"}}
    srv.store.create(wl("w1", owner="u1"))
    srv.store.create(wl("w2", job_uid="u2"))
    srv.store.create(wl("w3", owner="u1", job_uid="u3"))  # two keys, one object
    _check(srv, inf, WL_API, "Workload", "owner", ["u1", "u2", "u3"])
    assert [o["metadata"]["name"] for o in inf.indexed("owner", "u1")] == ["w1", "w3"]

    def reown(o):
        o["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "X", "name": "u2", "uid": "u2"}]
    srv.store.mutate(WL_API, "Workload", "w1", "default", reown)
    srv.store.delete(WL_API, "Workload", "w3", "default")
    _check(srv, inf, WL_API, "Workload", "owner", ["u1", "u2", "u3"])
    assert inf.indexed("owner", "u1") == [] and inf.indexed("owner", "u3") == []
    assert sorted(o["metadata"]["name"] for o in inf.indexed("owner", "u2")) == ["w1", "w2"]
    with inf.lock:
        assert set(inf._index["owner"]) == {"u2"}  # emptied keys do not linger


def test_flush_of_many_jobs_reads_the_indexes(capsys):
    """1,000 jobs, 1,000 Workloads, 4,000 pods in the caches: every job's status is right and one
    flush of all of them is timed (printed, not asserted)."""
    n = 1000
    hub = StatusHub(None, "default", flush_interval=0.0)
    jobs, wls, pods = {}, {}, {}
    for i in range(n):
        name, uid = f"job-{i:04d}", f"uid-{i:04d}"
        jobs[name] = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {
            "name": name, "uid": uid, "resourceVersion": "1", "labels": {LABEL_JOB: name}},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 3}}},
            "status": {"conditions": [{"type": "Created", "status": "True"}]}}
        wls[f"wl-{name}"] = {"metadata": {"name": f"wl-{name}", "resourceVersion": "1",
                                          "ownerReferences": [{"uid": uid}]},
                             "status": {"conditions": [{"type": "QuotaReserved", "status": "True"},
                                                       {"type": "Admitted", "status": "True"}]}}
        for r in range(4):  # odd jobs: the whole gang ready; even ones: half
            phase = "Running" if i % 2 or r < 2 else "Pending"
            pods[f"{name}-{r}"] = {"metadata": {"name": f"{name}-{r}", "resourceVersion": "1",
                                                "labels": {LABEL_JOB: name}}, "status": {"phase": phase}}
    for res, cb, items in ((("kubeflow.org", "v1", "pytorchjobs"), hub._on_job, jobs),
                           (WL, hub._on_workload, wls), (PODS, hub._on_pod, pods)):
        inf = Informer(None, *res, "default", cb, lock=hub._lock, indexers=INDEXERS.get(res))
        hub._informers[res] = inf
        with hub._lock:
            inf._apply_list(items)
    assert len(hub._dirty) == n
    hub._wake.set()
    t0 = time.perf_counter()
    hub._flush_once()
    took = time.perf_counter() - t0
    with capsys.disabled():
        print(f"\nstatus hub flush of {n} jobs / {len(pods)} pods / {len(wls)} workloads: {took * 1000:.1f} ms")
    sts = {s.name: s for s in hub.all()}
    assert len(sts) == n
    assert (sts["job-0001"].phase, sts["job-0001"].gang_ready, sts["job-0001"].gang_size) == ("running", 4, 4)
    assert (sts["job-0000"].phase, sts["job-0000"].gang_ready) == ("starting", 2)
    assert sts["job-0000"].extra["workload"] == "wl-job-0000"


def test_an_ended_job_stays_ended_for_subscribers():
    """[k8s-parity] 7: `--wait` printed failed -> running -> failed when a late view of the
    job's objects computed 'running' after 'failed'; a new job of the same name (another uid) is
    a new job."""
    from gpujobs.status import JobStatus
    hub = StatusHub(None, "default", flush_interval=0)
    views = iter([("failed", "u1"), ("running", "u1"), ("failed", "u1"), ("queued", "u2")])

    def compute(name):
        phase, uid = next(views)
        return JobStatus("default/j", phase, extra={"uid": uid})
    hub.compute = compute  # type: ignore[method-assign]
    seen: list[str] = []
    hub._subs["j"] = [lambda st: seen.append(st.phase)]
    for _ in range(4):
        hub._dirty.add("j")
        hub._wake.set()
        hub._flush_once()
    assert seen == ["failed", "queued"]
