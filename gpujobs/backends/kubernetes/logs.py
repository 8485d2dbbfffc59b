"""All ranks' logs with ``[rank N]`` prefixes; ``follow`` streams every pod at once.

A pod's rank is its node rank: pods sorted with the launcher/master/head first, then by
the index at the end of their name. Memory is bounded: followed lines pass through a
bounded queue (producers block when the reader is slow), and result lines
(``GPUJOBS-RESULT``, large base64) are shown as a short marker.
"""
from __future__ import annotations

import queue
import re
import threading
import time
from typing import Any, Callable, Iterator

from kubernetes.client.exceptions import ApiException

from ...runner import RESULT_MARKER
from .results import job_pods, read_pod_log

_FIRST = ("launcher", "master", "head")
_DONE = object()


def pod_rank_order(pods: list[dict]) -> list[dict]:
    def key(p: dict) -> tuple:
        name = p["metadata"]["name"]
        m = re.search(r"(\d+)$", name)
        return (not any(f"-{r}" in name for r in _FIRST), int(m.group(1)) if m else -1, name)
    return sorted(pods, key=key)


def _show(line: str) -> str:
    if line.startswith(RESULT_MARKER):
        return f"{RESULT_MARKER} {line.split(' ', 2)[1] if ' ' in line else ''} (result sent)"
    return line


def logs(api_client: Any, namespace: str, name: str, rank: int | None = None, follow: bool = False,
         is_done: Callable[[], bool] | None = None, max_buffered_lines: int = 1000) -> Iterator[str]:
    """Lines ``[rank N] text\\n`` of the job's pods (only ``rank`` when given)."""
    if not follow:
        for r, pod in enumerate(pod_rank_order(job_pods(api_client, namespace, name))):
            if rank is not None and r != rank:
                continue
            for line in read_pod_log(api_client, namespace, pod["metadata"]["name"]).splitlines():
                yield f"[rank {r}] {_show(line)}\n"
        return
    q: queue.Queue = queue.Queue(maxsize=max_buffered_lines)
    started: set[str] = set()
    threads: list[threading.Thread] = []
    stop = threading.Event()

    def stream(pod: str, r: int) -> None:
        try:
            resp = api_client.call_api(f"/api/v1/namespaces/{namespace}/pods/{pod}/log", "GET",
                                       query_params=[("follow", "true")], auth_settings=["BearerToken"],
                                       _return_http_data_only=True, _preload_content=False)
            buf = b""
            for chunk in resp.stream(4096):
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    q.put(f"[rank {r}] {_show(line.decode('utf-8', 'replace'))}\n")
                if stop.is_set():
                    break
            if buf:
                q.put(f"[rank {r}] {_show(buf.decode('utf-8', 'replace'))}\n")
        except (ApiException, OSError, ValueError):
            started.discard(pod)  # not started yet (400) or dropped: try again later
        finally:
            q.put(_DONE)

    active = 0
    try:
        while True:
            pods = pod_rank_order(job_pods(api_client, namespace, name))
            for r, pod in enumerate(pods):
                pname = pod["metadata"]["name"]
                if (rank is not None and r != rank) or pname in started:
                    continue
                if (pod.get("status") or {}).get("phase", "Pending") == "Pending":
                    continue
                started.add(pname)
                t = threading.Thread(target=stream, args=(pname, r), daemon=True)
                threads.append(t)
                t.start()
                active += 1
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                try:
                    item = q.get(timeout=0.1)
                except queue.Empty:
                    continue
                if item is _DONE:
                    active -= 1
                    continue
                yield item
            done = is_done() if is_done else True
            if done and active == 0:
                while not q.empty():
                    item = q.get_nowait()
                    if item is not _DONE:
                        yield item
                return
    finally:
        stop.set()
