"""KubernetesBackend's live half: status, wait, subscribe, jobs, logs, outcomes, cancel.

Everything reads from one :class:`~.hub.StatusHub` per namespace (shared informers),
so asking for the status of 1,000 jobs costs no extra requests. A job seen ending is archived
locally (:mod:`.archive`: final status, result/exception envelopes, logs), so status, logs,
results and ``queue -a`` still answer after the job object or its pods are gone. A failed job's
``message`` starts with its remote exception (``ValueError: ... (rank 0)``). A queued job's
position is asked of Kueue's visibility API at once when the watch has not fetched it yet (a
short-lived CLI call would otherwise exit first).
"""
from __future__ import annotations

import time
from typing import Any, Callable, Iterator


from ....errors import Fix, JobNotFound, SpecError
from ....status import JobStatus
from . import archive
from . import logs as _logs
from .. import keys, naming
from . import forecasting, pod_metrics, results
from ..cluster import Cluster
from ..kinds import KINDS
from .hub import StatusHub
from .log_keeper import LogKeeper


def hub_for(backend: Cluster, namespace: str) -> StatusHub:
    state = backend.state
    with state.lock:
        hub = state.hubs.get(namespace)
        if hub is None:
            hub = state.hubs[namespace] = StatusHub(backend.api_client, namespace)
            hub.observers.append(_log_keeper(backend).observe)
            hub.start()
        return hub


def forecasts_for(backend: Cluster, namespace: str) -> forecasting.KubeForecasts:
    """The backend's forecasts for ``namespace``, over its status hub (:func:`hub_for`)."""
    return forecasting.for_backend(backend, namespace, lambda: hub_for(backend, namespace))


def _log_keeper(backend: Cluster) -> LogKeeper:
    """The backend's LogKeeper (called with state.lock held); what it keeps goes to the archive
    (see _keep_deleted_logs), which pod_metrics then does not keep again."""
    state = backend.state
    if state.log_keeper is None:
        state.log_keeper = LogKeeper(backend.api_client, lambda job_id, text: _keep_deleted_logs(backend, job_id, text))
    return state.log_keeper


def _keep_deleted_logs(backend: Cluster, job_id: str, text: str) -> None:
    """The logs of a job's deleted pods: an earlier run's while the job goes on (suspended by
    Kueue, to run again); the job's own when it has ended (an operator's deadline deleted them),
    unless its archive has its logs already (a cancel archives them before deleting)."""
    ns, name = naming.parse_job_id(job_id)
    st = hub_for(backend, ns).status(name)
    try:
        if st is None or st.terminal:
            if st is not None and not archive.logs(backend.home, job_id):
                archive.save(backend.home, with_exception(backend, job_id, st), logs=text)
            return
        archive.save_earlier_run(backend.home, job_id, text)
    except OSError:
        pass  # a courtesy: the job goes on


def _record_kind(rec: keys.JobRecord | None) -> str | None:
    """The gpujobs kind (a key of kinds.KINDS) a submit record names."""
    return rec.kind if rec is not None and rec.kind in KINDS else None


#: how long a status waits for the watch to deliver a job the apiserver already has
SEEN_WAIT_S = 5.0


def _get(backend: Cluster, ns: str, name: str, kind: str) -> dict | None:
    """The job object (None when the apiserver has none, or cannot say in time)."""
    info = KINDS[kind]
    try:
        return backend.api_client.call_api(
            f"/apis/{info.group}/{info.version}/namespaces/{ns}/{info.plural}/{name}", "GET",
            response_type="object", auth_settings=["BearerToken"], _return_http_data_only=True,
            _request_timeout=backend.http_timeout)
    except Exception:  # noqa: BLE001 - 404, 403, a timeout: "not known here"
        return None


def kind_of(backend: Cluster, ns: str, name: str) -> str | None:
    rec = keys.load_record(ns, name, backend.home)
    if rec is not None:
        return _record_kind(rec)
    # attach from elsewhere: probe each kind once
    return next((kind for kind in KINDS if _get(backend, ns, name, kind) is not None), None)


