"""Fixtures for the bad-input catalogue: a private GPUJOBS_HOME (root conftest), a fake
apiserver seeded with one Kueue queue, and the "nothing was created" check."""
from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest

NS = "ml"


def seed(store) -> None:
    api = "kueue.x-k8s.io/v1beta2"
    store.create({"apiVersion": api, "kind": "ResourceFlavor", "metadata": {"name": "default-flavor"}})
    store.create({"apiVersion": api, "kind": "ClusterQueue", "metadata": {"name": "cq"},
                  "spec": {"namespaceSelector": {}, "resourceGroups": [{
                      "coveredResources": ["cpu", "nvidia.com/gpu"],
                      "flavors": [{"name": "default-flavor", "resources": [
                          {"name": "cpu", "nominalQuota": "64"},
                          {"name": "nvidia.com/gpu", "nominalQuota": "2"}]}]}]}})
    store.create({"apiVersion": api, "kind": "LocalQueue", "metadata": {"name": "q", "namespace": NS},
                  "spec": {"clusterQueue": "cq"}})
    store.create({"apiVersion": api, "kind": "WorkloadPriorityClass", "metadata": {"name": "high"},
                  "value": 1000})


@pytest.fixture(scope="module")
def apiserver():
    """One fake apiserver for the module (only Kueue and Kubeflow training CRDs installed)."""
    from gpujobs_sim.apiserver import FakeApiServer
    s = FakeApiServer(crds=["kueue.x-k8s.io", "kubeflow.org"]).start()
    seed(s.store)
    yield s
    s.stop()


def k8s_objects(server) -> list[tuple[str, str]]:
    """Every namespaced object in the fake cluster except the seeded LocalQueue."""
    return sorted((res.kind, obj["metadata"]["name"]) for res, obj in server.store.all_objects()
                  if obj["metadata"].get("namespace") and res.kind != "LocalQueue")


def job_processes(home: Path) -> list[int]:
    """Live processes of any job started under ``home``: by environment (GPUJOBS_JOB_ID +
    GPUJOBS_HOME) and, because ranks forked by the agent's zygote keep the zygote's
    /proc/<pid>/environ, every child of this home's zygote (the agent's pid list)."""
    found = []
    try:
        from gpujobs.backends.local import agent_pids
        zygote = agent_pids(home).get("zygote")
        if zygote:
            found += [c.pid for c in psutil.Process(zygote).children(recursive=True)]
    except (ImportError, psutil.Error):
        pass
    for p in psutil.process_iter():
        try:
            if p.pid == os.getpid() or p.status() == psutil.STATUS_ZOMBIE:
                continue
            env = p.environ()
            if env.get("GPUJOBS_JOB_ID") and env.get("GPUJOBS_HOME") == str(home):
                found.append(p.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def state_entries(home: Path) -> list[str]:
    """Job state under GPUJOBS_HOME: job dirs, status rows, k8s keys and records."""
    out = []
    for sub in ("jobs", "k8s-keys", "k8s-jobs"):
        root = home / sub
        if root.exists():
            out += [str(p.relative_to(home)) for p in root.rglob("*") if p.is_file()]
    db = home / "state.db"
    if db.exists():  # the local agent's job rows
        from gpujobs.backends.local.store import Store
        store = Store(db, readonly=True)
        try:
            out += [f"state.db row {row[0]}" for row in store.all()]
        finally:
            store.close()
    return out
