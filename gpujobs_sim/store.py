"""The object store behind the fake API server: resources, objects, resourceVersions, events.

Thread-safe. Every change bumps a global resourceVersion and emits one watch event
(kept in a bounded history so watches can resume; older ones answer 410 Gone).
Controllers use it directly (``get/list/create/update/patch/mutate/delete`` and
``subscribe``); the HTTP layer in :mod:`gpujobs_sim.apiserver` translates requests to it.
"""
from __future__ import annotations

import collections
import re
import secrets
import string
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from .patches import clone, json_patch, merge_patch
from .resources import BUILTIN, CRD_RESOURCE, CRDS, ApiError, Resource, now_iso
from .selectors import LabelSelector, field_value

__all__ = ["Resource", "Store", "ApiError", "BUILTIN", "CRDS", "CRD_RESOURCE", "LabelSelector", "Event",
           "Watcher", "clone", "field_value", "merge_patch", "json_patch", "now_iso"]


_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_SUFFIX = string.ascii_lowercase + string.digits


@dataclass
class Event:
    rv: int
    type: str
    res: Resource
    obj: dict


@dataclass
class Watcher:
    res: Resource
    namespace: str | None
    labels: LabelSelector
    fields: LabelSelector
    push: Callable[[Event], None]

    def wants(self, ev: Event) -> bool:
        if ev.res.key != self.res.key:
            return False
        md = ev.obj.get("metadata", {})
        if self.namespace and md.get("namespace") != self.namespace:
            return False
        lab = md.get("labels") or {}
        return self.labels.matches(lab.get) and self.fields.matches(lambda k: field_value(ev.obj, k))


