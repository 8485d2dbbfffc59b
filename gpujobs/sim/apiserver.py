"""A small fake kube-apiserver over real HTTP for tests and benchmarks.

The official ``kubernetes`` client (35.x) talks to it unmodified::

    server = FakeApiServer(); server.start()
    api = kubernetes.client.ApiClient(server.configuration())
    ...
    server.stop()

Serves core/v1, batch/v1, every CRD group in :data:`gpujobs.sim.store.CRDS` (installed as
CRD objects, so "is the CRD installed" preflights work; ``uninstall_crd`` removes one),
apiextensions CRDs, SelfSubjectAccessReview (``deny(...)``), discovery, pod ``/log``
(``follow``), and Kueue's visibility API through a provider (``set_visibility``).
Verbs: create (201), get, list (label/field selectors, limit/continue), watch (chunked
JSON lines, resourceVersion, timeoutSeconds, bookmarks, 410 Gone), merge /
strategic-merge / JSON patch, PUT, ``/status``, delete with propagationPolicy.
Faults: :meth:`inject` (429 + Retry-After, 5xx), :meth:`inject_watch_gone`,
:meth:`inject_watch_drop`, :meth:`drop_watches`, :meth:`compact`. Requests are only
counted (``counts``), never logged.
"""
from __future__ import annotations

import base64
import collections
import json
import queue
import re
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from .store import CRD_RESOURCE, CRDS, ApiError, Event, LabelSelector, Resource, Store, Watcher, now_iso

VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
TERMINAL_POD_PHASES = ("Succeeded", "Failed")
VisibilityProvider = Callable[[str, "str | None", str], "list[dict] | None"]
"""(scope 'localqueue'|'clusterqueue', namespace, queue name) -> pending items, or None (404)."""


@dataclass
class Fault:
    verb: str | None  # get, list, watch, create, update, patch, delete, … or None for all
    path: re.Pattern
    count: int
    status: int = 500
    retry_after: float | None = None
    kind: str = "status"  # status | gone | drop
    drop_after: int = 0


class PodLogs:
    """Per-pod log buffers, bounded (the head is dropped past ``limit`` bytes)."""

    def __init__(self, limit: int = 4 << 20):
        self.limit = limit
        self._bufs: dict[tuple[str, str], bytearray] = {}
        self._dropped: dict[tuple[str, str], int] = collections.defaultdict(int)
        self._cond = threading.Condition()

    def append(self, namespace: str, pod: str, text: str | bytes) -> None:
        data = text.encode() if isinstance(text, str) else text
        with self._cond:
            buf = self._bufs.setdefault((namespace, pod), bytearray())
            buf.extend(data)
            if len(buf) > self.limit:
                cut = len(buf) - self.limit
                del buf[:cut]
                self._dropped[(namespace, pod)] += cut
            self._cond.notify_all()

    def read(self, namespace: str, pod: str, offset: int = 0) -> tuple[bytes, int]:
        """Bytes from absolute ``offset`` on, and the new offset."""
        with self._cond:
            buf = self._bufs.get((namespace, pod), bytearray())
            dropped = self._dropped[(namespace, pod)]
            start = max(offset - dropped, 0)
            return bytes(buf[start:]), dropped + len(buf)

    def wait(self, timeout: float) -> None:
        with self._cond:
            self._cond.wait(timeout)

    def forget(self, namespace: str, pod: str) -> None:
        with self._cond:
            self._bufs.pop((namespace, pod), None)
            self._dropped.pop((namespace, pod), None)
            self._cond.notify_all()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