def _hub_job(backend: Cluster, job_id: str) -> tuple[StatusHub, str]:
    ns, name = naming.parse_job_id(job_id)
    hub = hub_for(backend, ns)
    if not hub.known(name):
        kind = kind_of(backend, ns, name)
        if kind is not None:
            hub.track_kind(kind)
        hub.wait_synced()
        obj = _get(backend, ns, name, kind) if kind is not None and not hub.known(name) else None
        if obj is not None and naming.LABEL_JOB in ((obj.get("metadata") or {}).get("labels") or {}):
            # created a moment ago (an already synced watch has not delivered it yet); a job
            # without gpujobs' label is never delivered: no point waiting for it
            hub.wait(name, SEEN_WAIT_S, lambda s: True)
    return hub, name


def _final(backend: Cluster, job_id: str, st: JobStatus | None) -> JobStatus | None:
    """The status to show: the archived one when the cluster has forgotten the job (or only knows
    it was deleted); a queued job's position filled in; an ended job archived (once) and, when it
    failed, its remote exception's summary first in its message."""
    arch = archive.status(backend.home, job_id) if st is None or st.reason == "Deleted" else None
    if arch is not None:
        return arch
    if st is None:
        return None
    if st.phase == "queued" and st.queue_position is None and st.position_available and st.queue:
        ns, name = naming.parse_job_id(job_id)
        hub = hub_for(backend, ns)
        if hub.ensure_positions(st.queue):
            st = hub.compute(name) or st
    if st.terminal:
        st = with_exception(backend, job_id, st)
        keep_ended(backend, job_id, st)
    return st


def with_exception(backend: Cluster, job_id: str, st: JobStatus) -> JobStatus:
    if st.phase != "failed":
        return st
    cache = backend.state.exception_summaries
    if job_id not in cache:
        cache[job_id] = exception_summary(backend, job_id)
    summary = cache[job_id]
    if not summary or st.message.startswith(summary):
        return st
    return st.with_(message=summary + (f"; {st.message}" if st.message else ""))


def exception_summary(backend: Cluster, job_id: str) -> str:
    """``ValueError: bad input (rank 0)`` from the job's result envelopes ('' when none failed or
    the job's key is not here): the cause first, as ``Job.exception()`` picks it."""
    from ....payload import open_envelope
    try:
        key = backend.job_key(job_id)
        found = [open_envelope(blob, key) for blob in outcomes(backend, job_id).values()]
    except Exception:  # noqa: BLE001 - no key, no envelope, a bad one: the status stays as it was
        return ""
    failed = sorted((o for o in found if not getattr(o, "ok", True)), key=lambda o: (o.collateral, o.rank))
    if not failed:
        return ""
    o = failed[0]
    from ....rank.outcome import exception_line
    return exception_line(o.exc_type, o.exc_message, o.rank)


def keep_ended(backend: Cluster, job_id: str, st: JobStatus, *, force: bool = False) -> None:
    """Archive an ended job once per process (its logs and envelopes read now, while they exist)."""
    done = backend.state.archived
    if job_id in done and not force:
        return
    done.add(job_id)
    try:
        text = "".join(logs(backend, job_id, _live_only=True))
    except Exception:  # noqa: BLE001 - the pods may be gone already: keep what the archive has
        text = None
    try:
        found = outcomes(backend, job_id)
    except Exception:  # noqa: BLE001
        found = {}
    try:
        archive.save(backend.home, st, logs=text or None, outcomes=found or None)
    except OSError:
        pass


def not_found(job_id: str) -> JobNotFound:
    return JobNotFound("job_id", f"job {job_id} not found (no such object in the cluster, none archived)",
                       Fix.run("kubernetes-jobs", text="list jobs with {}"))


def _forecast(backend: Cluster, st: JobStatus, refresh: bool = True, block: bool = True) -> JobStatus:
    """A queued job's reason, blocked_by and expected start (see .forecasting)."""
    if st.phase != "queued":
        return st
    ns, _ = naming.parse_job_id(st.job_id)
    return forecasts_for(backend, ns).with_forecast(st, refresh=refresh, block=block)


