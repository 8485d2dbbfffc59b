"""Reasons, expected starts and plans for the local agent (see gpujobs.admission.forecast).

The agent holds one :class:`LocalForecasts`. It turns the agent's live records into a
:class:`~gpujobs.admission.forecast.Snapshot` (running gangs with their start, declared
limit, progress-based end and, while preempted, their stop deadline; queued jobs in order;
the runtimes of this machine's finished jobs as history) and runs the forecast for every
queued job off the hot path: the snapshot is taken under the agent's lock (a copy of the
records, cheap), the simulation runs outside it, on the forecaster thread
(:meth:`LocalForecasts.start`), and its result replaces the cache in one assignment.
Status views (``status()``, ``jobs()``, ``wait``, subscriptions) only read the cache, so they
never wait for a forecast; a queued job the cache does not hold yet has no reason until the
next refresh. A refresh runs when a queued job was viewed since the last one and something
changed (any status update; at most once per ``MIN_INTERVAL_S``, and never busier than half
the time: the pause after a refresh is at least as long as the refresh took), or every
``REFRESH_S`` while queued jobs are viewed (time-left texts move): a burst of submits costs
one refresh, not one per new job. ``plan()`` likewise copies under the lock and simulates
outside it.
"""
from __future__ import annotations

import threading
import time
import traceback
from typing import Any

from ...admission.forecast import Arrivals, Forecast, History, Job, Snapshot, StartErrors, forecast, plan
from ...admission.forecast.calibration import FirstForecasts
from ...spec import JobSpec
from ...status import JobStatus, Plan

REFRESH_S = 5.0  # recompute at least this often while asked (time-left texts move)
MIN_INTERVAL_S = 1.0  # at most once a second after changes (progress reports change often)


def progress_end(st: JobStatus) -> float | None:
    """The expected end a progress report gives, when the status carries one."""
    prog = getattr(st, "progress", None)
    if prog is None:
        return None
    end = prog.get("expected_end") if isinstance(prog, dict) else getattr(prog, "expected_end", None)
    try:
        return float(end) if end is not None else None
    except (TypeError, ValueError):
        return None