class FakeApiServer:
    """The fake apiserver: a :class:`Store`, an HTTP front end, fault hooks, counters."""

    def __init__(self, crds: bool | list[str] = True, host: str = "127.0.0.1", port: int = 0,
                 history_limit: int = 20000, bookmark_interval: float = 5.0):
        self.store = Store(history_limit=history_limit)
        self.logs = PodLogs()
        self.host, self._port = host, port
        self.bookmark_interval = bookmark_interval
        self.latency_s = 0.0  # added to every request: a network round trip to a real apiserver
        self.counts: collections.Counter = collections.Counter()
        self._faults: list[Fault] = []
        self._fault_lock = threading.Lock()
        self._denied: list[tuple[str, str, str, str | None]] = []
        self.visibility: VisibilityProvider | None = None
        self.visibility_versions: set[str] = {"v1beta2", "v1beta1"}
        self._drop_epoch = 0
        self._stopping = threading.Event()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None
        self._open_socks: set[socket.socket] = set()
        self._socks_lock = threading.Lock()
        self.store.subscribe(self._on_event)
        for res in CRDS:
            if crds is True or (isinstance(crds, list) and (res.crd_name() in crds or res.group in crds)):
                self.install_crd(res)

    # -------------------------------------------------------------- lifecycle
    def start(self) -> "FakeApiServer":
        handler = type("Handler", (_Handler,), {"api": self})
        self._httpd = _Server((self.host, self._port), handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="fake-apiserver", daemon=True)
        self._thread.start()
        return self

    @property
    def port(self) -> int:
        assert self._httpd is not None, "start() the server first"
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def configuration(self):
        """A ``kubernetes.client.Configuration`` pointing at this server."""
        from kubernetes import client
        cfg = client.Configuration()
        cfg.host = self.url
        cfg.verify_ssl = False
        cfg.api_key = {"authorization": "fake-token"}
        cfg.api_key_prefix = {"authorization": "Bearer"}
        return cfg

    def stop(self) -> None:
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            with self._socks_lock:
                for s in list(self._open_socks):
                    _hard_close(s)
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def __enter__(self) -> "FakeApiServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -------------------------------------------------------------- CRDs, RBAC, visibility
    def install_crd(self, res: Resource | dict) -> None:
        """Install a CRD (a :class:`Resource` or a CRD manifest dict, e.g. from shared/crds)."""
        if isinstance(res, Resource):
            res = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                   "metadata": {"name": res.crd_name()},
                   "spec": {"group": res.group, "scope": "Namespaced" if res.namespaced else "Cluster",
                            "names": {"plural": res.plural, "kind": res.kind, "singular": res.kind.lower(),
                                      "listKind": res.kind + "List"},
                            "versions": [{"name": v, "served": True, "storage": i == 0,
                                          "subresources": {"status": {}} if res.status_sub else {}}
                                         for i, v in enumerate(res.versions)]}}
        self.store.create(res)

    def uninstall_crd(self, name: str) -> None:
        """Remove ``<plural>.<group>`` (its objects go with it)."""
        crd = self.store.get("apiextensions.k8s.io/v1", "customresourcedefinitions", name)
        if crd is not None:
            self.store.delete("apiextensions.k8s.io/v1", "customresourcedefinitions", name)
            self.store.unregister(crd["spec"]["group"], crd["spec"]["names"]["plural"])

    def deny(self, verb: str = "*", group: str = "*", resource: str = "*",
             namespace: str | None = None) -> None:
        """Make SelfSubjectAccessReview answer ``allowed: false`` for matching attributes."""
        self._denied.append((verb, group, resource, namespace))

    def allow_all(self) -> None:
        self._denied.clear()

    def allowed(self, attrs: dict) -> bool:
        for verb, group, resource, ns in self._denied:
            if verb in ("*", attrs.get("verb")) and group in ("*", attrs.get("group", "")) and \
                    resource in ("*", attrs.get("resource")) and ns in (None, attrs.get("namespace")):
                return False
        return True

    def set_visibility(self, enabled: bool = True, versions: tuple[str, ...] = ("v1beta2", "v1beta1")) -> None:
        """Serve the visibility API (through ``self.visibility``) at ``versions``, or 404."""
        self.visibility_versions = set(versions) if enabled else set()

    # -------------------------------------------------------------- faults and counters
    def inject(self, status: int = 500, count: int = 1, verb: str | None = None, path: str = "",
               retry_after: float | None = None) -> None:
        """The next ``count`` requests matching verb and path regex answer ``status``."""
        with self._fault_lock:
            self._faults.append(Fault(verb, re.compile(path), count, status, retry_after))

    def inject_watch_gone(self, count: int = 1, path: str = "") -> None:
        """The next ``count`` watches answer an ERROR event with 410 Gone."""
        with self._fault_lock:
            self._faults.append(Fault("watch", re.compile(path), count, 410, kind="gone"))

    def inject_watch_drop(self, after_events: int = 1, count: int = 1, path: str = "") -> None:
        """The next ``count`` watches close abruptly after ``after_events`` events."""
        with self._fault_lock:
            self._faults.append(Fault("watch", re.compile(path), count, kind="drop",
                                      drop_after=after_events))

    def drop_watches(self) -> None:
        """Abruptly close every open watch stream now."""
        self._drop_epoch += 1

    def compact(self) -> int:
        """Forget watch history: resuming from an older resourceVersion gets 410 Gone."""
        return self.store.compact()

    def clear_faults(self) -> None:
        with self._fault_lock:
            self._faults.clear()

    def _take_fault(self, verb: str, path: str) -> Fault | None:
        with self._fault_lock:
            for f in self._faults:
                if f.count > 0 and f.verb in (None, verb) and f.path.search(path):
                    f.count -= 1
                    return f
        return None

    def reset_counts(self) -> None:
        self.counts.clear()

    @property
    def request_count(self) -> int:
        return sum(v for k, v in self.counts.items() if isinstance(k, str))

    def _on_event(self, ev: Event) -> None:
        if ev.type == "DELETED" and ev.res.kind == "Pod" and not ev.res.group:
            md = ev.obj["metadata"]
            self.logs.forget(md.get("namespace", ""), md["name"])


