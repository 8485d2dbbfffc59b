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

from ...runner import RESULT_MARKER
from .naming import LABEL_JOB as JOB_LABEL
from .retry import retrying


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


def read_pod_log(api_client: Any, namespace: str, pod: str) -> str:
    """A pod's whole log ('' when it has not started or is gone)."""
    path = f"/api/v1/namespaces/{namespace}/pods/{pod}/log"
    try:
        resp = retrying(lambda: api_client.call_api(
            path, "GET", auth_settings=["BearerToken"], _return_http_data_only=True,
            _preload_content=False, _request_timeout=60))
        return resp.data.decode("utf-8", "replace")
    except ApiException as exc:
        if exc.status in (400, 404):
            return ""
        raise


def outcomes(api_client: Any, namespace: str, name: str) -> dict[int, bytes]:
    """Sealed outcome envelopes by rank, from every pod of the job."""
    found: dict[int, bytes] = {}
    for pod in job_pods(api_client, namespace, name):
        text = read_pod_log(api_client, namespace, pod["metadata"]["name"])
        if RESULT_MARKER in text:
            found.update(parse_result_lines(text.splitlines()))
    return found
