"""A generic informer: list+watch one resource of one namespace into an indexed cache.

An :class:`Informer` lists once, then watches from the list's resourceVersion with the official
client's ``watch.Watch``. It reconnects with backoff, honours 429 ``Retry-After``, and relists on
410 Gone, diffing the fresh list against its cache so no transition is lost and none is
duplicated; a 404 (the resource is not served: CRD not installed) marks it ``missing`` and it
tries again later, a 403 on the list marks it ``forbidden`` (retried every 30 s); ``namespace``
None watches every namespace (its cache keyed by ``namespace/name``: one name may be in several)
or a cluster-scoped kind. ``indexers`` keep the cache also grouped by key.
:func:`wait_synced` waits for the first lists, and ends at once with the access error
(:mod:`..access`) when the server cannot be reached or refuses the credentials. It knows nothing of jobs:
:mod:`.hub` builds the status of jobs on top of it (after client-go's SharedIndexInformer).
"""
from __future__ import annotations

import random
import threading
import time
from typing import Any, Callable, Iterable

from kubernetes import watch as kwatch
from kubernetes.client.exceptions import ApiException

from ....errors import KubernetesError
from ..access import connect_failed, unauthorized, unreachable
from ..retry import ATTEMPTS, retry_after_s

#: a watch accepted and still open this long after a failure counts as working again, events or not
HELD_S = 2.0
RETRY_MAX_S = 5.0  # the longest wait between a watch's retries (plus up to a quarter of it, jitter)


def _path(group: str, version: str, plural: str, namespace: str | None) -> str:
    """The collection's path; ``namespace`` None: cluster-wide (all namespaces, or cluster-scoped)."""
    base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    return f"{base}/{plural}" if namespace is None else f"{base}/namespaces/{namespace}/{plural}"


Indexer = Callable[[dict], Iterable[str]]



