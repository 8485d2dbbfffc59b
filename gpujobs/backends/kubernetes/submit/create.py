"""Safe submit: preflight, then one object (the job); all or nothing, idempotent.

The job carries its sealed call in its pod-template annotations (payload_objects), so a
typical submit is a single create. A call too big for that goes in a Secret created right
after the job *with* an ownerReference to the job's uid (Kueue's webhook suspends the job,
and a bare Volcano Job's pods wait for their Secret volume), so no patch is needed and the
cluster's garbage collector removes it with the job. The shared runtime ConfigMap and key
Secret are looked up while preflight runs and made after it passes, once per namespace.

Idempotency: every object carries ``gpujobs.dev/submission-id``. A create that
times out, drops the connection or gets 429/5xx is retried with the same body; an
``AlreadyExists`` answer whose object carries our submission id is our own earlier
attempt and is adopted, so a retry never makes a second job. A name taken by
another submission is a PreflightError (nothing of ours was created).

Clean-up: when any step fails, every object this submission may have created is
deleted (only if it carries our submission id), the local key is forgotten, and
the error names what failed and what was removed.
"""
from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor
from ....errors import BackendError, GpuJobsError, PreflightError, SubmitError
from .. import keys, naming
from ..cluster import Cluster
from ..kinds import KINDS
from ..access import RBAC_FIX
from .preflight import _Cache, preflight
from ..render.job import Rendered, owner_reference
from ..retry import retrying

class _Objects:
    """Create / read / delete of the job, ConfigMaps and Secrets, through the official client."""

    def __init__(self, backend: Cluster, r: Rendered):
        from kubernetes import client

        self.r = r
        self.t = backend.http_timeout
        self.custom = client.CustomObjectsApi(backend.api_client)
        self.core = client.CoreV1Api(backend.api_client)
        self.info = KINDS[r.kind]

    def create(self, what: str, body: dict) -> dict:
        ns, i = self.r.namespace, self.info
        if what == "job":
            return self.custom.create_namespaced_custom_object(i.group, i.version, ns, i.plural, body,
                                                               _request_timeout=self.t)
        fn = {"configmap": self.core.create_namespaced_config_map, "secret": self.core.create_namespaced_secret,
              "claim": self.core.create_namespaced_persistent_volume_claim,
              "service": self.core.create_namespaced_service}[what]
        obj = fn(ns, body, _request_timeout=self.t)
        return self.core.api_client.sanitize_for_serialization(obj)

    def read(self, what: str, name: str) -> dict:
        ns, i = self.r.namespace, self.info
        if what == "job":
            return self.custom.get_namespaced_custom_object(i.group, i.version, ns, i.plural, name,
                                                            _request_timeout=self.t)
        fn = {"configmap": self.core.read_namespaced_config_map, "secret": self.core.read_namespaced_secret,
              "claim": self.core.read_namespaced_persistent_volume_claim,
              "service": self.core.read_namespaced_service}[what]
        return self.core.api_client.sanitize_for_serialization(fn(name, ns, _request_timeout=self.t))

    def delete(self, what: str, name: str) -> None:
        ns, i = self.r.namespace, self.info
        body = {"propagationPolicy": "Background"}
        if what == "job":
            self.custom.delete_namespaced_custom_object(i.group, i.version, ns, i.plural, name,
                                                        body=body, _request_timeout=self.t)
        elif what == "configmap":
            self.core.delete_namespaced_config_map(name, ns, body=body, _request_timeout=self.t)
        elif what == "claim":
            self.core.delete_namespaced_persistent_volume_claim(name, ns, body=body, _request_timeout=self.t)
        elif what == "service":
            self.core.delete_namespaced_service(name, ns, body=body, _request_timeout=self.t)
        else:
            self.core.delete_namespaced_secret(name, ns, body=body, _request_timeout=self.t)