class LocalForecasts:
    def __init__(self, agent: Any, admission_config: dict):
        self.agent = agent
        self.adm = admission_config
        self._history: History | None = None
        self.start_errors = StartErrors()  # first forecasts against actual starts: the ranges
        self.arrivals = Arrivals()  # recent submissions: the jobs expected to come
        self.firsts = FirstForecasts(self.start_errors)  # queued jobs' first forecasts, until they start
        self._stops: set[tuple[str, float]] = set()  # (id, requeued at) of stops already learned
        self._cache: dict[str, Forecast] = {}  # replaced whole by each refresh, never mutated
        self._at = float("-inf")  # when the cache's snapshot was taken (monotonic)
        self._next = float("-inf")  # no refresh before this (MIN_INTERVAL_S, or as long as the last took)
        self._stale = True  # something changed since the cache's snapshot
        self._asked = False  # a queued job was viewed since the cache's snapshot
        self._wake = threading.Event()
        self._refreshing = threading.Lock()  # one refresh at a time
        self._thread: threading.Thread | None = None
        self._closed = False
        self.runs = 0  # forecasts computed (benchmarks and tests count them)

    # -------------------------------------------------------------- events
    def stale(self) -> None:
        """Something changed (called on every status update, under the agent's lock)."""
        if not self._stale:
            self._stale = True
            if self._asked:
                self._wake.set()

    def note_submitted(self, rec: Any) -> None:
        """A job was queued (under the agent's lock): it counts in the expected arrivals."""
        st = rec.status
        self.arrivals.add(st.submitted_at or time.time(),
                          Job(self.agent.workload(rec), user=st.user, name=st.name,
                              max_runtime_s=rec.spec.max_runtime_s,
                              grace_period_s=float(rec.spec.grace_period_s)))

    def note_finished(self, st: JobStatus, limit_s: float | None = None) -> None:
        """A job ended: its run's runtime (and declared limit, grace period) joins the history."""
        if self._history is not None:
            rec = self.agent.recs.get(st.job_id)
            grace = float(rec.spec.grace_period_s) if rec is not None else 30.0
            _learn(self._history, st, limit_s, grace, self._stops)
            self._stops = {s for s in self._stops if s[0] != st.job_id}

    @property
    def history(self) -> History:
        if self._history is None:
            h = History()
            for _, _, st, spec, _ in self.agent.store.all():
                spec = spec or {}
                _learn(h, st, spec.get("max_runtime_s"), float(spec.get("grace_period_s") or 30.0))
            self._history = h
        return self._history

    def _note_starts(self) -> None:
        """Queued jobs that had a first forecast and have started since: their error joins
        ``start_errors`` (under the agent's lock; called by :meth:`snapshot`)."""
        recs = self.agent.recs
        for jid, at in self.firsts.waiting():
            rec = recs.get(jid)
            if rec is None or rec.status.terminal and rec.status.started_at is None:
                self.firsts.forget(jid)  # gone, or ended (cancelled) without starting
                continue
            first = next((e.time for e in rec.status.events if e.kind == "started" and e.time >= at), None)
            if first is not None:
                self.firsts.started(jid, first)

    # ------------------------------------------------------------ refreshes
    def due(self, now: float | None = None) -> bool:
        """A refresh is wanted: a queued job was viewed since the last one, and something changed
        (no sooner than ``_next``) or the cache is older than ``REFRESH_S``."""
        now = time.monotonic() if now is None else now
        return self._asked and ((self._stale and now >= self._next) or now - self._at > REFRESH_S)

    def refresh(self) -> None:
        """Recompute every queued job's forecast: the snapshot under the agent's lock, the
        simulation outside it; then push the new fields to the queued jobs' subscribers."""
        ag = self.agent
        with self._refreshing:
            with ag.lock:
                copied = self._copy()
                self._stale = self._asked = False
                at = time.monotonic()
            snap = self._build(*copied)  # outside the lock: status requests do not wait for it
            try:
                cache = forecast(snap)
            except Exception:  # noqa: BLE001 - a forecast never breaks a status reply
                traceback.print_exc()
                cache = {}
            took = time.monotonic() - at
            self.runs += 1
            with ag.lock:
                self.firsts.note(snap, cache)
                self._cache, self._at = cache, at
                self._next = at + took + max(MIN_INTERVAL_S, took)
                for key in list(ag.subs):
                    rec = ag.recs.get(key)
                    if rec is not None and rec.status.phase == "queued":
                        ag.emit(rec)  # its reason and expected start moved

    def start(self) -> None:
        """The forecaster thread (the agent process's): refreshes whenever :meth:`due`."""
        self._thread = threading.Thread(target=self._loop, daemon=True, name="gpujobs-forecasts")
        self._thread.start()

    def close(self) -> None:
        self._closed = True
        self._wake.set()

    def _loop(self) -> None:
        while not self._closed:
            now = time.monotonic()
            if self.due(now):
                try:
                    self.refresh()
                except Exception:  # noqa: BLE001 - the thread keeps serving
                    traceback.print_exc()
                continue
            # asleep until a queued job is viewed or something changes, or until a refresh may be due
            wait = None
            if self._asked:
                wait = self._next - now if self._stale else REFRESH_S - (now - self._at)
            self._wake.wait(None if wait is None else max(wait, 0.01))
            self._wake.clear()

    # ------------------------------------------------------------ snapshot
    def snapshot(self) -> Snapshot:
        """The agent's jobs as a forecast's input (called under the agent's lock)."""
        return self._build(*self._copy())

    def _copy(self) -> tuple:
        """What a snapshot takes from the live records, under the agent's lock and cheap: per
        record the engine holds (in submission order) its id, spec, status (replaced, never
        changed, on every update), engine state and, when admitted, its flavor and stop facts;
        the Jobs are built from these outside the lock (:meth:`_build`)."""
        ag = self.agent
        eng = ag.engine
        now = time.time()
        mono = time.monotonic()
        self._note_starts()
        rows = []
        for rec in sorted(ag.recs.values(), key=lambda r: r.seq):
            state = eng.state(rec.id)
            if state is None:
                continue
            st = rec.status
            if state == "pending":
                if st.restarts and self._history is not None:  # requeued: how long it took to stop
                    _learn_stops(self._history, st, self._stops)
                rows.append((rec.id, rec.spec, st, state, None, 0.0, None, None, None))
                continue
            adm = eng.admission(rec.id)
            left = max(0.0, rec.deadline - mono) if rec.stopping else 0.0
            rows.append((rec.id, rec.spec, st, state, adm.flavor if adm is not None else None, left,
                         rec.stopping, rec.runtime.get("preempt_deadline"), rec.runtime.get("preempted_by")))
        return now, rows, self.history, self.arrivals.expected(now)  # the expected arrivals: a copy

    def _build(self, now: float, rows: list, history: History,
               arrivals: list[tuple[float, Job]] | None = None) -> Snapshot:
        """The Snapshot of :meth:`_copy`'s rows (needs no lock)."""
        from types import SimpleNamespace
        workload = self.agent.workload
        running, pending = [], []
        for jid, spec, st, state, flavor, left, stopping, deadline, by in rows:
            job = Job(workload(SimpleNamespace(id=jid, spec=spec, status=st)), user=st.user, name=st.name,
                      max_runtime_s=spec.max_runtime_s, grace_period_s=float(spec.grace_period_s))
            if state == "pending":
                pending.append(job)
                continue
            job.flavor = flavor
            job.started = st.started_at or now
            job.expected_end = progress_end(st)
            if stopping == "preempt" or state == "evicting":
                # the agent records the preemptor and the (wall-clock) end of the grace period
                job.stops_at = float(deadline or now + left)
                job.preempted_by = by
            elif stopping:  # cancelled or stopping: its quota comes back by the deadline
                job.expected_end = now + left
            running.append(job)
        return Snapshot(self.adm["queues"], self.adm["cohorts"], self.adm["priorities"],
                        self.adm["default_priority"], running, pending, history, now,
                        kueue_version=self.adm.get("kueue_version"), start_errors=self.start_errors,
                        arrivals=arrivals or [])

    # --------------------------------------------------------------- views
    def fields(self, jid: str) -> dict[str, Any]:
        """JobStatus fields for a queued job (reason, blocked_by, expected_start(+_basis, _range),
        not_before) from the last refresh; never computes (a job it does not hold yet has none until the next)."""
        if not self._asked:
            self._asked = True
            self._wake.set()
        fc = self._cache.get(jid)
        if fc is None:
            return {}
        return {"reason": fc.reason, "blocked_by": fc.blocked_by,
                "expected_start": fc.expected_start, "expected_start_basis": fc.basis,
                "not_before": fc.not_before, "expected_start_range": fc.expected_start_range}

    def plan(self, spec: JobSpec, name: str = "", user: str = "") -> Plan:
        """The what-if for a job with ``spec``; nothing is queued. The snapshot is taken under
        the agent's lock, the simulation runs outside it (called without the lock held, other
        requests do not wait for it)."""
        from types import SimpleNamespace
        with self.agent.lock:
            now = time.time()
            # the agent's own request shape (GPU slots, or CPUs for 0-GPU ranks), as if queued now
            w = self.agent.workload(SimpleNamespace(id=f"(plan {name or 'job'})", spec=spec,
                                                     status=SimpleNamespace(submitted_at=now)))
            too_big = self.agent.too_big_for_machine(spec, w.queue)
            if too_big:  # what submit would refuse, in its words
                self.agent.engine.cluster_queue_of(w.queue)  # an unknown queue is said first, as submit does
                return Plan(admit_now=False, position=None, preempts=(), expected_start=None,
                            reason=too_big, basis="never: it can never fit this machine", queue=w.queue)
            copied = self._copy()
        snap = self._build(*copied)
        job = Job(w, user=user, name=name, max_runtime_s=spec.max_runtime_s,
                  grace_period_s=float(spec.grace_period_s))
        snap.now = now
        fc = plan(snap, job)
        return Plan(admit_now=fc.admit_now, position=fc.position, preempts=fc.preempts,
                    expected_start=fc.expected_start, reason=fc.reason, basis=fc.basis,
                    blocked_by=fc.blocked_by, not_before=fc.not_before, queue=w.queue,
                    expected_start_range=fc.expected_start_range)


def _learn(h: History, st: JobStatus, limit_s: float | None = None, grace_s: float = 30.0,
           seen: set[tuple[str, float]] | None = None) -> None:
    """A finished run (succeeded or failed: either gave its quota back; a cancel does not say
    how long the job would have run) joins the history, with its declared limit; and each of
    its preemptions not ``seen`` yet, how long it took to stop."""
    if st.phase in ("succeeded", "failed") and st.started_at and st.finished_at:
        h.add(st.user, st.name, st.queue, st.finished_at - st.started_at, limit_s, grace_s)
    _learn_stops(h, st, seen)


def _learn_stops(h: History, st: JobStatus, seen: set[tuple[str, float]] | None = None) -> None:
    """How long each preemption of ``st`` took to stop (its 'preempted' event to its 'requeued'
    one), once per preemption (``seen``: (id, requeued at) already learned)."""
    preempted = None
    for e in st.events:
        if e.kind == "preempted":
            preempted = e.time
        elif e.kind == "requeued" and preempted is not None:
            if seen is None or (st.job_id, e.time) not in seen:
                h.add_stop(st.user, st.name, e.time - preempted)
                if seen is not None:
                    seen.add((st.job_id, e.time))
            preempted = None
