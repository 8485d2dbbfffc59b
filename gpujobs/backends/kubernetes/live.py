"""KubernetesBackend's live half: status, wait, subscribe, jobs, logs, outcomes, cancel.

Everything reads from one :class:`~.watch.StatusHub` per namespace (shared informers),
so asking for the status of 1,000 jobs costs no extra requests.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Iterator

from kubernetes.client.exceptions import ApiException

from ...errors import KubernetesError
from ...status import JobStatus
from . import logs as _logs
from . import naming, pod_metrics, results
from .kinds import KINDS
from .watch import StatusHub

_hubs_lock = threading.Lock()


def hub_for(backend: Any, namespace: str) -> StatusHub:
    with _hubs_lock:
        hubs = backend.__dict__.setdefault("_status_hubs", {})
        hub = hubs.get(namespace)
        if hub is None:
            hub = hubs[namespace] = StatusHub(backend.api_client, namespace).start()
        return hub


def _record_kind(rec: naming.JobRecord | None) -> str | None:
    """The gpujobs kind (a KINDS key, e.g. "VolcanoJob") a submit record names."""
    return rec.kind if rec is not None and rec.kind in KINDS else None


#: how long a status waits for the watch to deliver a job the apiserver already has
SEEN_WAIT_S = 5.0


def _get(backend: Any, ns: str, name: str, kind: str) -> dict | None:
    """The job object (None when the apiserver has none, or cannot say in time)."""
    info = KINDS[kind]
    try:
        return backend.api_client.call_api(
            f"/apis/{info.group}/{info.version}/namespaces/{ns}/{info.plural}/{name}", "GET",
            response_type="object", auth_settings=["BearerToken"], _return_http_data_only=True,
            _request_timeout=backend.http_timeout)
    except Exception:  # noqa: BLE001 - 404, 403, a timeout: "not known here"
        return None


def _kind_of(backend: Any, ns: str, name: str) -> str | None:
    rec = naming.load_record(ns, name, backend.home)
    if rec is not None:
        return _record_kind(rec)
    # attach from elsewhere: probe each kind once
    return next((kind for kind in KINDS if _get(backend, ns, name, kind) is not None), None)


def _hub_job(backend: Any, job_id: str) -> tuple[StatusHub, str]:
    ns, name = naming.parse_job_id(job_id)
    hub = hub_for(backend, ns)
    if not hub.known(name):
        kind = _kind_of(backend, ns, name)
        if kind is not None:
            hub.track_kind(kind)
        hub.wait_synced()
        obj = _get(backend, ns, name, kind) if kind is not None and not hub.known(name) else None
        if obj is not None and naming.LABEL_JOB in ((obj.get("metadata") or {}).get("labels") or {}):
            # created a moment ago (an already synced watch has not delivered it yet); a job
            # without gpujobs' label is never delivered: no point waiting for it
            hub.wait(name, SEEN_WAIT_S, lambda s: True)
    return hub, name


def status(backend: Any, job_id: str) -> JobStatus:
    hub, name = _hub_job(backend, job_id)
    st = hub.status(name)
    if st is None:
        raise KubernetesError(f"job {job_id} not found (no such object in the cluster)", status=404)
    return pod_metrics.for_backend(backend).with_metrics(st)


def wait(backend: Any, job_id: str, timeout: float | None = None) -> JobStatus:
    hub, name = _hub_job(backend, job_id)
    st = hub.wait(name, timeout, lambda s: s.terminal)
    if st is None:
        raise KubernetesError(f"job {job_id} not found", status=404)
    return pod_metrics.for_backend(backend).with_metrics(st)


def metrics_history(backend: Any, job_id: str) -> list:
    """``job.metrics()``: the job's kept samples, after reading its pods' log tails now."""
    pm = pod_metrics.for_backend(backend)
    st = _hub_status(backend, job_id)
    pm.refresh(job_id, terminal=st is not None and st.terminal, force=True)
    return pm.history(job_id)


def progress_history(backend: Any, job_id: str) -> list[dict]:
    """``job.progress()``: the ranks' ``ctx.progress`` reports from the pods' log tails."""
    pm = pod_metrics.for_backend(backend)
    st = _hub_status(backend, job_id)
    pm.refresh(job_id, terminal=st is not None and st.terminal, force=True)
    return pm.progress(job_id)


def subscribe(backend: Any, job_id: str, cb: Callable[[JobStatus], Any]) -> Callable[[], None]:
    """``cb`` on every status change, carrying the metrics already read (no log read in the
    watch thread: ``status()`` and ``metrics()`` read new samples)."""
    hub, name = _hub_job(backend, job_id)
    pm = pod_metrics.for_backend(backend)

    def with_known_metrics(st: JobStatus) -> Any:
        latest = pm.latest(st.job_id)
        return cb(st.with_(metrics=latest) if latest and not st.metrics else st)

    return hub.subscribe(name, with_known_metrics)


def jobs(backend: Any, queue: str | None = None) -> list[JobStatus]:
    ns = backend.namespace
    hub = hub_for(backend, ns)
    root = backend.home / "k8s-jobs" / ns
    for path in sorted(root.glob("*.json")) if root.exists() else []:
        kind = _record_kind(naming.load_record(ns, path.stem, backend.home))
        if kind:
            hub.track_kind(kind)
    hub.wait_synced()
    return [s for s in hub.all() if queue is None or s.queue == queue]


def outcomes(backend: Any, job_id: str) -> dict[int, bytes]:
    ns, name = naming.parse_job_id(job_id)
    cache = backend.__dict__.setdefault("_outcomes", {})
    if job_id in cache:
        return cache[job_id]
    found = results.outcomes(backend.api_client, ns, name)
    st = _hub_status(backend, job_id)
    if st is not None and st.terminal:
        cache[job_id] = found
    return found


def _hub_status(backend: Any, job_id: str) -> JobStatus | None:
    """The watch hub's status only: no pod-log read for metrics (callers read logs themselves)."""
    hub, name = _hub_job(backend, job_id)
    return hub.status(name)


def logs(backend: Any, job_id: str, rank: int | None = None, follow: bool = False) -> Iterator[str]:
    ns, name = naming.parse_job_id(job_id)

    def finished() -> bool:
        st = _hub_status(backend, job_id)
        return st is None or st.terminal

    pm = pod_metrics.for_backend(backend)
    return _logs.logs(backend.api_client, ns, name, rank=rank, follow=follow,
                      is_done=finished if follow else None,
                      metrics_sink=lambda line: pm.feed(job_id, line))


def cancel(backend: Any, job_id: str) -> None:
    """Delete the job with propagationPolicy=Foreground (pods, Workload, ConfigMap go first)."""
    ns, name = naming.parse_job_id(job_id)
    kind = _kind_of(backend, ns, name)
    if kind is None:
        return
    info = KINDS[kind]
    hub_for(backend, ns).track_kind(kind)
    try:
        backend.api_client.call_api(f"/apis/{info.group}/{info.version}/namespaces/{ns}/{info.plural}/{name}",
                                    "DELETE", query_params=[("propagationPolicy", "Foreground")],
                                    body={"kind": "DeleteOptions", "apiVersion": "v1",
                                          "propagationPolicy": "Foreground"},
                                    response_type="object", auth_settings=["BearerToken"],
                                    _return_http_data_only=True)
    except ApiException as exc:
        if exc.status != 404:
            raise KubernetesError(f"cannot cancel {job_id}: {exc.reason}", exc.status) from None
