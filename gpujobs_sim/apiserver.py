"""A small fake kube-apiserver over real HTTP for tests and benchmarks.

The official ``kubernetes`` client (35.x) talks to it unmodified::

    server = FakeApiServer(); server.start()
    api = kubernetes.client.ApiClient(server.configuration())
    ...
    server.stop()

Serves core/v1, batch/v1, every CRD group in :data:`gpujobs_sim.store.CRDS` (installed as
CRD objects, so "is the CRD installed" preflights work; ``uninstall_crd`` removes one),
apiextensions CRDs, SelfSubjectAccessReview (``deny(...)``), discovery, pod ``/log``
(``follow``), and Kueue's visibility API through a provider (``set_visibility``).
Verbs: create (201), get, list (label/field selectors, limit/continue), watch (chunked
JSON lines, resourceVersion, timeoutSeconds, bookmarks, 410 Gone), merge /
strategic-merge / JSON patch, PUT, ``/status``, delete with propagationPolicy.
Faults: :meth:`inject` (429 + Retry-After, 5xx), :meth:`inject_watch_gone`,
:meth:`inject_watch_drop`, :meth:`drop_watches`, :meth:`compact`. Requests are only
counted (``counts``), never logged; a client dropping its connection is not reported.

This module holds the server, routing and CRUD; watch and log streams are in
:mod:`gpujobs_sim.streams`, discovery/access-review/visibility in :mod:`gpujobs_sim.nonresource`,
log buffers in :mod:`gpujobs_sim.podlogs`.
"""
from __future__ import annotations

import base64
import copy
import collections
import json
import re
import socket
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .nonresource import VISIBILITY_GROUP, NonResourceHandler, VisibilityProvider
from . import storage
from .podlogs import PodLogs
from .store import CRD_RESOURCE, CRDS, ApiError, Event, Resource, Store, now_iso
from .streams import StreamingHandler, hard_close

CLIENT_GONE = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)
"""What a client dropping its (keep-alive) connection raises on the server side."""


