"""``job.stacks()`` on Kubernetes, without exec: the request goes in through what the pods
already read, the answer comes out through the log channel, authenticated like results.

1. A fresh nonce is written into each running pod's ``gpujobs.dev/stack-request``
   annotation (a merge patch: RBAC ``patch`` on pods, see docs/rbac.yaml).
2. The kubelet projects the annotation into ``/opt/gpujobs/control/stack-request``
   (a downwardAPI volume); each rank's runner watches that file and, on a new nonce,
   prints ``GPUJOBS-STACKS <rank> <nonce> <base64 sealed {nonce, rank, stacks}>``.
3. The client reads the pods' log tails for lines with its nonce and opens each envelope
   with the job's key (HMAC checked before unpickling); a line that fails is dropped.

A real kubelet refreshes downwardAPI files on its sync loop (up to about a minute, by
default); the simulated kubelet does it on the pod's change.
"""
from __future__ import annotations

import base64
import binascii
import secrets
import time
from typing import Any

from ....errors import JobStateError, ResultAuthError
from ....payload import open_envelope
from ....runner import STACKS_MARKER
from .. import naming
from ..cluster import Cluster
from ..render.payload_objects import ANN_STACK_REQUEST
from ..status.results import job_pods, main_container

TAIL_LINES = 400


def request(api: Any, namespace: str, pods: list[dict], nonce: str) -> list[str]:
    """Patch the nonce into every running pod; the names of the pods asked."""
    asked = []
    for pod in pods:
        if (pod.get("status") or {}).get("phase") != "Running":
            continue
        name = pod["metadata"]["name"]
        api.call_api(f"/api/v1/namespaces/{namespace}/pods/{name}", "PATCH",
                     header_params={"Content-Type": "application/merge-patch+json"},
                     body={"metadata": {"annotations": {ANN_STACK_REQUEST: nonce}}},
                     auth_settings=["BearerToken"], _return_http_data_only=True,
                     response_type="object")
        asked.append(name)
    return asked


def answers(lines: list[str], nonce: str, key: bytes) -> dict[int, str]:
    """{rank: stacks} of the authenticated answer lines carrying ``nonce``."""
    out: dict[int, str] = {}
    for line in lines:
        i = line.find(STACKS_MARKER + " ")
        if i < 0:
            continue
        parts = line[i:].strip().split(" ", 3)
        if len(parts) != 4 or parts[2] != nonce:
            continue
        try:
            doc = open_envelope(base64.b64decode(parts[3], validate=True), key)
        except (ValueError, binascii.Error, ResultAuthError):
            continue  # forged, altered or cut: never trusted
        if isinstance(doc, dict) and doc.get("nonce") == nonce and isinstance(doc.get("stacks"), str):
            out[int(doc["rank"])] = doc["stacks"]
    return out


def _tail(api: Any, namespace: str, pod: str, container: str | None = None) -> list[str]:
    """The pod's log tail; the request names gpujobs' container (with a sidecar, e.g. Istio's, an
    unqualified pods/log request is answered 400)."""
    query = [("tailLines", str(TAIL_LINES))] + ([("container", container)] if container else [])
    try:
        resp = api.call_api(f"/api/v1/namespaces/{namespace}/pods/{pod}/log", "GET",
                            query_params=query,
                            auth_settings=["BearerToken"], _return_http_data_only=True,
                            _preload_content=False, _request_timeout=30)
        return resp.data.decode("utf-8", "replace").splitlines()
    except Exception:  # noqa: BLE001 - not started, gone, a dropped read: try again
        return []


def stacks(backend: Cluster, job_id: str, rank: int | None = None,
           timeout: float = 10.0) -> dict[int, str]:
    st = backend.status(job_id)
    if st.phase != "running":
        raise JobStateError(f"job {job_id} is {st.phase}: only a running job has stacks "
                            f"(a failed rank's traceback is in job.logs() / job.exception())")
    ns, name = naming.parse_job_id(job_id)
    api = backend.api_client
    key = backend.job_key(job_id)
    nonce = secrets.token_hex(8)
    pods = job_pods(api, ns, name)
    containers = {p["metadata"]["name"]: main_container(p) for p in pods}
    asked = request(api, ns, pods, nonce)
    found: dict[int, str] = {}
    answered: set[str] = set()
    settled_at = None
    deadline = time.monotonic() + timeout
    while asked and time.monotonic() < deadline:
        for pod in asked:
            got = answers(_tail(api, ns, pod, containers.get(pod)), nonce, key)
            if got:
                answered.add(pod)
                if set(got) - set(found):
                    settled_at = time.monotonic()
                found.update(got)
        if rank is not None and rank in found:
            break
        if answered >= set(asked) and settled_at and time.monotonic() - settled_at > 0.5:
            break  # every pod answered, and no more ranks for half a second
        time.sleep(0.2)
    if rank is not None:
        return {rank: found[rank]} if rank in found else {}
    return dict(sorted(found.items()))