@dataclass
class Store:
    """Objects by resource; one global resourceVersion; bounded event history."""
    history_limit: int = 20000
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _objs: dict = field(default_factory=dict)  # (group, plural) -> {(ns, name): obj}
    _res: dict = field(default_factory=dict)  # (group, plural) -> Resource
    _kinds: dict = field(default_factory=dict)  # (group, kind) -> Resource
    _rv: int = 1
    _history: collections.deque = field(default_factory=collections.deque)
    _compacted: int = 0  # events with rv <= this are gone
    _watchers: list = field(default_factory=list)
    _subscribers: list = field(default_factory=list)
    # admission(res, new, old): raises ApiError to refuse a write (old None on create); the fake
    # apiserver sets it to enforce the CRDs' CEL rules, as a real API server does on every write
    admission: Callable[[Resource, dict, dict | None], None] | None = None
    # graceful(res, obj): the grace period (seconds) a DELETE of ``obj`` waits, or None to remove it
    # at once. A pod running on a node is deleted gracefully: it gets deletionTimestamp and
    # deletionGracePeriodSeconds, and the kubelet removes it once its containers have stopped
    # (kubernetes pkg/registry/core/pod/strategy.go CheckGracefulDelete: a pod not yet scheduled or
    # already Succeeded/Failed goes at once). The simulated kubelet sets it (kubelet.py).
    graceful: Callable[[Resource, dict], float | None] | None = None

    def __post_init__(self) -> None:
        for r in BUILTIN:
            self.register(r)
        for ns in ("default", "kube-system"):
            self.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})

    # ------------------------------------------------------------ resources
    def register(self, res: Resource) -> None:
        with self._lock:
            self._res[res.key] = res
            self._kinds[(res.group, res.kind)] = res
            self._objs.setdefault(res.key, {})

    def unregister(self, group: str, plural: str) -> None:
        with self._lock:
            res = self._res.pop((group, plural), None)
            if res:
                self._kinds.pop((group, res.kind), None)
                self._objs.pop(res.key, None)

    def resources(self) -> list[Resource]:
        with self._lock:
            return list(self._res.values())

    def resource(self, group: str, plural_or_kind: str, version: str | None = None) -> Resource:
        with self._lock:
            res = self._res.get((group, plural_or_kind)) or self._kinds.get((group, plural_or_kind))
        if res is None or (version and version not in res.versions):
            raise ApiError(404, "NotFound", "the server could not find the requested resource",
                           {"group": group, "kind": plural_or_kind})
        return res

    def resolve(self, api_version: str, kind: str) -> Resource:
        group, _, version = api_version.rpartition("/")
        return self.resource(group, kind, version or None)

    # ------------------------------------------------------------ reading
    @property
    def resource_version(self) -> int:
        return self._rv

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict | None:
        res = self.resolve(api_version, kind)
        with self._lock:
            obj = self._objs[res.key].get((namespace if res.namespaced else None, name))
            return clone(obj) if obj is not None else None

    def get_res(self, res: Resource, name: str, namespace: str | None) -> dict:
        with self._lock:
            obj = self._objs.get(res.key, {}).get((namespace if res.namespaced else None, name))
            if obj is None:
                raise ApiError(404, "NotFound", f'{res.plural}{"." + res.group if res.group else ""} '
                               f'"{name}" not found', {"name": name, "group": res.group, "kind": res.plural})
            return clone(obj)

    def list_res(self, res: Resource, namespace: str | None = None, labels: str | None = None,
                 fields: str | None = None) -> tuple[list[dict], int]:
        lsel, fsel = LabelSelector(labels), LabelSelector(fields)
        with self._lock:
            out = []
            for (ns, _), obj in self._objs.get(res.key, {}).items():
                if namespace and ns != namespace:
                    continue
                if lsel and not lsel.matches((obj["metadata"].get("labels") or {}).get):
                    continue
                if fsel and not fsel.matches(lambda k, o=obj: field_value(o, k)):
                    continue
                out.append(clone(obj))
            return out, self._rv

    def list(self, api_version: str, kind: str, namespace: str | None = None,
             label_selector: str | None = None) -> list[dict]:
        return self.list_res(self.resolve(api_version, kind), namespace, label_selector)[0]

    # ------------------------------------------------------------ writing
    def _emit(self, type_: str, res: Resource, obj: dict) -> None:
        ev = Event(self._rv, type_, res, clone(obj))
        self._history.append(ev)
        while len(self._history) > self.history_limit:
            self._compacted = self._history.popleft().rv
        for w in list(self._watchers):
            if w.wants(ev):
                w.push(ev)
        for cb in list(self._subscribers):
            cb(ev)

    def _bump(self, obj: dict) -> None:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)

    def create(self, obj: dict, namespace: str | None = None, *, keep_status: bool = True) -> dict:
        """Create ``obj`` (apiVersion/kind from the object). ``keep_status`` False drops status."""
        res = self.resolve(obj.get("apiVersion", ""), obj.get("kind", ""))
        return self.create_res(res, obj, namespace, keep_status=keep_status)

    def create_res(self, res: Resource, obj: dict, namespace: str | None, *,
                   keep_status: bool = False, dry_run: bool = False) -> dict:
        """``dry_run``: every stage (defaults, admission, validation) but nothing stored (the API
        server's ``dryRun=All``)."""
        obj = clone(obj)
        md = obj.setdefault("metadata", {})
        ns = (namespace or md.get("namespace") or "default") if res.namespaced else None
        if res.namespaced and md.get("namespace") not in (None, ns):
            raise ApiError(400, "BadRequest", "the namespace of the provided object does not match "
                           "the namespace sent on the request")
        with self._lock:
            if not md.get("name"):
                if not md.get("generateName"):
                    raise ApiError(422, "Invalid", f"{res.kind} is invalid: metadata.name: Required "
                                   "value: name or generateName is required",
                                   {"kind": res.kind, "causes": [{"field": "metadata.name",
                                                                  "reason": "FieldValueRequired"}]})
                md["name"] = md["generateName"] + "".join(secrets.choice(_SUFFIX) for _ in range(5))
            name = md["name"]
            if len(name) > 253 or not _NAME_RE.match(name):
                raise ApiError(422, "Invalid", f'{res.kind} "{name}" is invalid: metadata.name: '
                               f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist '
                               "of lower case alphanumeric characters, '-' or '.'",
                               {"name": name, "kind": res.kind})
            bucket = self._objs[res.key]
            if (ns, name) in bucket:
                raise ApiError(409, "AlreadyExists", f'{res.plural}{"." + res.group if res.group else ""} '
                               f'"{name}" already exists', {"name": name, "group": res.group,
                                                            "kind": res.plural})
            if ns is not None:
                md["namespace"] = ns
            md["uid"] = str(uuid.uuid4())
            md["creationTimestamp"] = now_iso()
            md["generation"] = 1
            md.pop("deletionTimestamp", None)
            if not keep_status and res.status_sub:
                obj.pop("status", None)
            if res.kind == "Pod" and not res.group:
                obj.setdefault("status", {}).setdefault("phase", "Pending")
            if self.admission is not None:
                self.admission(res, obj, None)
            if dry_run:
                return clone(obj)
            if res.key == CRD_RESOURCE.key:
                self._install_from_crd(obj)
            self._bump(obj)
            bucket[(ns, name)] = obj
            self._emit("ADDED", res, obj)
            return clone(obj)

    def _install_from_crd(self, crd: dict) -> None:
        spec = crd.get("spec", {})
        names = spec.get("names", {})
        versions = tuple(v["name"] for v in spec.get("versions", []) if v.get("served", True))
        status_sub = any("status" in (v.get("subresources") or {}) for v in spec.get("versions", []))
        self.register(Resource(spec["group"], versions, names["plural"], names["kind"],
                               spec.get("scope", "Namespaced") == "Namespaced", status_sub))
        crd.setdefault("status", {})["conditions"] = [
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
             "lastTransitionTime": now_iso()}]

    def replace_res(self, res: Resource, obj: dict, namespace: str | None, name: str,
                    subresource: str | None = None) -> dict:
        """PUT semantics: the main resource ignores status, ``/status`` changes only status."""
        with self._lock:
            cur = self._objs.get(res.key, {}).get((namespace if res.namespaced else None, name))
            if cur is None:
                raise ApiError(404, "NotFound", f'{res.plural} "{name}" not found',
                               {"name": name, "group": res.group, "kind": res.plural})
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if rv and rv != cur["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {res.plural} "{name}": '
                               "the object has been modified; please apply your changes to the latest "
                               "version and try again", {"name": name, "kind": res.plural})
            if (obj.get("metadata") or {}).get("name", name) != name:
                raise ApiError(400, "BadRequest", "the name of the object does not match the name on the URL")
            return self._write(res, cur, clone(obj), subresource)

    def _write(self, res: Resource, cur: dict, new: dict, subresource: str | None) -> dict:
        """Store ``new`` in place of ``cur`` (lock held), keeping system metadata."""
        if subresource == "status":
            out = clone(cur)
            if "status" in new:
                out["status"] = new["status"]
            else:
                out.pop("status", None)
        else:
            out = new
            if res.status_sub:
                if "status" in cur:
                    out["status"] = clone(cur["status"])
                else:
                    out.pop("status", None)
            md, old = out.setdefault("metadata", {}), cur["metadata"]
            for k in ("uid", "creationTimestamp", "namespace", "name", "deletionTimestamp"):
                if k in old:
                    md[k] = old[k]
            md["generation"] = old.get("generation", 1) + (out.get("spec") != cur.get("spec"))
        out.setdefault("apiVersion", cur.get("apiVersion"))
        out.setdefault("kind", cur.get("kind"))
        out["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
        if out == cur:
            return clone(cur)  # no-op writes do not bump the resourceVersion (like the apiserver)
        md = out["metadata"]
        return self._replace(res, (md.get("namespace") if res.namespaced else None, md["name"]), out)

    def _replace(self, res: Resource, key: tuple, new: dict) -> dict:
        """Store a changed object (lock held): one resourceVersion, one event. A terminating
        object whose last finalizer went is removed instead (DELETED) and its dependents collected."""
        md = new["metadata"]
        if md.get("deletionTimestamp") and not md.get("finalizers") and md.get("deletionGracePeriodSeconds") is None:
            return self._remove(res, key, new, "Background")  # (a pod in its grace period stays)
        if self.admission is not None:
            self.admission(res, new, self._objs[res.key].get(key))
        self._bump(new)
        self._objs[res.key][key] = new
        self._emit("MODIFIED", res, new)
        return clone(new)

    def _remove(self, res: Resource, key: tuple, obj: dict, collect: str | None) -> dict:
        """Remove an object (lock held): one resourceVersion, one DELETED event (as in Kubernetes);
        then collect its dependents with propagation ``collect`` (None: already collected)."""
        self._objs[res.key].pop(key, None)
        self._bump(obj)
        self._emit("DELETED", res, obj)
        if collect is not None:
            self._collect(res, obj, collect)
        return clone(obj)

    def patch_res(self, res: Resource, name: str, namespace: str | None, patch: Any,
                  patch_type: str = "merge", subresource: str | None = None) -> dict:
        with self._lock:
            cur = self.get_res(res, name, namespace)
            if patch_type == "json":
                new = json_patch(cur, patch)
            else:
                if not isinstance(patch, dict):
                    raise ApiError(400, "BadRequest", "a merge patch must be a JSON object")
                rv = (patch.get("metadata") or {}).get("resourceVersion")
                if rv and rv != cur["metadata"]["resourceVersion"]:
                    raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {res.plural} '
                                   f'"{name}": the object has been modified', {"name": name})
                new = merge_patch(cur, patch)
            raw = self._objs[res.key][(namespace if res.namespaced else None, name)]
            return self._write(res, raw, new, subresource)

    def update(self, obj: dict, subresource: str | None = None) -> dict:
        res = self.resolve(obj["apiVersion"], obj["kind"])
        md = obj["metadata"]
        return self.replace_res(res, obj, md.get("namespace"), md["name"], subresource)

    def patch(self, api_version: str, kind: str, name: str, namespace: str | None, patch: Any,
              subresource: str | None = None) -> dict:
        return self.patch_res(self.resolve(api_version, kind), name, namespace, patch, "merge",
                              subresource)

    def mutate(self, api_version: str, kind: str, name: str, namespace: str | None,
               fn: Callable[[dict], Any]) -> dict | None:
        """Apply ``fn(obj)`` in place under the lock (status included); None if gone."""
        res = self.resolve(api_version, kind)
        with self._lock:
            raw = self._objs[res.key].get((namespace if res.namespaced else None, name))
            if raw is None:
                return None
            new = clone(raw)
            fn(new)
            new["metadata"]["resourceVersion"] = raw["metadata"]["resourceVersion"]
            if new == raw:
                return clone(raw)
            if new.get("spec") != raw.get("spec"):
                new["metadata"]["generation"] = raw["metadata"].get("generation", 1) + 1
            return self._replace(res, (namespace if res.namespaced else None, name), new)

    # ------------------------------------------------------------ deleting
    def delete_res(self, res: Resource, name: str, namespace: str | None,
                   propagation: str | None = None, now: bool = False) -> dict:
        """Delete with garbage collection of dependents (ownerReferences).

        Foreground: the owner gets deletionTimestamp + ``foregroundDeletion`` finalizer, its
        dependents go first, then the owner. Background: owner first, then dependents.
        Orphan: dependents lose the owner reference. Other finalizers block deletion.
        """
        propagation = propagation or "Background"
        with self._lock:
            key = (namespace if res.namespaced else None, name)
            cur = self._objs.get(res.key, {}).get(key)
            if cur is None:
                raise ApiError(404, "NotFound", f'{res.plural}{"." + res.group if res.group else ""} '
                               f'"{name}" not found', {"name": name, "group": res.group, "kind": res.plural})
            md = cur["metadata"]
            if not now and self.graceful is not None:
                if md.get("deletionTimestamp") and not md.get("finalizers"):
                    return clone(cur)  # terminating: the kubelet removes it (now=True)
                grace = self.graceful(res, cur)
                if grace is not None:
                    new = clone(cur)
                    new["metadata"]["deletionTimestamp"] = now_iso()
                    new["metadata"]["deletionGracePeriodSeconds"] = int(grace)
                    return self._replace(res, key, new)
            if md.get("finalizers") and [f for f in md["finalizers"] if f != "foregroundDeletion"]:
                if not md.get("deletionTimestamp"):
                    new = clone(cur)
                    new["metadata"]["deletionTimestamp"] = now_iso()
                    return self._replace(res, key, new)
                return clone(cur)
            if propagation == "Foreground" and self._dependents(md["uid"]):
                new = clone(cur)
                new["metadata"]["deletionTimestamp"] = now_iso()
                new["metadata"]["finalizers"] = ["foregroundDeletion"]
                self._replace(res, key, new)
                self._collect(res, new, "Foreground")
                cur = self._objs[res.key][key]
                cur["metadata"]["finalizers"] = []
                return self._remove(res, key, cur, None)
            return self._remove(res, key, cur, propagation)

    def _dependents(self, uid: str) -> list[tuple[Resource, dict]]:
        out = []
        for rkey, bucket in self._objs.items():
            for obj in bucket.values():
                if any(o.get("uid") == uid for o in obj["metadata"].get("ownerReferences") or ()):
                    out.append((self._res[rkey], obj))
        return out

    def _collect(self, res: Resource, owner: dict, propagation: str) -> None:
        uid = owner["metadata"]["uid"]
        for dres, dep in self._dependents(uid):
            dmd = dep["metadata"]
            if propagation == "Orphan":
                new = clone(dep)
                new["metadata"]["ownerReferences"] = [o for o in dmd["ownerReferences"] if o.get("uid") != uid]
                self._replace(dres, (dmd.get("namespace"), dmd["name"]), new)
                continue
            try:
                self.delete_res(dres, dmd["name"], dmd.get("namespace"), propagation)
            except ApiError:
                pass

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None,
               propagation: str | None = None, now: bool = False) -> dict | None:
        try:
            return self.delete_res(self.resolve(api_version, kind), name, namespace, propagation, now=now)
        except ApiError as exc:
            if exc.code == 404:
                return None
            raise

    # ------------------------------------------------------------ events
    def watch(self, w: Watcher, since: int | None) -> list[Event]:
        """Register ``w``; return the backlog to send first (atomically with registration).

        ``since`` None: synthetic ADDED events for the current objects. Otherwise the
        recorded events after ``since``; ApiError 410 when they were compacted away.
        """
        with self._lock:
            if since is None:
                items, rv = self.list_res(w.res, w.namespace)
                backlog = [Event(int(o["metadata"]["resourceVersion"]), "ADDED", w.res, o)
                           for o in items]
                backlog = [e for e in backlog if w.wants(e)]
            else:
                if since < self._compacted:
                    raise ApiError(410, "Expired", f"too old resource version: {since} ({self._compacted})")
                backlog = [e for e in self._history if e.rv > since and w.wants(e)]
            self._watchers.append(w)
            return backlog

    def unwatch(self, w: Watcher) -> None:
        with self._lock:
            if w in self._watchers:
                self._watchers.remove(w)

    def subscribe(self, cb: Callable[[Event], None]) -> Callable[[], None]:
        """Call ``cb(event)`` (under the store lock: keep it short) for every change."""
        with self._lock:
            self._subscribers.append(cb)

        def undo() -> None:
            with self._lock:
                if cb in self._subscribers:
                    self._subscribers.remove(cb)
        return undo

    def compact(self) -> int:
        """Forget the event history (watches from an older resourceVersion get 410 Gone)."""
        with self._lock:
            self._compacted = self._rv
            self._history.clear()
            return self._rv

    def all_objects(self) -> Iterable[tuple[Resource, dict]]:
        with self._lock:
            return [(self._res[k], clone(o)) for k, b in self._objs.items() for o in b.values()]