class Informer:
    """List+watch one resource in one namespace into a cache; call ``on_change(type, obj)``.

    ``indexers`` ({index name: obj -> keys}) keep the cache also grouped by key, in cache
    order, so :meth:`indexed` finds one job's objects without scanning the cache.
    """

    def __init__(self, api_client: Any, group: str, version: str, plural: str, namespace: str | None,
                 on_change: Callable[[str, dict], None], label_selector: str | None = None,
                 watch_timeout: int = 240, lock: Any = None, indexers: dict[str, Indexer] | None = None):
        self.lock = lock or threading.RLock()
        self.api, self.path = api_client, _path(group, version, plural, namespace)
        self.namespace = namespace
        self.resource = (group, version, plural)
        self.label_selector, self.watch_timeout = label_selector, watch_timeout
        self.on_change = on_change
        self.cache: dict[str, dict] = {}
        self.indexers = dict(indexers or {})
        self._index: dict[str, dict[str, dict[str, dict]]] = {i: {} for i in self.indexers}
        self._keys: dict[str, dict[str, tuple[str, ...]]] = {i: {} for i in self.indexers}
        self._order: dict[str, int] = {}  # name -> place in the cache's (insertion) order
        self._next = 0
        self.synced = threading.Event()
        self.missing = False  # the resource is not served (CRD not installed)
        self.forbidden = False  # this user may not list it (403): retried every 30 s
        self.relists = 0
        self.error: BaseException | None = None  # the last failed list or watch (None once one works)
        self.failing_since: float | None = None  # epoch s of the first failure since one worked
        self.refused_since: float | None = None  # epoch s since every failure has been a refusal (401/403)
        self.failed_at: float | None = None  # epoch s of the last failure
        self._accepted: float | None = None  # epoch s the open watch was accepted (its 200)
        self._settled = threading.Event()  # listed, or refused (unreachable, 401, 403, 404): waiting is over
        self._failures = 0  # failed connects in a row
        self._stop = threading.Event()
        self._watch: kwatch.Watch | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"informer-{plural}")

    def start(self) -> "Informer":
        self._thread.start()
        return self

    def stop(self, wait_s: float = 0.2) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()
        if wait_s > 0:
            self._thread.join(wait_s)  # a daemon thread; a blocked read ends with the connection

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def key(self, obj: dict) -> str:
        """The cache's key of ``obj``: its name in a namespace's informer; ``namespace/name`` in a
        cluster-wide one, where the same name may be in several namespaces (a cluster-scoped
        kind's objects have no namespace: their name)."""
        md = obj["metadata"]
        ns = md.get("namespace") if self.namespace is None else None
        return f"{ns}/{md['name']}" if ns else md["name"]

    def items(self) -> list[dict]:
        """The cached objects (a copy of the list; the objects are never changed in place)."""
        with self.lock:
            return list(self.cache.values())

    def _call(self, **kw: Any) -> Any:
        q = [(k, v) for k, v in (("labelSelector", self.label_selector),
                                 ("resourceVersion", kw.get("resource_version")),
                                 ("timeoutSeconds", kw.get("timeout_seconds")),
                                 ("allowWatchBookmarks", "true" if kw.get("watch") else None),
                                 ("watch", "true" if kw.get("watch") else None)) if v]
        return self.api.call_api(self.path, "GET", query_params=q, response_type="object",
                                 auth_settings=["BearerToken"], _return_http_data_only=True,
                                 _preload_content=kw.get("_preload_content", True),
                                 _request_timeout=(10, self.watch_timeout + 30) if kw.get("watch") else 30)

    def _list(self) -> str:
        data = self._call()
        items = {self.key(o): o for o in data.get("items") or []}
        with self.lock:
            self._apply_list(items)
        self._working()
        self.synced.set()
        self._settled.set()
        return data["metadata"]["resourceVersion"]

    @property
    def unreachable(self) -> bool:
        """No first list yet, after ATTEMPTS failed connects in a row (as many as
        :func:`..retry.retrying` allows a call): no API server at the address."""
        return not self.synced.is_set() and self._failures >= ATTEMPTS

    @property
    def unauthorized(self) -> bool:
        """No first list yet, and the server refused the credentials (401)."""
        return not self.synced.is_set() and getattr(self.error, "status", None) == 401

    def _working(self) -> None:
        """A list answered, or a watch sent an event: the cache is current again."""
        self.error, self._failures, self.failing_since, self.refused_since = None, 0, None, None

    def _open_watch(self, **kw: Any) -> Any:
        """The watch request for :class:`kwatch.Watch` (its 200 arrives before any event, and an
        ERROR event may follow at once: accepted is not yet working, see :attr:`failing`)."""
        response = self._call(**kw)
        self._accepted = time.time()
        return response

    @property
    def failing(self) -> tuple[float, BaseException] | None:
        """(since when, the last error) while this resource's reads fail; None once a list has
        answered, a watch has sent an event, or a watch has stayed open ``HELD_S`` since it was
        accepted (a quiet resource sends none)."""
        since, error, accepted = self.failing_since, self.error, self._accepted
        if since is None or error is None:
            return None
        if accepted is not None and accepted >= since and time.time() - accepted >= HELD_S:
            return None
        return since, error

    def _failed(self, exc: BaseException) -> None:
        """Note a failed list or watch; a waiter stops waiting once it is unreachable or unauthorized."""
        now = time.time()
        if self.failing is None:  # working until now (or held open since the last failure)
            self.failing_since, self.refused_since = now, None
        refused = getattr(exc, "status", None) in (401, 403)
        if not refused:
            self.refused_since = None
        elif self.refused_since is None:
            self.refused_since = now
        self.error, self._accepted, self.failed_at = exc, None, now
        self._failures = self._failures + 1 if connect_failed(exc) else 0
        if self.unreachable or self.unauthorized:
            self._settled.set()

    def indexed(self, index: str, key: str) -> list[dict]:
        """The cached objects whose ``index`` keys include ``key``, in cache order."""
        bucket = self._index[index].get(key)
        if not bucket:
            return []
        return [bucket[n] for n in sorted(bucket, key=self._order.__getitem__)]

    def _put(self, name: str, obj: dict) -> None:
        if name not in self.cache:
            self._order[name] = self._next
            self._next += 1
        self.cache[name] = obj
        for index, keys_of in self.indexers.items():
            buckets, known = self._index[index], self._keys[index]
            new, old = tuple(dict.fromkeys(keys_of(obj))), known.get(name, ())
            for key in old:
                if key not in new:
                    self._unindex(buckets, key, name)
            for key in new:
                buckets.setdefault(key, {})[name] = obj
            known[name] = new

    def _drop(self, name: str) -> None:
        self.cache.pop(name, None)
        self._order.pop(name, None)
        for index in self.indexers:
            for key in self._keys[index].pop(name, ()):
                self._unindex(self._index[index], key, name)

    @staticmethod
    def _unindex(buckets: dict[str, dict[str, dict]], key: str, name: str) -> None:
        bucket = buckets.get(key)
        if bucket is not None:
            bucket.pop(name, None)
            if not bucket:
                del buckets[key]

    def _apply_list(self, items: dict[str, dict]) -> None:
        old = self.cache
        self.cache, self._order = {}, {}
        self._index = {i: {} for i in self.indexers}
        self._keys = {i: {} for i in self.indexers}
        for name, obj in items.items():
            self._put(name, obj)
        for name, obj in items.items():
            prev = old.get(name)
            if prev is None:
                self.on_change("ADDED", obj)
            elif prev["metadata"].get("resourceVersion") != obj["metadata"].get("resourceVersion"):
                self.on_change("MODIFIED", obj)
        for name, obj in old.items():
            if name not in items:
                self.on_change("DELETED", obj)

    def _run(self) -> None:
        backoff, rv = 0.2, None
        while not self._stop.is_set():
            try:
                if rv is None:
                    rv = self._list()
                    self.relists += 1
                    self.missing = self.forbidden = False
                self._watch = w = kwatch.Watch(return_type="object")
                for ev in w.stream(self._open_watch, resource_version=rv, timeout_seconds=self.watch_timeout):
                    obj = ev["raw_object"]
                    rv = obj.get("metadata", {}).get("resourceVersion") or rv
                    if self.failing_since is not None:
                        self._working()
                    if ev["type"] == "BOOKMARK":
                        continue
                    name = self.key(obj)
                    with self.lock:
                        if ev["type"] == "DELETED":
                            self._drop(name)
                        else:
                            self._put(name, obj)
                        self.on_change(ev["type"], obj)
                    backoff = 0.2
                    if self._stop.is_set():
                        break
            except ApiException as exc:
                if exc.status == 410:  # Gone: relist and diff
                    rv = None
                    continue
                if exc.status == 401 and rv is None:  # credentials refused: say so, keep trying
                    self._failed(exc)
                    self._stop.wait(5.0)
                    continue
                if exc.status == 403 and rv is None:  # the list itself is refused
                    self._failed(exc)
                    self.forbidden = True
                    self.synced.set()
                    self._settled.set()
                    self._stop.wait(30.0)
                    continue
                if exc.status == 404:
                    self._working()  # answered: the resource is not served, which is current news
                    self.missing = True
                    self.synced.set()
                    self._settled.set()
                    rv = None
                    self._stop.wait(5.0)
                    continue
                self._failed(exc)
                delay = max(backoff, retry_after_s(exc) or 0.0)
                self._stop.wait(delay + random.uniform(0, delay / 4))
                backoff = min(backoff * 2, RETRY_MAX_S)
            except Exception as exc:  # dropped connection, protocol error, timeout: resume from rv
                self._failed(exc)
                self._stop.wait(backoff + random.uniform(0, backoff / 4))
                backoff = min(backoff * 2, RETRY_MAX_S)


def wait_synced(informers: Iterable[Informer], timeout: float) -> None:
    """Wait until each informer has listed once. Raises BackendUnavailable as soon as one finds
    no API server (ATTEMPTS failed connects in a row), KubernetesError (401) as soon as one has
    its credentials refused, KubernetesError with the last error when ``timeout`` s pass first."""
    deadline = time.monotonic() + timeout
    for inf in informers:
        inf._settled.wait(max(0.0, deadline - time.monotonic()))
        if inf.synced.is_set():
            continue
        host = getattr(getattr(inf.api, "configuration", None), "host", "?")
        if inf.unreachable:
            raise unreachable(inf.error, host) from inf.error  # type: ignore[arg-type]
        if inf.unauthorized:
            raise unauthorized(inf.error, host) from None  # type: ignore[arg-type]
        last = f": last error: {' '.join(str(inf.error).split())[:200]}" if inf.error is not None else ""
        raise KubernetesError(f"watch of {inf.path} at {host} did not sync within {timeout:.0f} s{last}")