def _hard_close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class _Handler(BaseHTTPRequestHandler):
    api: FakeApiServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server_version = "gpujobs-fake-apiserver/1"

    def log_message(self, *args: Any) -> None:  # no per-request log
        pass

    def setup(self) -> None:
        super().setup()
        with self.api._socks_lock:
            self.api._open_socks.add(self.connection)

    def finish(self) -> None:
        with self.api._socks_lock:
            self.api._open_socks.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    # ------------------------------------------------------------ plumbing
    def _send_json(self, code: int, body: Any, headers: dict | None = None) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _error(self, err: ApiError, headers: dict | None = None) -> None:
        self._send_json(err.code, err.status(), headers)

    def _body(self) -> Any:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        if not raw:
            return None
        ctype = self.headers.get("Content-Type", "")
        if "yaml" in ctype:
            import yaml
            return yaml.safe_load(raw)
        try:
            return json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ApiError(400, "BadRequest", f"invalid JSON body: {exc}") from None

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # ------------------------------------------------------------ routing
    def _dispatch(self, method: str) -> None:
        if self.api.latency_s:
            time.sleep(self.api.latency_s)
        url = urllib.parse.urlsplit(self.path)
        q = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
        parts = [urllib.parse.unquote(p) for p in url.path.strip("/").split("/") if p]
        self._version = None
        try:
            route = self._route(parts)
            verb = self._verb(method, route, q)
            self.api.counts[verb] += 1
            if route and route[0] is not None:
                self.api.counts[(verb, route[0].plural)] += 1
            fault = self.api._take_fault(verb, url.path)
            if fault is not None and fault.kind == "status":
                headers = {"Retry-After": str(int(fault.retry_after or 1))} if fault.status == 429 \
                    or fault.retry_after else {}
                reason = {429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
                          504: "Timeout"}.get(fault.status, "InternalError")
                self._body()
                return self._error(ApiError(fault.status, reason, f"injected fault ({fault.status})",
                                            {"retryAfterSeconds": int(fault.retry_after or 1)}), headers)
            if route is None:
                return self._static(method, parts, q)
            res, ns, name, sub = route
            if verb == "watch":
                return self._watch(res, ns, q, fault)
            if sub == "log":
                return self._logs(ns, name, q)
            self._crud(method, verb, res, ns, name, sub, q)
        except ApiError as err:
            self._error(err)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    @staticmethod
    def _verb(method: str, route: Any, q: dict) -> str:
        if route is None:
            return {"GET": "get", "POST": "create"}.get(method, method.lower())
        name = route[2]
        if method == "GET":
            if name is None:
                return "watch" if q.get("watch", "").lower() in ("true", "1") else "list"
            return "get"
        return {"POST": "create", "PUT": "update", "PATCH": "patch",
                "DELETE": "delete" if name else "deletecollection"}[method]

    def _route(self, parts: list[str]) -> tuple[Resource, str | None, str | None, str | None] | None:
        """(resource, namespace, name, subresource) or None for non-resource paths."""
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis" and parts[1] not in (VISIBILITY_GROUP,
                                                                           "authorization.k8s.io"):
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        if not rest:
            return None
        ns = None
        if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] not in ("status", "finalize"):
            ns, rest = rest[1], rest[2:]
        res = self.api.store.resource(group, rest[0], version)
        if res.plural != rest[0]:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub not in (None, "status", "log"):
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({sub})")
        self._version = version
        return res, ns, name, sub

    # ------------------------------------------------------------ non-resource paths
    def _static(self, method: str, parts: list[str], q: dict) -> None:
        api, store = self.api, self.api.store
        if parts == ["version"]:
            return self._send_json(200, {"major": "1", "minor": "33", "gitVersion": "v1.33.0-gpujobs-sim",
                                         "gitCommit": "0" * 40, "gitTreeState": "clean",
                                         "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24",
                                         "compiler": "gc", "platform": "linux/amd64"})
        if parts == ["api"]:
            return self._send_json(200, {"kind": "APIVersions", "versions": ["v1"],
                                         "serverAddressByClientCIDRs": []})
        groups: dict[str, list[str]] = collections.OrderedDict()
        for r in store.resources():
            if r.group:
                groups.setdefault(r.group, [])
                for v in r.versions:
                    if v not in groups[r.group]:
                        groups[r.group].append(v)
        groups["authorization.k8s.io"] = ["v1"]
        if api.visibility_versions and api.visibility is not None:
            groups[VISIBILITY_GROUP] = sorted(api.visibility_versions, reverse=True)
        if parts == ["apis"]:
            return self._send_json(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                {"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
                 "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]}}
                for g, vs in groups.items()]})
        if parts in (["api", "v1"],) or (len(parts) == 3 and parts[0] == "apis"):
            group, version = ("", "v1") if parts[0] == "api" else (parts[1], parts[2])
            if group not in groups and group:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            resources = []
            for r in store.resources():
                if r.group == group and version in r.versions:
                    resources.append({"name": r.plural, "singularName": r.kind.lower(), "kind": r.kind,
                                      "namespaced": r.namespaced, "verbs": ["create", "delete", "get", "list",
                                                                            "patch", "update", "watch"]})
                    if r.status_sub:
                        resources.append({"name": r.plural + "/status", "kind": r.kind,
                                          "namespaced": r.namespaced, "verbs": ["get", "patch", "update"]})
            return self._send_json(200, {"kind": "APIResourceList", "apiVersion": "v1",
                                         "groupVersion": f"{group}/{version}" if group else version,
                                         "resources": resources})
        if parts[:2] == ["apis", "authorization.k8s.io"] and method == "POST" and \
                parts[-1] in ("selfsubjectaccessreviews", "selfsubjectrulesreviews"):
            body = self._body() or {}
            attrs = (body.get("spec") or {}).get("resourceAttributes") or {}
            allowed = api.allowed(attrs)
            body.setdefault("metadata", {})
            body["status"] = {"allowed": allowed, **({} if allowed else {
                "denied": True, "reason": "denied by the fake apiserver's deny() rules"})}
            return self._send_json(201, body)
        if len(parts) >= 3 and parts[:2] == ["apis", VISIBILITY_GROUP]:
            return self._visibility(parts[2], parts[3:], q)
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

    def _visibility(self, version: str, rest: list[str], q: dict) -> None:
        api = self.api
        if version not in api.visibility_versions or api.visibility is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if len(rest) == 5 and rest[0] == "namespaces" and rest[2] == "localqueues" and \
                rest[4] == "pendingworkloads":
            scope, ns, name = "localqueue", rest[1], rest[3]
        elif len(rest) == 3 and rest[0] == "clusterqueues" and rest[2] == "pendingworkloads":
            scope, ns, name = "clusterqueue", None, rest[1]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        items = api.visibility(scope, ns, name)
        if items is None:
            kind = "localqueues" if scope == "localqueue" else "clusterqueues"
            raise ApiError(404, "NotFound", f'{kind}.kueue.x-k8s.io "{name}" not found',
                           {"name": name, "group": "kueue.x-k8s.io", "kind": kind})
        offset, limit = int(q.get("offset") or 0), int(q.get("limit") or 1000)
        self._send_json(200, {"kind": "PendingWorkloadsSummary",
                              "apiVersion": f"{VISIBILITY_GROUP}/{version}",
                              "metadata": {"creationTimestamp": None},
                              "items": items[offset:offset + min(limit, 100000)]})

    # ------------------------------------------------------------ CRUD
    def _out(self, obj: dict, res: Resource) -> dict:
        if res.group and getattr(self, "_version", None):
            want = f"{res.group}/{self._version}"
            if obj.get("apiVersion") != want:
                obj = dict(obj, apiVersion=want)
        return obj

    def _crud(self, method: str, verb: str, res: Resource, ns: str | None, name: str | None,
              sub: str | None, q: dict) -> None:
        store = self.api.store
        if verb == "list":
            items, rv = store.list_res(res, ns, q.get("labelSelector"), q.get("fieldSelector"))
            items.sort(key=lambda o: (o["metadata"].get("namespace") or "", o["metadata"]["name"]))
            meta: dict[str, Any] = {"resourceVersion": str(rv)}
            start = int(base64.b64decode(q["continue"]).decode()) if q.get("continue") else 0
            limit = int(q.get("limit") or 0)
            if limit and start + limit < len(items):
                meta["continue"] = base64.b64encode(str(start + limit).encode()).decode()
                meta["remainingItemCount"] = len(items) - start - limit
            items = items[start:start + limit] if limit else items[start:]
            return self._send_json(200, {"apiVersion": res.api_version(self._version),
                                         "kind": res.kind + "List", "metadata": meta,
                                         "items": [self._out(o, res) for o in items]})
        if verb == "get":
            return self._send_json(200, self._out(store.get_res(res, name, ns), res))
        if verb == "create":
            body = self._body()
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "the request body must be an object")
            if res.key == ("", "pods") and sub is None and name:
                raise ApiError(405, "MethodNotAllowed", "the server does not allow this method")
            if q.get("dryRun"):
                return self._send_json(201, body)
            obj = store.create_res(res, body, ns)
            return self._send_json(201, self._out(obj, res))
        if verb == "update":
            body = self._body()
            return self._send_json(200, self._out(store.replace_res(res, body, ns, name, sub), res))
        if verb == "patch":
            body = self._body()
            ctype = self.headers.get("Content-Type", "")
            if "json-patch" in ctype:
                kind = "json"
            elif "apply-patch" in ctype:
                try:
                    store.get_res(res, name, ns)
                except ApiError as err:
                    if err.code != 404:
                        raise
                    body.setdefault("metadata", {})["name"] = name
                    return self._send_json(201, self._out(store.create_res(res, body, ns), res))
                kind = "merge"
            else:
                kind = "merge"
            return self._send_json(200, self._out(store.patch_res(res, name, ns, body, kind, sub), res))
        if verb == "delete":
            body = self._body() or {}
            prop = q.get("propagationPolicy") or body.get("propagationPolicy")
            if not prop and body.get("orphanDependents") is True:
                prop = "Orphan"
            obj = store.delete_res(res, name, ns, prop)
            if res.key == CRD_RESOURCE.key:
                store.unregister(obj["spec"]["group"], obj["spec"]["names"]["plural"])
            return self._send_json(200, self._out(obj, res))
        if verb == "deletecollection":
            items, _ = store.list_res(res, ns, q.get("labelSelector"), q.get("fieldSelector"))
            for o in items:
                store.delete_res(res, o["metadata"]["name"], o["metadata"].get("namespace"),
                                 q.get("propagationPolicy"))
            return self._send_json(200, {"kind": "Status", "apiVersion": "v1", "status": "Success",
                                         "metadata": {}})
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported here")

    # ------------------------------------------------------------ watch
    def _watch(self, res: Resource, ns: str | None, q: dict, fault: Fault | None) -> None:
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
                    _hard_close(self.connection)  # mid-stream drop: no terminating chunk
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
        container = q.get("container") or (pod.get("spec", {}).get("containers") or [{}])[0].get("name", "main")
        if phase == "Pending":
            raise ApiError(400, "BadRequest", f'container "{container}" in pod "{name}" is waiting to '
                           "start: ContainerCreating")
        data, offset = api.logs.read(ns, name)
        if q.get("tailLines"):
            n = int(q["tailLines"])
            data = b"".join(data.splitlines(keepends=True)[-n:]) if n else b""
        if q.get("follow", "").lower() not in ("true", "1"):
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


__all__ = ["FakeApiServer", "PodLogs", "Fault", "VISIBILITY_GROUP", "now_iso"]