def status(backend: Cluster, job_id: str) -> JobStatus:
    hub, name = _hub_job(backend, job_id)
    st = _final(backend, job_id, hub.status(name))
    if st is None:
        raise not_found(job_id)
    return _forecast(backend, pod_metrics.for_backend(backend).with_metrics(st))


def wait(backend: Cluster, job_id: str, timeout: float | None = None) -> JobStatus:
    hub, name = _hub_job(backend, job_id)
    if not hub.known(name) and archive.has(backend.home, job_id):
        st = archive.status(backend.home, job_id)
    elif not hub.known(name) and kind_of(backend, *naming.parse_job_id(job_id)) is None:
        raise not_found(job_id)  # nothing to wait for: it would wait for ever
    else:
        st = _final(backend, job_id, _wait_unless_refused(hub, name, timeout))
    if st is None:
        raise not_found(job_id)
    return pod_metrics.for_backend(backend).with_metrics(st)


def _wait_unless_refused(hub: StatusHub, name: str, timeout: float | None) -> JobStatus | None:
    """The hub's wait for the end, cut short by the cluster's refusal (:meth:`StatusHub.refused`):
    a wait with expired credentials or a Role taken away would otherwise never end, and say nothing.
    The job keeps running; the error's fix says what to do, then wait again: only a refusal
    answered to a retry made during this wait ends it (the CLI's and the progress bar's
    one-second waits end once a retry falls inside one)."""
    began = time.time()  # refusals from before this wait (a new login since?) do not end it
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        st = hub.wait(name, 1.0 if left is None else max(0.0, min(1.0, left)), lambda s: s.terminal)
        if st is not None and st.terminal:
            return st
        refused = hub.refused(seen_after=began)
        if refused is not None:
            raise refused
        if left is not None and left <= 1.0:
            return st


def metrics_history(backend: Cluster, job_id: str) -> list:
    """``job.metrics()``: the job's kept samples, after reading its pods' log tails now."""
    pm = pod_metrics.for_backend(backend)
    st = _hub_status(backend, job_id)
    pm.refresh(job_id, terminal=st is not None and st.terminal, force=True)
    return pm.history(job_id)


def progress_history(backend: Cluster, job_id: str) -> list[dict]:
    """``job.progress()``: the ranks' ``ctx.progress`` reports from the pods' log tails."""
    pm = pod_metrics.for_backend(backend)
    st = _hub_status(backend, job_id)
    pm.refresh(job_id, terminal=st is not None and st.terminal, force=True)
    return pm.progress(job_id)


def subscribe(backend: Cluster, job_id: str, cb: Callable[[JobStatus], Any]) -> Callable[[], None]:
    """``cb`` on every status change, carrying the metrics already read (no log read in the
    watch thread: ``status()`` and ``metrics()`` read new samples)."""
    hub, name = _hub_job(backend, job_id)
    pm = pod_metrics.for_backend(backend)

    def with_known_metrics(st: JobStatus) -> Any:
        latest = pm.latest(st.job_id)
        st = st.with_(metrics=latest) if latest and not st.metrics else st
        known = pm.known_progress(st.job_id)  # [progress] as read, no log read here
        st = st.with_(progress=known) if known is not None else st
        return cb(_forecast(backend, st, block=False))  # the watch thread never waits for a list

    return hub.subscribe(name, with_known_metrics)


def check_queue(backend: Cluster, queue: str, namespace: str | None = None) -> None:
    """SpecError for a LocalQueue that does not exist in the namespace (and that no archived job
    of this user used), naming the LocalQueues that do: a typo is an error, not an empty table."""
    from ..submit.preflight import local_queue_names, those_that_exist
    ns = namespace or backend.namespace
    known = local_queue_names(backend, ns)
    if known is None or queue in known:
        return
    if any(a.queue == queue for a in archive.all_statuses(backend.home, ns)):
        return  # a LocalQueue since deleted still lists its jobs
    raise SpecError("queue", f"no LocalQueue {queue!r} in namespace {ns!r}"
                    + those_that_exist(queue, known, "LocalQueues there"),
                    Fix.run("queue", "NAME", "use one of them ({}), or ask the cluster admin to create "
                            f"{queue!r} (kubectl get localqueues -n {ns})"))