def _create_once(objs: _Objects, what: str, body: dict) -> dict:
    """Create ``body`` (retrying transient failures); adopt our own earlier attempt on 409."""
    from kubernetes.client.exceptions import ApiException

    name = body["metadata"]["name"]
    try:
        return retrying(lambda: objs.create(what, body))
    except ApiException as exc:
        if exc.status != 409:
            raise
    existing = retrying(lambda: objs.read(what, name))
    sid = ((existing.get("metadata") or {}).get("labels") or {}).get(naming.LABEL_SUBMISSION)
    if sid == objs.r.submission_id:
        return existing
    kind = body["kind"] if what == "job" else what
    raise PreflightError(f"{kind} {objs.r.namespace}/{name}",
                         "already exists and was made by another submission; pick another "
                         ".name(...) or delete it first")


def _rollback(objs: _Objects, attempted: list[tuple[str, str]]) -> list[str]:
    """Delete what this submission may have created (only objects carrying our id)."""
    from kubernetes.client.exceptions import ApiException

    removed = []
    for what, name in reversed(attempted):
        try:
            cur = retrying(lambda: objs.read(what, name))
            labels = (cur.get("metadata") or {}).get("labels") or {}
            if labels.get(naming.LABEL_SUBMISSION) != objs.r.submission_id:
                continue
            retrying(lambda: objs.delete(what, name))
            removed.append(f"{cur.get('kind') or what} {name}")
        except ApiException as exc:
            if exc.status != 404:
                removed.append(f"(could not remove {what} {name}: HTTP {exc.status})")
        except Exception as exc:  # noqa: BLE001
            removed.append(f"(could not remove {what} {name}: {exc})")
    return removed


_KIND_OF = {"secret": "Secret", "claim": "PersistentVolumeClaim", "service": "Service"}

_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="gpujobs-submit")


def _read_shared(objs: _Objects, what: str, body: dict) -> dict | None:
    """The shared object as the cluster has it, or None (only reads)."""
    from kubernetes.client.exceptions import ApiException

    try:
        return retrying(lambda: objs.read(what, body["metadata"]["name"]))
    except ApiException as exc:
        if exc.status == 403:
            raise PreflightError(f"{body['kind']} {objs.r.namespace}/{body['metadata']['name']}",
                                 f"you may not read {body['kind']}s in namespace "
                                 f"{objs.r.namespace!r}; "
                                 + RBAC_FIX.format(ns=objs.r.namespace)) from None
        if exc.status == 404:
            return None
        raise


def _make_shared(objs: _Objects, what: str, body: dict, existing: dict | None) -> None:
    """Create a missing shared object; PreflightError when a stranger holds its name."""
    from kubernetes.client.exceptions import ApiException

    name, kind = body["metadata"]["name"], body["kind"]
    if existing is None:
        try:
            retrying(lambda: objs.create(what, body))
            return
        except ApiException as exc:
            if exc.status != 409:  # 409: another submitter made it just now
                raise
        existing = _read_shared(objs, what, body) or body  # gone again: the next submit remakes it
    if any((existing.get(f) or {}) != (body.get(f) or {}) for f in ("data", "binaryData")) or \
            existing.get("immutable") is not True:  # a mutable one could be changed under queued jobs
        raise PreflightError(f"{kind} {objs.r.namespace}/{name}",
                             "exists with other contents than gpujobs would give it, or is not "
                             "immutable; delete it "
                             f"(kubectl delete {kind.lower()} {name} -n {objs.r.namespace}) "
                             "and submit again")


class SharedObjects:
    """The shared runtime ConfigMap and key Secret: looked up while preflight runs, made after
    it passes (both checked once per ``preflight_ttl``)."""

    def __init__(self, backend: Cluster, objs: _Objects, r: Rendered):
        self.cache, self.objs, self.r = _Cache(backend), objs, r
        self.todo = [("configmap" if o["kind"] == "ConfigMap" else "secret", o) for o in r.shared
                     if not self.cache.fresh(self._key(o))]
        self.lookups = [_POOL.submit(_read_shared, objs, what, o) for what, o in self.todo]

    def _key(self, o: dict) -> tuple:
        return ("shared", self.r.namespace, o["kind"], o["metadata"]["name"])

    def ensure(self) -> None:
        made = [_POOL.submit(_make_shared, self.objs, what, o, lookup.result())
                for (what, o), lookup in zip(self.todo, self.lookups)]
        for (_what, o), fut in zip(self.todo, made):
            fut.result()
            self.cache.put(self._key(o), True)