@dataclass
class Fault:
    verb: str | None  # get, list, watch, create, update, patch, delete, … or None for all
    path: re.Pattern
    count: int
    status: int = 500
    retry_after: float | None = None
    kind: str = "status"  # status | gone | drop
    drop_after: int = 0


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that drops its connection is no error; anything else is still reported."""
        if isinstance(sys.exc_info()[1], CLIENT_GONE):
            return
        super().handle_error(request, client_address)


def _cel_admission(res: Resource, new: dict, old: dict | None) -> None:
    """Refuse a write that breaks a CEL rule of its CRD: 422 Invalid, one cause per rule, as the
    API server answers (``<Kind>.<group> "<name>" is invalid: <field>: Invalid value: ...``)."""
    if not res.group or "apiVersion" not in new:
        return
    from . import cel
    violations = cel.validate(new, old)
    if violations:
        raise ApiError(422, "Invalid", cel.invalid_message(new, violations, res.group), {
            "name": (new.get("metadata") or {}).get("name", ""), "group": res.group, "kind": res.kind,
            "causes": [{"reason": v.reason, "message": str(v).split(": ", 1)[1], "field": v.field}
                       for v in violations]})


class FakeApiServer:
    """The fake apiserver: a :class:`Store`, an HTTP front end, fault hooks, counters."""

    def __init__(self, crds: bool | list[str] = True, host: str = "127.0.0.1", port: int = 0,
                 history_limit: int = 20000, bookmark_interval: float = 5.0, cel: bool = True):
        """``cel``: enforce the CRDs' CEL rules (x-kubernetes-validations, from the CRD folder) on
        every create and update, transition rules (oldSelf) on update, as a real API server does."""
        self.store = Store(history_limit=history_limit)
        self.pruned: list[tuple[str, str, list[str]]] = []  # (kind, name, paths) the schema dropped

        def admit(res: Resource, new: dict, old: dict | None) -> None:
            self._prune(res, new)
            if old is None and res.key == ("", "persistentvolumeclaims"):
                storage.admit_claim(self.store, new)
            if cel:
                _cel_admission(res, new, old)
        self.store.admission = admit
        self.logs = PodLogs()
        self.host, self._port = host, port
        self.bookmark_interval = bookmark_interval
        self.latency_s = 0.0  # added to every request: a network round trip to a real apiserver
        self.counts: collections.Counter = collections.Counter()
        # every resource request as an authorizer sees it: (verb, apiGroup, resource[/subresource],
        # namespace or None), what an RBAC rule must allow (kubernetes.io/docs/reference/
        # access-authn-authz/authorization/#determine-the-request-verb)
        self.requests: list[tuple[str, str, str, str | None]] = []
        self._faults: list[Fault] = []
        self._fault_lock = threading.Lock()
        self._denied: list[tuple[str, str, str, str | None]] = []
        self.visibility: VisibilityProvider | None = None
        self.visibility_versions: set[str] = {"v1beta2"}  # Kueue v0.20 serves only v1beta2 (kueue #14558)
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
                    hard_close(s)
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

    def _prune(self, res: Resource, new: dict) -> None:
        """A custom resource written under a CRD installed with its schema (install_crd of an
        upstream manifest) loses the fields that schema does not declare, as on a real API server
        (structural pruning). CRDs installed from a bare :class:`Resource` have no schema: nothing
        is pruned. Called with the store's lock held."""
        if not res.group or res.key == CRD_RESOURCE.key:
            return
        crd = self.store._objs.get(CRD_RESOURCE.key, {}).get((None, res.crd_name()))
        version = (new.get("apiVersion") or "").rpartition("/")[2]
        schema = next(((v.get("schema") or {}).get("openAPIV3Schema") for v in ((crd or {}).get("spec") or {})
                       .get("versions") or [] if v.get("name") == version), None)
        if schema:
            from .crds import prune
            paths = prune(new, schema)
            if paths:
                self.pruned.append((res.kind, (new.get("metadata") or {}).get("name", ""), paths))

    def install_crd_manifest(self, manifest: dict) -> None:
        """Install an upstream CRD manifest (with its schema: writes are pruned by it), replacing an
        installed CRD of the same name; its objects go with the old one."""
        name = manifest["metadata"]["name"]
        self.uninstall_crd(name)
        self.install_crd(copy.deepcopy(manifest))

    def uninstall_crd(self, name: str) -> None:
        """Remove ``<plural>.<group>`` (its objects go with it)."""
        crd = self.store.get("apiextensions.k8s.io/v1", "customresourcedefinitions", name)
        if crd is not None:
            self.store.delete("apiextensions.k8s.io/v1", "customresourcedefinitions", name)
            self.store.unregister(crd["spec"]["group"], crd["spec"]["names"]["plural"])

    def deny(self, verb: str = "*", group: str = "*", resource: str = "*",
             namespace: str | None = None, enforce: bool = False) -> None:
        """Make SelfSubjectAccessReview answer ``allowed: false`` for matching attributes.
        ``namespace``: None matches every request, ``""`` only cluster-scoped ones (cluster-scoped
        resources and all-namespaces lists), a name that namespace. ``enforce``: matching requests
        themselves are refused with 403 Forbidden, as RBAC does (resource ``plural`` or
        ``plural/subresource``, e.g. ``localqueues/pendingworkloads`` of the visibility API)."""
        self._denied.append((verb, group, resource, namespace, enforce))

    def allow_all(self) -> None:
        self._denied.clear()

    def allowed(self, attrs: dict, enforced_only: bool = False) -> bool:
        for verb, group, resource, ns, enforce in self._denied:
            if enforced_only and not enforce:
                continue
            want_ns = attrs.get("namespace") or ""
            if verb in ("*", attrs.get("verb")) and group in ("*", attrs.get("group", "")) and \
                    resource in ("*", attrs.get("resource")) and (ns is None or ns == want_ns):
                return False
        return True

    def forbidden(self, verb: str, group: str, resource: str, namespace: str | None) -> ApiError | None:
        """The 403 an enforced deny() rule makes of this request (the API server's wording), or None."""
        if self.allowed({"verb": verb, "group": group, "resource": resource, "namespace": namespace},
                        enforced_only=True):
            return None
        plural, _, sub = resource.partition("/")
        what = f"{plural}.{group}" if group else plural
        where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
        return ApiError(403, "Forbidden", f'{what} is forbidden: User "researcher" cannot {verb} resource '
                        f'"{resource}" in API group "{group}" {where}',
                        {"name": "", "group": group, "kind": plural})

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
        self.requests.clear()

    @property
    def request_count(self) -> int:
        return sum(v for k, v in self.counts.items() if isinstance(k, str))

    def _on_event(self, ev: Event) -> None:
        if ev.type == "DELETED" and ev.res.kind == "Pod" and not ev.res.group:
            md = ev.obj["metadata"]
            self.logs.forget(md.get("namespace", ""), md["name"])


class _Handler(StreamingHandler, NonResourceHandler, BaseHTTPRequestHandler):
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
                self.api.requests.append((verb, route[0].group, route[0].plural + (f"/{route[3]}" if route[3] else ""),
                                          route[1]))
            elif route is None:  # discovery, access reviews, Kueue's visibility API: by path
                self.api.requests.append((verb, "", url.path, None))
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
            denied = self.api.forbidden(verb, res.group, res.plural + (f"/{sub}" if sub else ""), ns)
            if denied is not None:
                self._body()
                return self._error(denied)
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
            obj = store.create_res(res, body, ns, dry_run=bool(q.get("dryRun")))
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


__all__ = ["FakeApiServer", "PodLogs", "Fault", "VISIBILITY_GROUP", "VisibilityProvider", "now_iso"]
