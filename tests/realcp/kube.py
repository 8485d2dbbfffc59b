"""Helpers of the realcp tests: specs, polling, and reading jobs and Workloads as the admin."""
from __future__ import annotations

import time

import pytest

import gpujobs
from gpujobs.backends.kubernetes.kinds import KINDS
from tests.support import MPI_IMAGE

from .conftest import NS, QUEUE


def double(x):
    return 2 * x


def spec_of(kind: str, gpus: int = 1, priority: str | None = None):
    b = gpujobs.job(double, 21)
    if kind == "MPIJob":
        b = b.mpi(ranks=2, gpus_per_rank=gpus, ranks_per_node=1).image(MPI_IMAGE)
    elif kind == "RayJob":
        b = b.ray(workers=1, gpus_per_worker=gpus)
    elif kind == "AppWrapper":
        b = b.ddp(nodes=2, gpus_per_node=gpus).options(volcano="appwrapper", volcano_queue="vq")
    else:
        b = b.ddp(nodes=2, gpus_per_node=gpus).options(kind=kind)
    b = b.queue(QUEUE)
    if priority:
        b = b.priority(priority)
    return b.spec()


def wait_for(cond, timeout: float = 60.0, what: str = "", interval: float = 0.3):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = cond()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def custom(api):
    from kubernetes import client
    return client.CustomObjectsApi(api)


def job_obj(api, kind: str, name: str) -> dict | None:
    from kubernetes.client.exceptions import ApiException
    i = KINDS[kind]
    try:
        return custom(api).get_namespaced_custom_object(i.group, i.version, NS, i.plural, name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def workloads_owned_by(api, name: str) -> list[dict]:
    """The Workloads in NS whose owner is the job ``name`` (found after the job is gone too: the
    garbage collector deletes them by their ownerReferences a little later)."""
    wls = custom(api).list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", NS, "workloads")["items"]
    return [w for w in wls if any(o.get("name") == name for o in w["metadata"].get("ownerReferences") or [])]


def workload_of(api, kind: str, name: str) -> dict | None:
    obj = job_obj(api, kind, name)
    if obj is None:
        return None
    wls = custom(api).list_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta2", NS, "workloads",
        label_selector=f"kueue.x-k8s.io/job-uid={obj['metadata']['uid']}")["items"]
    return wls[0] if wls else None


def cond(obj: dict | None, ctype: str) -> dict | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == ctype:
            return c
    return None


def is_true(obj, ctype) -> bool:
    c = cond(obj, ctype)
    return bool(c and c["status"] == "True")


def suspended(kind: str, obj: dict) -> bool:
    s = obj["spec"]
    if kind in ("PyTorchJob", "MPIJob"):
        return bool(s.get("runPolicy", {}).get("suspend"))
    return bool(s.get("suspend"))