def submit_rendered(backend: Cluster, r: Rendered) -> str:
    """Create ``r``'s objects; return the job id. Raises before/after with nothing left behind."""
    from kubernetes.client.exceptions import ApiException

    objs = _Objects(backend, r)
    shared = SharedObjects(backend, objs, r)  # their lookups run alongside preflight's reads
    preflight(backend, r)
    backend.keep_signing_key(r.namespace, r.signing_key)
    try:
        shared.ensure()
    except GpuJobsError:
        raise
    except Exception as exc:  # HTTP errors after retries, timeouts, a dropped connection
        why = f"HTTP {exc.status} {exc.reason}" if isinstance(exc, ApiException) else str(exc)
        raise SubmitError(f"creating gpujobs' shared runtime/key objects in namespace "
                          f"{r.namespace} failed: {why}; no job was created") from None
    info = KINDS[r.kind]  # remembered before the create: a job never exists without its key
    replaced = keys.save_record(keys.JobRecord(r.namespace, r.name, r.kind, info.api_version,
                                                   info.plural, submission_id=r.submission_id),
                                  backend.home, key=r.key)
    attempted: list[tuple[str, str]] = [("job", r.name)]
    step = "job"
    try:
        job = _create_once(objs, "job", r.job)
        uid = job["metadata"]["uid"]
        if r.payload_secret is not None:  # a call too big to travel inline
            step = "secret"
            body = copy.deepcopy(r.payload_secret)
            body["metadata"]["ownerReferences"] = [owner_reference(r.job, uid)]
            attempted.append((step, body["metadata"]["name"]))
            _create_once(objs, step, body)
        if r.checkpoint_claim is not None:  # the default checkpoint claim, deleted with the job
            step = "claim"
            body = copy.deepcopy(r.checkpoint_claim)
            body["metadata"]["ownerReferences"] = [owner_reference(r.job, uid)]
            attempted.append((step, body["metadata"]["name"]))
            _create_once(objs, step, body)
        for companion in r.companions:  # the kind's (a headless Service), deleted with the job
            step = companion["kind"].lower()
            body = copy.deepcopy(companion)
            body["metadata"]["ownerReferences"] = [owner_reference(r.job, uid)]
            attempted.append((step, body["metadata"]["name"]))
            _create_once(objs, step, body)
    except BaseException as exc:
        removed = _rollback(objs, attempted) if not isinstance(exc, PreflightError) or step != "job" \
            else []
        keys.forget(r.namespace, r.name, backend.home, restore=replaced)  # an earlier job's stays
        what = f"{_KIND_OF.get(step, r.job['kind'])} {r.namespace}/{dict(attempted)[step]}"
        cleaned = f"; removed {', '.join(removed)}" if removed else "; nothing was left behind"
        if isinstance(exc, BackendError) and removed:  # the server went (or refused) mid-way: say what is left
            raise SubmitError(f"creating {what} failed: {exc}{cleaned}") from exc
        if isinstance(exc, GpuJobsError):
            raise
        if isinstance(exc, ApiException):
            hint = ""
            if exc.status == 403:
                hint = f" (RBAC: {RBAC_FIX.format(ns=r.namespace)})"
            raise SubmitError(f"creating {what} failed: HTTP {exc.status} {exc.reason}{hint}"
                              f"{cleaned}") from None
        if isinstance(exc, Exception):
            raise SubmitError(f"creating {what} failed: {exc}{cleaned}") from exc
        raise
    return r.job_id
