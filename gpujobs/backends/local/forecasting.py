"""Reasons, expected starts and plans for the local agent (see gpujobs.admission.forecast).

The agent holds one :class:`LocalForecasts`. It turns the agent's live records into a
:class:`~gpujobs.admission.forecast.Snapshot` (running gangs with their start, declared
limit, progress-based end and, while preempted, their stop deadline; queued jobs in order;
the runtimes of this machine's finished jobs as history), runs the forecast for every
queued job, and keeps the result until something changes (any status update) or
``REFRESH_S`` passes, at most once per ``MIN_INTERVAL_S`` (unless a queued job is new to
it). Everything here runs under the agent's lock and only reads.
"""
from __future__ import annotations

import time
from typing import Any

from ...admission.forecast import Forecast, History, Job, Snapshot, forecast, plan
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
        self._cache: dict[str, Forecast] = {}
        self._misses: set[str] = set()
        self._at = 0.0
        self._stale = True

    # -------------------------------------------------------------- events
    def stale(self) -> None:
        self._stale = True

    def note_finished(self, st: JobStatus, limit_s: float | None = None) -> None:
        """A job ended: its run's runtime (and declared limit) joins the history."""
        if self._history is not None:
            _learn(self._history, st, limit_s)

    @property
    def history(self) -> History:
        if self._history is None:
            h = History()
            for _, _, st, spec, _ in self.agent.store.all():
                _learn(h, st, (spec or {}).get("max_runtime_s"))
            self._history = h
        return self._history

    # ------------------------------------------------------------ snapshot
    def snapshot(self) -> Snapshot:
        ag = self.agent
        eng = ag.engine
        now = time.time()
        mono = time.monotonic()
        running, pending = [], []
        for rec in sorted(ag.recs.values(), key=lambda r: r.seq):
            state = eng.state(rec.id)
            if state is None:
                continue
            st = rec.status
            job = Job(ag._workload(rec), user=st.user, name=st.name,
                      max_runtime_s=rec.spec.max_runtime_s,
                      grace_period_s=float(rec.spec.grace_period_s))
            if state == "pending":
                pending.append(job)
                continue
            adm = eng.admission(rec.id)
            job.flavor = adm.flavor if adm is not None else None
            job.started = st.started_at or now
            job.expected_end = progress_end(st)
            left = max(0.0, rec.deadline - mono) if rec.stopping else 0.0
            if rec.stopping == "preempt" or state == "evicting":
                # the agent records the preemptor and the (wall-clock) end of the grace period
                job.stops_at = float(rec.runtime.get("preempt_deadline") or now + left)
                job.preempted_by = rec.runtime.get("preempted_by")
            elif rec.stopping:  # cancelled or stopping: its quota comes back by the deadline
                job.expected_end = now + left
            running.append(job)
        return Snapshot(self.adm["queues"], self.adm["cohorts"], self.adm["priorities"],
                        self.adm["default_priority"], running, pending, self.history, now)

    # --------------------------------------------------------------- views
    def fields(self, jid: str) -> dict[str, Any]:
        """JobStatus fields for a queued job: reason, blocked_by, expected_start(+_basis, _range),
        not_before."""
        age = time.monotonic() - self._at
        new = jid not in self._cache and jid not in self._misses
        if new or age > REFRESH_S or (self._stale and age >= MIN_INTERVAL_S):
            try:
                self._cache = forecast(self.snapshot())
            except Exception:  # noqa: BLE001 - a forecast never breaks a status reply
                import traceback
                traceback.print_exc()
                self._cache = {}
            self._at = time.monotonic()
            self._stale = False
            self._misses = set()
        fc = self._cache.get(jid)
        if fc is None:
            self._misses.add(jid)  # not in the engine's queue: do not recompute for it again
            return {}
        return {"reason": fc.reason, "blocked_by": fc.blocked_by,
                "expected_start": fc.expected_start, "expected_start_basis": fc.basis,
                "not_before": fc.not_before, "expected_start_range": fc.expected_start_range}

    def plan(self, spec: JobSpec, name: str = "", user: str = "") -> Plan:
        """The what-if for a job with ``spec``; nothing is queued."""
        now = time.time()
        from types import SimpleNamespace
        # the agent's own request shape (GPU slots, or CPUs for 0-GPU ranks), as if queued now
        w = self.agent._workload(SimpleNamespace(id=f"(plan {name or 'job'})", spec=spec,
                                                 status=SimpleNamespace(submitted_at=now)))
        job = Job(w, user=user, name=name, max_runtime_s=spec.max_runtime_s,
                  grace_period_s=float(spec.grace_period_s))
        snap = self.snapshot()
        snap.now = now
        fc = plan(snap, job)
        return Plan(admit_now=fc.admit_now, position=fc.position, preempts=fc.preempts,
                    expected_start=fc.expected_start, reason=fc.reason, basis=fc.basis,
                    blocked_by=fc.blocked_by, not_before=fc.not_before, queue=w.queue,
                    expected_start_range=fc.expected_start_range)


def _learn(h: History, st: JobStatus, limit_s: float | None = None) -> None:
    """A finished run (succeeded or failed: either gave its quota back; a cancel does not say
    how long the job would have run) joins the history, with its declared limit."""
    if st.phase in ("succeeded", "failed") and st.started_at and st.finished_at:
        h.add(st.user, st.name, st.queue, st.finished_at - st.started_at, limit_s)