def jobs(backend: Cluster, queue: str | None = None) -> list[JobStatus]:
    ns = backend.namespace
    hub = hub_for(backend, ns)
    root = backend.home / "k8s-jobs" / ns
    for path in sorted(root.glob("*.json")) if root.exists() else []:
        kind = _record_kind(keys.load_record(ns, path.stem, backend.home))
        if kind:
            hub.track_kind(kind)
    hub.wait_synced()
    live = hub.all()
    for q in {s.queue for s in live if s.phase == "queued" and s.queue_position is None and s.queue}:
        if hub.ensure_positions(q):
            live = hub.all()
    archived = {a.job_id: a for a in archive.all_statuses(backend.home, ns)}
    # the cluster's word for what it still has; the archive's for what it forgot or only knows deleted
    out = [archived.pop(s.job_id, s) if s.reason == "Deleted" else s for s in live]
    seen = {s.job_id for s in out}
    out += [a for jid, a in archived.items() if jid not in seen]
    out = [s for s in out if queue is None or s.queue == queue]
    if any(s.phase == "queued" for s in out):
        forecasts_for(backend, ns).refresh()  # once for all of them
        out = [_forecast(backend, s, refresh=False) for s in out]
    return out


def outcomes(backend: Cluster, job_id: str) -> dict[int, bytes]:
    ns, name = naming.parse_job_id(job_id)
    cache = backend.state.outcomes
    if job_id in cache:
        return cache[job_id]
    found = results.outcomes(backend.api_client, ns, name)
    if not found:
        found = archive.outcomes(backend.home, job_id)
    st = _hub_status(backend, job_id)
    if found and (st is None or st.terminal):  # an empty read is never final: read again next time
        cache[job_id] = found
    return found


def _hub_status(backend: Cluster, job_id: str) -> JobStatus | None:
    """The watch hub's status only: no pod-log read for metrics (callers read logs themselves)."""
    hub, name = _hub_job(backend, job_id)
    return hub.status(name)


def logs(backend: Cluster, job_id: str, rank: int | None = None, follow: bool = False,
         _live_only: bool = False) -> Iterator[str]:
    """The job's logs from its pods; once its pods are gone, from the archive."""
    ns, name = naming.parse_job_id(job_id)

    def finished() -> bool:
        st = _hub_status(backend, job_id)
        return st is None or st.terminal

    pm = pod_metrics.for_backend(backend)
    live = _logs.logs(backend.api_client, ns, name, rank=rank, follow=follow,
                      is_done=finished if follow else None,
                      metrics_sink=lambda line: pm.feed(job_id, line))
    if _live_only:
        return live
    return _after_earlier_runs(backend, job_id, _or_archived(backend, job_id, live, rank), rank)


def _after_earlier_runs(backend: Cluster, job_id: str, lines: Iterator[str], rank: int | None) -> Iterator[str]:
    """The logs of the job's earlier runs (kept when a watcher saw their pods go: see
    pod_metrics), marked as such, then ``lines``; when ``lines`` start with earlier runs of their
    own (the ranks keep them on the checkpoint claim: gpujobs.rank.runner.runlogs), only ``lines``."""
    first = next(lines, None)
    if first == _logs.EARLIER_HEADER:
        yield first
        yield from lines
        return
    earlier = [ln for ln in archive.earlier_runs(backend.home, job_id).splitlines(keepends=True)
               if rank is None or ln.startswith(f"[rank {rank}] ")]
    if earlier:
        yield _logs.EARLIER_HEADER
        yield from earlier
        yield _logs.RAN_AGAIN
    if first is not None:
        yield first
    yield from lines


def _or_archived(backend: Cluster, job_id: str, live: Iterator[str], rank: int | None) -> Iterator[str]:
    any_line = False
    for line in live:
        any_line = True
        yield line
    if any_line:
        return
    text = archive.logs(backend.home, job_id)
    for line in (text or "").splitlines(keepends=True):
        if rank is None or line.startswith(f"[rank {rank}] "):
            yield line


