"""Results and exceptions from the pods' logs: ``GPUJOBS-RESULT <rank> <base64>`` lines.

Reading them needs only ``pods/log`` permission. The sealed envelopes are returned as
bytes; the Job handle verifies each with the job's HMAC key (gpujobs.payload.open_envelope)
*before* unpickling, so a forged or altered line is never unpickled.
"""
from __future__ import annotations

import base64
import binascii
from typing import Any, Iterable

from kubernetes.client.exceptions import ApiException

from ....rank.wire import RESULT_MARKER
from ..naming import LABEL_JOB as JOB_LABEL
from ..retry import retrying


def parse_result_lines(lines: Iterable[str]) -> dict[int, bytes]:
    """{rank: sealed envelope} from log lines (the last line per rank wins)."""
    out: dict[int, bytes] = {}
    for line in lines:
        line = line.strip()
        if not line.startswith(RESULT_MARKER + " "):
            continue
        parts = line.split(" ", 2)
        if len(parts) != 3:
            continue
        try:
            out[int(parts[1])] = base64.b64decode(parts[2], validate=True)
        except (ValueError, binascii.Error):
            continue
    return out


def job_pods(api_client: Any, namespace: str, name: str) -> list[dict]:
    path = f"/api/v1/namespaces/{namespace}/pods"
    data = retrying(lambda: api_client.call_api(
        path, "GET", query_params=[("labelSelector", f"{JOB_LABEL}={name}")],
        response_type="object", auth_settings=["BearerToken"], _return_http_data_only=True))
    return data.get("items") or []


# gpujobs' own container in each pod it renders (each kind's render, kinds/); another
# container (an injected sidecar such as istio-proxy) is never the job's
OUR_CONTAINERS = ("node", "pytorch", "launcher", "worker", "master", "ray-head", "ray-worker",
                  "ray-job-submitter")


def main_container(pod: dict | str) -> str | None:
    """The container whose log is the job's: ours by name, else the first (None: unknown)."""
    if not isinstance(pod, dict):
        return None
    names = [c.get("name") for c in ((pod.get("spec") or {}).get("containers") or [])]
    return next((n for n in names if n in OUR_CONTAINERS), names[0] if names else None)


def restarted(pod: dict) -> bool:
    """Whether gpujobs' container in ``pod`` was restarted in place (restartCount > 0): its last
    instance's log, often the one with the traceback, is then only under ``previous=true``."""
    name = main_container(pod)
    return any(cs.get("name") == name and int(cs.get("restartCount") or 0) > 0
               for cs in (pod.get("status") or {}).get("containerStatuses") or [])


def read_pod_log(api_client: Any, namespace: str, pod: str | dict, previous: bool = False) -> str:
    """A pod's whole log ('' when it has not started or is gone). Given the pod object, the
    request names its container: with a sidecar (Istio) an unqualified pods/log request is 400.
    ``previous``: the log of the container's last terminated instance (after an in-place restart)."""
    name = pod["metadata"]["name"] if isinstance(pod, dict) else pod
    path = f"/api/v1/namespaces/{namespace}/pods/{name}/log"
    container = main_container(pod)
    query = ([("container", container)] if container else []) + ([("previous", "true")] if previous else [])
    try:
        resp = retrying(lambda: api_client.call_api(
            path, "GET", query_params=query, auth_settings=["BearerToken"], _return_http_data_only=True,
            _preload_content=False, _request_timeout=60))
        return resp.data.decode("utf-8", "replace")
    except ApiException as exc:
        if exc.status in (400, 404):
            return ""
        raise


def termination_messages(pod: dict) -> list[str]:
    """The containers' termination messages in the pod's status (current and last state)."""
    out = []
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        for st in (cs.get("state") or {}, cs.get("lastState") or {}):
            msg = (st.get("terminated") or {}).get("message")
            if msg:
                out.append(msg)
    return out


def outcomes(api_client: Any, namespace: str, name: str) -> dict[int, bytes]:
    """Sealed outcome envelopes by rank, from every pod of the job: its log, and the termination
    message in its status (small results, 4096 bytes at most: gpujobs.rank.runner), which outlives the
    log (rotation, a node's logs lost, a sidecar answering 400)."""
    found: dict[int, bytes] = {}
    for pod in job_pods(api_client, namespace, name):
        for msg in termination_messages(pod):
            if RESULT_MARKER in msg:
                found.update(parse_result_lines(msg.splitlines()))
        text = read_pod_log(api_client, namespace, pod)
        if restarted(pod):  # the earlier instance's outcome, unless the current one has its own
            text = read_pod_log(api_client, namespace, pod, previous=True) + "\n" + text
        if RESULT_MARKER in text:
            found.update(parse_result_lines(text.splitlines()))
    return found
