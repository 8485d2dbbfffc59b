"""The fake apiserver's streaming responses: watches (chunked JSON lines, resourceVersion
resume, bookmarks, 410 Gone, injected drops) and pod logs (``follow``).

A mixin of the request handler in :mod:`gpujobs_sim.apiserver`.
"""
from __future__ import annotations

import json
import queue
import socket
import time
from typing import TYPE_CHECKING, Any, Callable

from .selectors import LabelSelector
from .store import ApiError, Resource, Watcher

if TYPE_CHECKING:
    from .apiserver import Fault, FakeApiServer

__all__ = ["StreamingHandler", "TERMINAL_POD_PHASES", "hard_close"]

TERMINAL_POD_PHASES = ("Succeeded", "Failed")


def hard_close(sock: socket.socket) -> None:
    """Close a socket now (no orderly shutdown of the HTTP exchange): a dropped connection."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class StreamingHandler:
    """Watch and pod-log streams (``api``, ``wfile``, ``_out`` come from the handler)."""
    api: "FakeApiServer"
    wfile: Any
    connection: socket.socket
    close_connection: bool
    _version: str | None
    send_response: Callable[..., None]
    send_header: Callable[[str, str], None]
    end_headers: Callable[[], None]
    _out: Callable[[dict, Resource], dict]

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _watch(self, res: Resource, ns: str | None, q: dict, fault: "Fault | None") -> None:
        api = self.api
        rv_text = q.get("resourceVersion") or ""
        since = None if rv_text in ("", "0") else int(rv_text)
        timeout = float(q.get("timeoutSeconds") or 1800)
        bookmarks = q.get("allowWatchBookmarks", "").lower() in ("true", "1")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if fault is not None and fault.kind == "gone":
            return self._end_watch_gone(f"too old resource version: {rv_text} (injected)")
        events: queue.Queue = queue.Queue()
        w = Watcher(res, ns, LabelSelector(q.get("labelSelector")), LabelSelector(q.get("fieldSelector")),
                    events.put)
        try:
            backlog = api.store.watch(w, since)
        except ApiError as err:
            return self._end_watch_gone(err.message)
        for ev in backlog:
            events.put(ev)
        deadline = time.monotonic() + timeout
        epoch, sent, last_sent = api._drop_epoch, 0, time.monotonic()
        drop_after = fault.drop_after if fault is not None and fault.kind == "drop" else None
        try:
            while not api._stopping.is_set():
                if api._drop_epoch != epoch or (drop_after is not None and sent >= drop_after):
                    self.close_connection = True
                    hard_close(self.connection)  # mid-stream drop: no terminating chunk
                    return
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    ev = events.get(timeout=min(0.1, left))
                except queue.Empty:
                    if bookmarks and time.monotonic() - last_sent > api.bookmark_interval:
                        self._chunk(json.dumps({"type": "BOOKMARK", "object": {
                            "kind": res.kind, "apiVersion": res.api_version(self._version),
                            "metadata": {"resourceVersion": str(api.store.resource_version)}}}).encode()
                            + b"\n")
                        last_sent = time.monotonic()
                    continue
                ev.obj["metadata"]["resourceVersion"] = str(ev.rv)
                self._chunk(json.dumps({"type": ev.type, "object": self._out(ev.obj, res)},
                                       separators=(",", ":")).encode() + b"\n")
                sent += 1
                last_sent = time.monotonic()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            self.close_connection = True
        finally:
            api.store.unwatch(w)

    def _end_watch_gone(self, message: str) -> None:
        status = ApiError(410, "Expired", message).status()
        self._chunk(json.dumps({"type": "ERROR", "object": status}).encode() + b"\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    # ------------------------------------------------------------ pod logs
    def _logs(self, ns: str, name: str, q: dict) -> None:
        api = self.api
        pod = api.store.get_res(api.store.resource("", "pods"), name, ns)
        phase = (pod.get("status") or {}).get("phase", "Pending")
        names = [c.get("name", "main") for c in (pod.get("spec", {}).get("containers") or [{}])]
        if not q.get("container") and len(names) > 1:
            # the API server's answer to an unqualified pods/log of a pod with several containers
            # (e.g. an injected istio-proxy sidecar): 400, not the first container's log
            raise ApiError(400, "BadRequest", f"a container name must be specified for pod {name}, "
                           f"choose one of: [{' '.join(names)}]")
        container = q.get("container") or names[0]
        if container not in names:
            raise ApiError(400, "BadRequest", f"container {container} is not valid for pod {name}")
        if phase == "Pending":
            raise ApiError(400, "BadRequest", f'container "{container}" in pod "{name}" is waiting to '
                           "start: ContainerCreating")
        if q.get("previous", "").lower() in ("true", "1"):
            prev = api.logs.previous(ns, name)
            if prev is None:  # the kubelet's answer when the container never restarted
                raise ApiError(400, "BadRequest", f'previous terminated container "{container}" in pod '
                               f'"{name}" not found')
            data = prev
        else:
            data, offset = api.logs.read(ns, name)
            if q.get("timestamps", "").lower() in ("true", "1") and q.get("follow", "").lower() not in ("true", "1"):
                data = api.logs.timestamped(ns, name)  # (a followed read is served without them)
        if q.get("tailLines"):
            n = int(q["tailLines"])
            data = b"".join(data.splitlines(keepends=True)[-n:]) if n else b""
        if q.get("follow", "").lower() not in ("true", "1") or q.get("previous", "").lower() in ("true", "1"):
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            if data:
                self._chunk(data)
            while not api._stopping.is_set():
                api.logs.wait(0.1)
                more, offset = api.logs.read(ns, name, offset)
                if more:
                    self._chunk(more)
                    continue
                cur = api.store.get("v1", "Pod", name, ns)
                if cur is None or (cur.get("status") or {}).get("phase") in TERMINAL_POD_PHASES:
                    more, offset = api.logs.read(ns, name, offset)
                    if more:
                        self._chunk(more)
                    break
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            self.close_connection = True
