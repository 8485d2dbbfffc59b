"""The fake apiserver's non-resource endpoints: ``/version``, discovery (``/api``, ``/apis``,
group versions), SelfSubjectAccessReview and Kueue's visibility API (pending workloads).

A mixin of the request handler in :mod:`gpujobs_sim.apiserver`.
"""
from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any, Callable

from .store import ApiError

if TYPE_CHECKING:
    from .apiserver import FakeApiServer

__all__ = ["NonResourceHandler", "VISIBILITY_GROUP", "VisibilityProvider"]

VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
VisibilityProvider = Callable[[str, "str | None", str], "list[dict] | None"]
"""(scope 'localqueue'|'clusterqueue', namespace, queue name) -> pending items, or None (404)."""


class NonResourceHandler:
    """Paths that are not objects of a resource (``api``, ``_send_json``, ``_body`` come from the handler)."""
    api: "FakeApiServer"
    _send_json: Callable[..., None]
    _body: Callable[[], Any]

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
        plural = "localqueues" if scope == "localqueue" else "clusterqueues"
        denied = api.forbidden("get", VISIBILITY_GROUP, f"{plural}/pendingworkloads", ns)
        if denied is not None:
            raise denied
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
