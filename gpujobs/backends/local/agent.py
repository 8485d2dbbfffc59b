"""The local agent: a detached one-machine batch scheduler that owns this machine's GPUs.

Started on demand by the first client call (its process: :mod:`.daemon`), so jobs outlive
the notebook or script that submitted them; it answers clients on a Unix socket
(:mod:`.server`). It keeps jobs in SQLite (:mod:`.store`), admits them with
the admission engine (queues, quota, priorities, preemption, gangs), gives each rank its
own device indices (CUDA_VISIBLE_DEVICES), launches gangs through
:func:`.launchers.make_gang` (ranks forked from a warm :mod:`.zygote`), pushes status
changes to subscribers, and exits after ``GPUJOBS_AGENT_IDLE_S`` seconds with nothing to
do, or on ``{"op": "stop"}``. A new agent re-adopts live ranks of a crashed one
(:mod:`.adoption`), or marks their jobs failed with reason "lost".

This module is the scheduler (records, commands, the admit/start/stop/end loop, the process's
run and stop); a job's record is :class:`.records.Rec`. The agent owns, and gives each the few
things it uses: its recovery at start-up (:class:`.adoption.Recovery`: what each stored job's
processes and files say), the watcher of its running gangs (:class:`.liveness.GangWatcher`)
and its socket server (:class:`.server.AgentServer`). Specs arrive as plain data over the
socket and are typed once (:meth:`~gpujobs.spec.JobSpec.stored`); the agent and the launchers
use the JobSpec.
"""
from __future__ import annotations

import json
import os
import queue as queue_mod
import signal
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from ...admission import Engine, PodSet, Workload
from ...config import settings
from ...rank.contract import OUTCOME, JobFolder
from ...devices import beyond_machine, local_gpu_slots
from .queue_config import admission_config
from ...errors import Fix, GpuJobsError, JobNotFound, QuotaError
from ...spec import JobSpec
from ...status import TIME_LIMIT, JobEvent, JobStatus, time_limit_message
from . import private
from .adoption import EXIT_FILE_GRACE_S, Adopted, Found, Recovery, exit_from_outcomes
from .diskspace import LOW_SPACE_BYTES, describe, free_bytes
from .forecasting import LocalForecasts
from .gang import GangExit
from .lean import gang_is_lean
from .launchers import make_gang
from .liveness import GangWatcher, final_progress
from .records import STOP_MESSAGES, Rec, agent_log, create_time, ended_during_grace, mark_restart
from .server import AgentServer
from .startup import not_started, note_after, startup_note
from .store import Store, status_from_dict
from .zygote import Zygote, load_times, start_zygote

CANCEL_GRACE_S = 3.0
ZYGOTE_WAIT_S = 10.0  # a fresh agent holds admissions this long at most for its zygote
LIST_SLICE = 500  # live jobs viewed per hold of the lock by jobs()
MAX_LOOP_FAILURES = 50  # loop rounds failing in a row before the agent gives up (logged)


class Agent:
    """The scheduler: records, commands from clients, and the loop that admits, starts, stops
    and ends gangs (recovery: :class:`.adoption.Recovery`; running gangs:
    :class:`.liveness.GangWatcher`; the socket: :class:`.server.AgentServer`)."""

    def __init__(self, home: Path):
        self.home = Path(home)
        cfg = settings()
        self.slots: int
        self.real: bool  # real GPUs (NVML found them), else CPU ranks stand in for them
        self.slots, self.real = local_gpu_slots(local=cfg.local)
        self.slots_set_queues = not cfg.local.queues  # queue "default" has every slot
        adm = admission_config(self.slots, cfg)
        self.engine = Engine(adm["queues"], adm["cohorts"], adm["priorities"], adm["default_priority"],
                             kueue_version=adm["kueue_version"])
        self.forecasts = LocalForecasts(self, adm)  # reasons, expected starts, plans [plan-eta]
        self.idle_s = cfg.local.idle_timeout_s
        self.store = Store(self.home / "state.db")
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.wake = threading.Event()
        self.recs: dict[str, Rec] = {}
        self.free = list(range(self.slots))
        self.dirty: set[str] = set()
        self.to_start: list[tuple[Rec, Any]] = []  # admitted by tick(), started by step()
        self.subs: dict[str, list[queue_mod.Queue]] = {}
        self.clients = 0
        self.last_active = time.monotonic()
        self.stopping = False
        self.zygote: Zygote | None = None  # forks ranks with torch imported
        self.zygote_started = 0.0
        self.lean_zygote: Zygote | None = None  # forks lean gangs (.lean): no torch loaded
        self.lean_started = 0.0
        self.zygote_load_s = load_times(home)  # each zygote's last load (this home's earlier agents)
        self.torch_zygote_deferred = False  # started by the first job that needs it (daemon)
        self.lean_zygote_deferred = False  # the same for the lean one
        self.write_error: GpuJobsError | None = None  # the last failed state write, if any
        self.exit_reason = ""  # why run() ended: "stop", "idle", or the unexpected error
        self.seq = self.store.max_seq()
        self.watcher = GangWatcher(self.lock, self.emit, self.dirty)
        with self.lock:
            self._recover()

    # ------------------------------------------------------------- records
    @staticmethod
    def _need(spec: JobSpec) -> tuple[int, int]:
        """(ranks, GPU slots per rank); a rank asking for 0 GPUs takes no slot (it is charged
        CPUs, see workload), requested GPUs take slots (CPU ranks when there is no GPU)."""
        return spec.world_size, spec.gpus_per_proc

    def too_big_for_machine(self, spec: JobSpec, queue: str) -> str | None:
        """Why no queue of this machine could ever hold ``spec`` (more GPU slots than the agent
        has), with the machine's fix; None when one may."""
        world, per = self._need(spec)
        return beyond_machine(world * per, self.slots, self.real, queue, self.slots_set_queues)

    def workload(self, rec: Rec) -> Workload:
        world, per = self._need(rec.spec)
        ask = {"gpu": per} if per else {"cpu": float(rec.spec.cpus_per_proc)}
        return Workload(rec.id, rec.spec.queue or "default",
                        [PodSet("ranks", world, ask)], priority=rec.spec.priority,
                        created=rec.status.submitted_at or 0.0)

    def _update(self, rec: Rec, event: str | None = None, msg: str = "", **changes: Any) -> None:
        if event:
            changes["events"] = rec.status.events + (JobEvent(time.time(), event, msg),)
        rec.status = rec.status.with_(**changes)
        self.dirty.add(rec.id)
        self.forecasts.stale()
        self.emit(rec)

    def view(self, rec: Rec) -> JobStatus:
        """A live record's status as clients see it (queue position, forecasts, start-up note)."""
        st = rec.status
        if st.phase == "queued":
            return st.with_(queue_position=self.engine.position(rec.id),
                            **self._held_for_zygote(self.forecasts.fields(rec.id)))
        if st.phase == "running":
            return self._with_startup_note(rec, st)
        return st

    def _held_for_zygote(self, fields: dict[str, Any]) -> dict[str, Any]:
        """A queued job's forecast ``fields``, told when admissions wait for a loading zygote
        (:meth:`_zygote_warming`) and the job would start now: the reason says so, the start
        is when the zygote's last load (an earlier agent's) says it will be ready (any moment
        when none is known or that time has passed), and the range reaches the end of the wait."""
        start, now = fields.get("expected_start"), time.time()
        if start is None or start > now + 1.0:
            return fields  # it waits for quota anyway
        warming = self._warming_zygote()  # None at once when no zygote warms (the common case)
        if warming is None:
            return fields
        _, started, lean = warming
        so_far = time.monotonic() - started
        left = max(0.0, ZYGOTE_WAIT_S - so_far)
        what = "its Python runtime" if lean else "torch"
        last = self.zygote_load_s.get(lean)
        lo, hi = fields.get("expected_start_range") or (start, start)
        due = now + min(left, last - so_far) if last is not None and last > so_far else start
        return {**fields,
                "expected_start": max(start, due),
                "reason": f"quota free; the agent is still loading {what} for its ranks ({so_far:.0f} s so far"
                          f"{f', {last:.{0 if last >= 2 else 1}f} s last time' if last is not None else ''}; "
                          f"admissions wait for it up to {left:.0f} s more)",
                "expected_start_basis": "; ".join(b for b in (
                    fields.get("expected_start_basis"), f"admissions wait for the agent to load {what}"
                    + (f" (its last load took {last:.1f} s)" if last is not None else "")) if b),
                "expected_start_range": (lo, max(hi, now + left))}

    def _with_startup_note(self, rec: Rec, st: JobStatus) -> JobStatus:
        """A gang whose ranks take long to reach the job's function says which (.startup)."""
        job_dir = rec.runtime.get("job_dir")
        if rec.runtime.get("function_started") or not job_dir or st.started_at is None:
            return st
        ranks = [0] if rec.spec.framework == "ray" else list(range(max(st.gang_size, 1)))
        result_dir = JobFolder(job_dir).result_dir
        if not not_started(result_dir, ranks):
            rec.runtime["function_started"] = True  # read no more files for this run
            return st
        note = startup_note(result_dir, ranks, st.started_at, time.time(),
                            note_after(dict(rec.spec.env)))
        if not note:
            return st
        return st.with_(message=f"{st.message} · {note}" if st.message else note,
                        extra={**st.extra, "startup": note})

    def emit(self, rec: Rec) -> None:
        """Push ``rec`` to its subscribers (and every-job ones); wake waiters."""
        for key in (rec.id, "*"):
            for q in self.subs.get(key, ()):
                q.put(rec)
        self.cond.notify_all()

    def _flush(self) -> None:
        """Write changed records; drop finished ones from memory once their final state is
        stored (queries read them from SQLite), so each loop round costs live jobs only."""
        if self.dirty:
            recs = [self.recs[i] for i in self.dirty if i in self.recs]
            self.store.write([(r.id, r.seq, r.status, r.spec.to_dict(), r.runtime) for r in recs])
            self.dirty.clear()  # only once written: a failed write (disk full) is retried
            for r in recs:
                if r.status.terminal and r.gang is None and not r.starting:
                    del self.recs[r.id]
            self.write_error = None
        self._let_go()

    def _let_go(self) -> None:
        """Open the start gate of gangs whose start (pids, launch token) is now stored: a
        new agent after a crash knows every rank that runs the job (never two runs)."""
        for r in self.recs.values():
            if r.held and r.gang is not None:
                try:
                    r.gang.release()
                    r.held = False
                except OSError as exc:  # a full disk: the ranks wait, retried next round
                    agent_log(f"cannot let the ranks of {r.id} start (will retry): {exc}")

    def _flush_safely(self) -> None:
        """``_flush``; a failed write (a full disk) is logged once and retried next round: the
        agent keeps answering and scheduling from memory meanwhile."""
        try:
            self._flush()
        except GpuJobsError as exc:
            if str(exc) != str(self.write_error):
                agent_log(f"cannot record job state (will retry): {exc}")
            self.write_error = exc

    # ------------------------------------------------------------ recovery
    def _recover(self) -> None:
        """Every stored job back, as :class:`.adoption.Recovery` finds it: queued again,
        re-adopted, finished, or marked lost."""
        for found in Recovery(self.store, self.home).found():
            self._restore(found)
        self._flush_safely()  # a full disk: retried by the loop, start-up goes on

    def _restore(self, found: Found) -> None:
        rec, st, runtime = found.rec, found.rec.status, found.rec.runtime
        self.recs[rec.id] = rec
        if found.stray:
            self._update(rec, "strays-stopped", f"the previous agent's unrecorded ranks "
                         f"{found.stray} were stopped")
        if found.alive:
            self._adopt(rec, found)
        elif found.done is None:  # never started
            if st.phase == "admitted":
                self._update(rec, "queued", "the previous agent stopped while starting it",
                             phase="queued")
            self._enqueue(rec, recovered=True)
        elif st.phase == "preempted":
            own = ended_during_grace(found.done, found.folder.result_dir)
            if own is not None:
                self._finish(rec, own, note=" (during its preemption grace period, while "
                                            "the agent was down)")
            else:
                self._requeue(rec, recovered=True)
        elif found.done.message != "lost":
            self._finish(rec, found.done, note=" (ended while the agent was down)")
        elif full := self._no_room_for_results(rec, found.done):
            # Its end (reported before the agent died) could not be stored: the disk is
            # full; that is its cause, not the agent's stop.
            msg = (f"its ranks ended and neither their exit status nor their result could "
                   f"be recorded: {full}")
            self._update(rec, "finished", msg, phase="failed", reason="disk-full",
                         message=msg, finished_at=time.time())
        else:
            pids = [pid for pid, _ in runtime.get("pids", [])]
            self._update(rec, "finished", "lost", phase="failed", reason="lost",
                         message=f"the agent stopped while the job was {st.phase}; its rank "
                                 f"processes {pids} are gone and left no exit status",
                         finished_at=time.time())

    def _adopt(self, rec: Rec, found: Found) -> None:
        """A previous agent's ranks still running: watched by pid (only pids still the job's).
        A preempted gang is adopted too: it holds its slots until it has ended, at the grace
        deadline the previous agent announced (never two runs at once)."""
        st, runtime = rec.status, rec.runtime
        world, _ = self._need(rec.spec)
        rec.gang = Adopted(found.alive, found.folder.result_dir, world)
        devices = [d for rank in runtime.get("devices", []) for d in rank]
        try:
            self.engine.restore_admitted(self.workload(rec))
        except GpuJobsError as exc:  # its queue is gone or shrank: do not block start-up
            rec.gang.terminate(2.0)  # short: clients wait for this agent to start
            rec.gang = None
            self._update(rec, "finished", str(exc), phase="failed", reason="unschedulable",
                         message=f"stopped after an agent restart: {exc}", finished_at=time.time())
            return
        self.free = [d for d in self.free if d not in devices]
        self._update(rec, "adopted", f"a restarted agent re-adopted ranks {found.alive}")
        if st.phase == "preempted":
            left = float(runtime.get("preempt_deadline", 0.0)) - time.time()
            rec.stopping = "preempt"
            rec.deadline = time.monotonic() + max(0.0, left)
            rec.gang.signal_all(signal.SIGTERM)  # again: it may have been missed
        else:
            self.watcher.sample(rec, runtime.get("devices") if self.real and devices else None)

    def _enqueue(self, rec: Rec, recovered: bool = False) -> None:
        try:
            self.engine.add(self.workload(rec))
        except GpuJobsError as exc:
            if not recovered:
                raise
            self._update(rec, "finished", str(exc), phase="failed", reason="unschedulable",
                         message=f"cannot be queued after an agent restart: {exc}",
                         finished_at=time.time())

    # ------------------------------------------------------------- commands
    def submit(self, msg: dict) -> dict:
        spec = JobSpec.stored(msg["spec"])  # the one conversion (validated: SpecError)
        jid = msg["id"]
        # The folder comes from the id, never from the client: jobs/<id>, a private folder
        # of this user's (SpecError otherwise; a "job_dir" sent along must name it).
        job_dir = str(private.job_folder(self.home, jid, msg.get("job_dir")))
        if jid in self.recs or self.store.status(jid) is not None:
            return {"ok": True, "id": jid, "cpu_ranks": not self.real}  # idempotent retry
        world, per = self._need(spec)
        now = time.time()
        st = JobStatus(job_id=jid, phase="queued", name=msg.get("name", jid), queue=spec.queue or "default",
                       priority=spec.priority, user=msg.get("user", ""), gpus=spec.total_gpus,
                       gang_size=world, submitted_at=now, cpu_ranks=not self.real,
                       extra={"return_all": spec.return_all, "job_dir": job_dir})
        self.seq += 1
        rec = Rec(jid, self.seq, st, spec,
                  {"cwd": msg.get("cwd"), "job_dir": job_dir, "restarts": 0})
        self.engine.cluster_queue_of(st.queue)  # unknown queue -> SpecError listing known ones
        too_big = self.too_big_for_machine(spec, st.queue)
        if too_big:  # no queue could hold it: the fix is the machine's, not a queue's
            raise QuotaError(too_big)
        self.engine.add(self.workload(rec))   # unknown priority / never fits -> errors
        self.recs[jid] = rec
        if self._lean(rec):
            self._want_lean_zygote()
        else:
            self._want_torch_zygote()
        self._update(rec, "submitted", f"{world} rank(s) × {per} slot(s) in queue {st.queue}")
        self._update(rec, "queued")
        try:
            self._flush()
        except GpuJobsError:  # not recorded (a full disk): not submitted either
            self.engine.remove(jid)
            self.recs.pop(jid, None)
            self.dirty.discard(jid)
            raise
        self.forecasts.note_submitted(rec)  # the expected arrivals of later forecasts
        self.wake.set()
        return {"ok": True, "id": jid, "cpu_ranks": not self.real}

    def cancel(self, jid: str) -> None:
        rec = self.recs.get(jid)
        if rec is None:
            self.status(jid)  # JobNotFound for an id no one submitted; a finished job: no-op
            return
        if rec.status.terminal:
            return
        if rec.starting:  # its gang is being started outside the lock: stopped once started
            self._update(rec, "cancelled", "cancelled by user", phase="cancelled",
                         message="cancelled by user", finished_at=time.time())
            rec.stopping = "cancel"
            self.wake.set()
            return
        if rec.ending:  # its gang is being ended outside the lock
            if rec.stopping == "preempt":  # end it for good instead of requeueing it
                self._update(rec, "cancelled", "cancelled by user", phase="cancelled",
                             message="cancelled by user", finished_at=time.time())
                rec.stopping = "cancel"
            return  # otherwise it finished by itself: its own end stands
        if rec.gang is None:
            self.engine.remove(jid)
            self._update(rec, "cancelled", "cancelled by user", phase="cancelled",
                         message="cancelled by user", finished_at=time.time())
            self._forget(rec)
        else:
            self._update(rec, "cancelled", "cancelled by user", phase="cancelled",
                         message="cancelled by user", finished_at=time.time())
            self._stop_gang(rec, "cancel", CANCEL_GRACE_S)
        self.wake.set()

    def _stop_gang(self, rec: Rec, why: str, grace: float) -> None:
        rec.stopping = why
        rec.deadline = time.monotonic() + grace
        rec.gang.signal_all(signal.SIGTERM)

    # ---------------------------------------------------------------- loop
    def step(self) -> None:
        """One round of the loop. Admitted gangs are started (forks, files), and gangs that
        ended, or must stop now, are cleaned up (waiting for their processes), without the
        lock: other clients' requests (a burst of submits) do not wait for them."""
        self._await_zygote()
        with self.lock:
            ending = self.tick()
            starting, self.to_start = self.to_start, []
        self._launch(starting)
        results = [(rec, self._end_gang_safely(rec)) for rec in ending]
        if results:
            with self.lock:
                for rec, result in results:
                    try:
                        self._ended(rec, result)
                    except Exception as exc:  # noqa: BLE001 - the others still end
                        rec.ending = False
                        self._decision_failed(rec.id, "ending its gang", exc)
                self._flush_safely()

    def _await_zygote(self) -> None:
        """A fresh agent's zygote takes a few seconds to warm up: with work waiting, wait for it
        here, without the lock (clients are answered meanwhile), at most 10 s after its start."""
        with self.lock:
            warming = self._warming_zygote()
        if warming is not None:
            z, started, _ = warming
            z.ready(min(ZYGOTE_WAIT_S - (time.monotonic() - started), 0.5))

    def _zygote_warming(self) -> bool:
        """A zygote a queued job will fork from is still importing, for at most ZYGOTE_WAIT_S
        after it was started: admissions wait for it (ranks it forks start fast and leave exit
        files). One that died meanwhile holds nothing (its ranks start as fresh interpreters)."""
        return self._warming_zygote() is not None

    def _warming_zygote(self) -> tuple[Any, float, bool] | None:
        """The zygote (its start, whether it is the lean one) that queued jobs wait for, if one
        is warming."""
        now = time.monotonic()
        warming = [(z, started, lean) for z, started, lean in
                   ((self.zygote, self.zygote_started, False),
                    (self.lean_zygote, self.lean_started, True))
                   if z is not None and not z.ready(0) and z.alive() and now - started < ZYGOTE_WAIT_S]
        if not warming:
            return None
        pending = self.engine.pending()
        needed = {self._lean(self.recs[j]) for j in pending if j in self.recs}
        for z, started, lean in warming:
            if lean in needed:
                return z, started, lean
        return None

    def tick(self) -> list[Rec]:
        """Schedule; return the records whose gang is to be ended (marked ``ending``).

        Each decision is applied on its own: one that is inconsistent (a workload both
        admitted and preempted in one pass, an admission with too few free slots) or that
        raises is logged and marked on the job it concerns; the others still apply."""
        gangs = [r for r in self.recs.values() if r.gang is not None]  # one pass over the queue
        self._enforce_time_limits(recs=gangs)
        ending = [r for r in gangs if r.gang is not None and not r.ending and self._due(r)]
        for rec in ending:
            rec.ending = True
        if self._zygote_warming():
            return ending  # admit once it is ready (step waits for it without the lock)
        d = self.engine.schedule()
        admitted = {adm.id for adm in d.admitted}
        skip: set[str] = set()
        for victim, by in d.preempted:
            try:
                rec = self.recs[victim]
                if rec.stopping or rec.ending:  # already on its way out: its end frees the quota
                    continue
                if victim in admitted and rec.gang is None:
                    # Admitted and preempted in the same pass: it never started; keep it queued.
                    agent_log(f"scheduler decision for {victim}: admitted and preempted (by {by}) in "
                         f"one pass; it was not started and stays queued")
                    skip.add(victim)
                    self.engine.requeue(victim)
                    continue
                self._preempt(rec, by)
            except Exception as exc:  # noqa: BLE001 - one bad decision must not stop the loop
                self._decision_failed(victim, f"preempting it (by {by})", exc)
        for adm in d.admitted:
            if adm.id in skip:
                continue
            try:
                self._admit(self.recs[adm.id])
            except Exception as exc:  # noqa: BLE001
                self._decision_failed(adm.id, "starting it", exc)
        if d:  # positions moved
            for key in list(self.subs):
                queued = self.recs.get(key)
                if queued is not None and queued.status.phase == "queued":
                    self.emit(queued)
        self._flush_safely()
        return ending

    def _preempt(self, rec: Rec, by: str) -> None:
        grace = float(rec.spec.grace_period_s)
        self._update(rec, "preempted", f"by {by}; {grace:g} s to checkpoint", phase="preempted")
        if rec.gang is not None:
            # Recorded (wall clock) so an agent restarted meanwhile honours the same deadline.
            rec.runtime["preempt_deadline"] = time.time() + grace
            rec.runtime["preempted_by"] = by
            self._flush_safely()  # recorded before the ranks are told: a restart knows why they stop
            self._stop_gang(rec, "preempt", grace)
        else:
            self._requeue(rec, by=by)

    def _decision_failed(self, jid: str, doing: str, exc: BaseException) -> None:
        """Log a decision that could not be applied and mark its job; never raises."""
        agent_log(f"agent error while {doing} for job {jid}: {type(exc).__name__}: {exc}\n"
             + traceback.format_exc())
        try:
            rec = self.recs.get(jid)
            if rec is None or rec.status.terminal:
                return
            if rec.gang is None and rec.status.phase in ("queued", "admitted"):
                self._release(rec)
                self.engine.finish(rec.id)
                self._update(rec, "finished", f"agent error: {exc}", phase="failed",
                             reason="agent-error", message=f"the agent failed while {doing}: "
                             f"{type(exc).__name__}: {exc}", finished_at=time.time())
                self._forget(rec)
            else:
                self._update(rec, "agent-error", f"while {doing}: {type(exc).__name__}: {exc}")
        except Exception:  # noqa: BLE001
            agent_log(traceback.format_exc())

    def _enforce_time_limits(self, now: float | None = None, recs: Any = None) -> None:
        """``max_runtime_s`` as sbatch's ``--time`` and Kubernetes' activeDeadlineSeconds: a
        gang running longer is stopped (SIGTERM: ``should_stop()`` turns True, so it can save a
        checkpoint; SIGKILL after ``grace_period_s``, as sbatch's KillWait) and the job fails
        with reason ``time-limit``. Each run counts from its own start (a requeued
        job's new run gets the whole limit again). Called under the agent's lock, on ``recs``
        (those with a gang) or all."""
        now = time.time() if now is None else now
        for rec in self.recs.values() if recs is None else recs:
            st, limit = rec.status, rec.spec.max_runtime_s
            if (not limit or rec.gang is None or rec.stopping or rec.ending
                    or st.phase != "running" or not st.started_at or now - st.started_at < limit):
                continue
            msg = time_limit_message(now - st.started_at, limit)
            self._update(rec, "finished", msg, phase="failed", message=msg, reason=TIME_LIMIT,
                          finished_at=now)
            self._stop_gang(rec, "cancel", float(rec.spec.grace_period_s))  # its end stands as this failure

    @staticmethod
    def _due(rec: Rec) -> bool:
        """Cheap: the gang ended (a rank failed, or all are done), or its stop is complete or
        past its grace period."""
        if rec.stopping:
            return rec.gang.all_exited() or time.monotonic() >= rec.deadline
        return rec.gang.ended()

    def _end_gang_safely(self, rec: Rec) -> GangExit | None:
        """``_end_gang``; an error there (a process already gone, …) ends this gang as lost
        instead of stopping the agent's loop."""
        try:
            return self._end_gang(rec)
        except Exception:  # noqa: BLE001 - one gang's clean-up must not stop the agent
            agent_log(traceback.format_exc())  # the agent's log file
            return None if rec.stopping else GangExit(False, {}, None, "lost")

    @staticmethod
    def _end_gang(rec: Rec) -> GangExit | None:
        """Without the lock: kill what is left of the gang (once) and wait for it; the exit of
        a gang that ended by itself, None for a stopped one."""
        if rec.stopping == "preempt" and rec.gang.all_exited():
            # It ended within its grace period: by itself (returned or raised: finished), or
            # by leaving a resumable loop (Preempted: requeued), see ended_during_grace.
            deadline = time.monotonic() + EXIT_FILE_GRACE_S + 1.0
            while (done := rec.gang.poll()) is None and time.monotonic() < deadline:
                time.sleep(0.05)  # an adopted gang's exit files are on their way
            return ended_during_grace(done, JobFolder(rec.runtime.get("job_dir", "")).result_dir)
        if rec.stopping:
            rec.gang.terminate(0.0)
            if rec.stopping == "preempt":  # at the deadline: a function that returned in time
                result_dir = JobFolder(rec.runtime.get("job_dir", "")).result_dir  # is finished
                return ended_during_grace(exit_from_outcomes(result_dir), result_dir)
            return None
        return rec.gang.poll()

    def _ended(self, rec: Rec, result: GangExit | None) -> None:
        rec.ending = False
        self._release(rec)
        rec.runtime.pop("preempt_deadline", None)
        if result is not None and rec.stopping == "cancel":
            rec.stopping = ""  # cancelled meanwhile: that end stands
            self.engine.finish(rec.id)
            self._forget(rec)
        elif result is not None:
            grace = rec.stopping == "preempt"
            rec.stopping = ""
            self.engine.finish(rec.id)
            self._finish(rec, result, note=" (during its preemption grace period)" if grace else "")
        elif rec.stopping == "preempt":
            rec.stopping = ""
            self._requeue(rec)
        else:
            rec.stopping = ""
            self.engine.finish(rec.id)
            self._forget(rec)
        self.wake.set()  # its slots are free: schedule again at once

    def _finish(self, rec: Rec, result: GangExit, note: str = "") -> None:
        final = final_progress(rec)
        if final:
            rec.status = rec.status.with_(**final)
        if result.ok:
            self._update(rec, "finished", "succeeded" + note, phase="succeeded", exit_code=0,
                         finished_at=time.time())
        else:
            lost = result.message == "lost"
            code = result.returncodes.get(result.failed_rank, 1) if result.failed_rank is not None else 1
            msg = ("the rank processes ended without an exit status (lost)" if lost else result.message) + note
            reason = "lost" if lost else "rank-failed"
            full = self._no_room_for_results(rec, result)
            if full:
                msg, reason = f"{msg}: its result could not be recorded: {full}", "disk-full"
            self._update(rec, "finished", msg, phase="failed", exit_code=None if lost else code,
                         message=msg, reason=reason, finished_at=time.time())
        self.forecasts.note_finished(rec.status, rec.spec.max_runtime_s)
        self._forget(rec)

    def _no_room_for_results(self, rec: Rec, result: GangExit) -> str:
        """Why a failed rank left no result, when that is a full disk ('' otherwise)."""
        rdir = JobFolder(rec.runtime.get("job_dir", self.home / "jobs" / rec.id)).result_dir
        rank = result.failed_rank if result.failed_rank is not None else 0
        if (rdir / OUTCOME.name(rank)).exists():
            return ""
        free = free_bytes(rdir)
        return describe(rdir) if free is not None and free < LOW_SPACE_BYTES else ""

    def _forget(self, rec: Rec) -> None:
        rec.gang = None
        self.dirty.add(rec.id)

    def _release(self, rec: Rec) -> None:
        if rec.metrics is not None:  # no join: the sampler's sink takes self.lock
            rec.metrics.stop(wait=False)
            rec.metrics = None
        for rank in rec.runtime.get("devices", []):
            self.free.extend(rank)
        self.free.sort()
        rec.runtime["devices"] = []
        rec.runtime["pids"] = []
        rec.gang = None
        rec.held = False

    def _requeue(self, rec: Rec, recovered: bool = False, by: str = "") -> None:
        rec.gang = None
        restarts = int(rec.runtime.get("restarts", 0)) + 1
        rec.runtime["restarts"] = restarts
        by = by or rec.runtime.pop("preempted_by", "")
        rec.runtime.pop("preempt_deadline", None)
        if recovered:
            self._enqueue(rec, recovered=True)
        else:
            self.engine.requeue(rec.id)
        self._update(rec, "requeued", f"restart {restarts} will resume from its checkpoint_dir",
                     phase="queued", restarts=restarts, gang_ready=0)
        mark_restart(Path(rec.runtime.get("job_dir", self.home / "jobs" / rec.id)), restarts, by)

    def _admit(self, rec: Rec) -> None:
        """Under the lock: give an admitted job its slots and its gang (not started yet: step()
        starts it without the lock, then :meth:`_started` records it). A job whose gang is
        starting or running is never given a second one."""
        if rec.starting or rec.gang is not None:
            agent_log(f"scheduler decision for {rec.id}: admitted while its gang is "
                      f"{'starting' if rec.starting else 'running'}; it is not started twice")
            return
        world, per = self._need(rec.spec)
        if world * per > len(self.free):  # the engine and the slots disagree: do not overcommit
            self.engine.requeue(rec.id)
            agent_log(f"admission of {rec.id} needs {world * per} slot(s), {len(self.free)} free; "
                 f"it stays queued")
            return
        devices = [[self.free.pop(0) for _ in range(per)] for _ in range(world)]
        rec.runtime["devices"] = devices
        self._update(rec, "admitted", f"slots {devices}", phase="admitted",
                     extra={**rec.status.extra, "devices": devices})
        job_dir = Path(rec.runtime["job_dir"])
        try:
            gang = make_gang(rec.spec, job_id=rec.id, job_dir=job_dir, key_file=JobFolder(job_dir).key_file,
                             devices=devices if (self.real and per) else None,
                             restarts=int(rec.runtime.get("restarts", 0)),
                             cwd=rec.runtime.get("cwd"), spawner=self._spawner(self._lean(rec)))
        except Exception as exc:  # noqa: BLE001
            self._start_failed(rec, None, exc)
            return
        rec.held = hasattr(gang, "release")  # ranks wait at their gate until it is stored
        gang.gated = rec.held
        rec.starting = True
        self.to_start.append((rec, gang))

    def _launch(self, starting: list[tuple[Rec, Any]]) -> None:
        """Without the lock: start the admitted gangs (their ranks wait at their start gate);
        then, under it, record them and store their pids before the gate opens (_let_go)."""
        if not starting:
            return
        started: list[tuple[Rec, Any, Exception | None]] = []
        for rec, gang in starting:
            try:
                gang.start()
                started.append((rec, gang, None))
            except Exception as exc:  # noqa: BLE001 - that job fails, the others start
                started.append((rec, gang, exc))
        with self.lock:
            for rec, gang, failure in started:
                try:
                    self._started(rec, gang, failure)
                except Exception as err:  # noqa: BLE001
                    self._decision_failed(rec.id, "starting it", err)
            self._flush_safely()

    def _start_failed(self, rec: Rec, gang: Any, exc: Exception) -> None:
        rec.starting = False
        if gang is not None:
            gang.terminate(0)
        rec.gang = None
        self._release(rec)
        self.engine.finish(rec.id)
        if rec.stopping == "cancel":  # cancelled while it was being started: that end stands
            rec.stopping = ""
            self._forget(rec)
            return
        self._update(rec, "finished", f"failed to start: {exc}", phase="failed",
                     message=f"failed to start: {exc}", reason="start-failed", finished_at=time.time())

    def _started(self, rec: Rec, gang: Any, exc: Exception | None) -> None:
        """Under the lock: record a gang step() started (or its failure to start). A job
        cancelled meanwhile has its ranks killed at their start gate (they never run it)."""
        if exc is not None:
            self._start_failed(rec, gang, exc)
            return
        rec.starting = False
        rec.gang = gang
        rec.runtime["pids"] = [[pid, create_time(pid)] for pid in gang.pids]
        rec.runtime["launch"] = getattr(gang, "launch", "")
        self.dirty.add(rec.id)
        if rec.stopping == "cancel":
            rec.held = False  # the gate stays shut
            self._stop_gang(rec, "cancel", 0.0)
            return
        rec.runtime.pop("function_started", None)  # a new run: its ranks start over
        now = time.time()
        seen = [*rec.status.extra.get("pids", []), *gang.pids]  # every pid this job ever had
        self._update(rec, "started", f"pids {gang.pids}", phase="running", started_at=now,
                     gang_ready=getattr(gang, "world_size", len(gang.pids)),
                     extra={**rec.status.extra, "pids": seen})
        per = self._need(rec.spec)[1]
        self.watcher.sample(rec, rec.runtime["devices"] if (self.real and per) else None)

    # ------------------------------------------------------------- zygote
    def _spawner(self, lean: bool = False):
        """The ready zygote a gang forks from: the lean one for a lean gang (else the torch
        one: it can run anything), the torch one for the others; None: fresh interpreters."""
        for z in ((self.lean_zygote, self.zygote) if lean else (self.zygote,)):
            if z is not None and z.ready(0):  # never waits under the lock (see _await_zygote)
                return z.spawn
        return None

    def _lean(self, rec: Rec) -> bool:
        """Whether ``rec``'s gang forks from the lean zygote (:mod:`.lean`; decided once,
        from its spec and its payload file)."""
        lean = rec.runtime.get("lean")
        if lean is None:
            spec = rec.spec
            cpu = not (self.real and self._need(spec)[1])
            job_dir = rec.runtime.get("job_dir") or self.home / "jobs" / rec.id
            lean = gang_is_lean(spec.framework, spec.world_size, None if cpu else [[0]],
                                spec.command, JobFolder(job_dir).payload_file)
            rec.runtime["lean"] = lean
        return bool(lean)

    def _want_torch_zygote(self) -> None:
        """A job needs the torch zygote: start it now if the daemon deferred it."""
        if self.torch_zygote_deferred:
            self.torch_zygote_deferred = False
            self._start_zygote()

    def _want_lean_zygote(self) -> None:
        """A lean gang waits: start the lean zygote now if the daemon deferred it."""
        if self.lean_zygote_deferred:
            self.lean_zygote_deferred = False
            self._start_lean_zygote()

    # --------------------------------------------------------------- queries
    def status(self, jid: str) -> JobStatus:
        rec = self.recs.get(jid)
        if rec is not None:
            return self.view(rec)
        st = self.store.status(jid)
        if st is None:
            raise JobNotFound("job_id", f"no local job {jid!r}", Fix.run("jobs", text="list jobs with {}"))
        return st

    def jobs(self, queue: str | None) -> list[JobStatus]:
        """Every job, newest first. The stored rows are read without the agent's lock (the
        store has its own) and parsed only for jobs no longer live; the live ones are viewed
        under the lock :data:`LIST_SLICE` at a time, so a status request waits for one slice,
        not for the whole list (10,000 queued jobs held it ~0.25 s)."""
        rows = self.store.status_rows(queue)
        out: list[JobStatus | str] = []
        for i in range(0, len(rows), LIST_SLICE):
            with self.lock:
                for jid, stored in rows[i:i + LIST_SLICE]:
                    rec = self.recs.get(jid)
                    out.append(self.view(rec) if rec is not None else stored)
        return [status_from_dict(json.loads(x)) if isinstance(x, str) else x for x in reversed(out)]

    def busy(self) -> bool:
        """A job not finished, or a finished one whose processes are still being stopped (a
        cancel's grace period must not be cut short by an idle exit)."""
        return any(not r.status.terminal or r.gang is not None for r in self.recs.values())

    # ------------------------------------------------------------- process
    def run(self) -> None:
        """Serve the socket and run the loop until stopped or idle; then shut down."""
        # the daemon starts them first, before building the agent
        if self.lean_zygote is None and not self.lean_zygote_deferred:
            self._start_lean_zygote()
        if self.zygote is None and not self.torch_zygote_deferred:
            self._start_zygote()
        with self.lock:  # recovered jobs need theirs
            waiting = [r for r in self.recs.values() if not r.status.terminal]
            if any(not self._lean(r) for r in waiting):
                self._want_torch_zygote()
            if any(self._lean(r) for r in waiting):
                self._want_lean_zygote()
        server = AgentServer(self.home, self)
        server.start()
        self.forecasts.start()  # reasons and expected starts, off the hot path
        try:
            private.write_private(self.home / "agent.pid", str(os.getpid()))
        except OSError as exc:  # a full disk: only `gpujobs agent stop` without an agent uses it
            agent_log(f"cannot write {self.home / 'agent.pid'}: {exc}")
        signal.signal(signal.SIGTERM, self._on_sigterm)
        failures = 0
        try:
            while not self.stopping:
                try:
                    self.step()
                    failures = 0
                except Exception:  # noqa: BLE001 - log it, keep scheduling
                    failures += 1
                    agent_log(f"agent loop error ({failures} in a row), continuing:\n"
                         + traceback.format_exc())
                    if failures >= MAX_LOOP_FAILURES:
                        raise
                    time.sleep(min(1.0, 0.05 * failures))
                with self.lock:
                    running = any(r.gang is not None for r in self.recs.values())
                    if self.busy() or self.clients:
                        self.last_active = time.monotonic()
                    elif time.monotonic() - self.last_active > self.idle_s:
                        self.exit_reason = "idle"
                        break
                self.wake.wait(0.05 if running else 0.5)
                self.wake.clear()
        except BaseException as exc:
            self.exit_reason = f"{type(exc).__name__}: {exc}"
            agent_log(f"the agent exits unexpectedly: {self.exit_reason}\n" + traceback.format_exc())
            raise
        finally:
            self.forecasts.close()
            server.close()
            self._shutdown()

    def _start_zygote(self) -> None:
        self.use_zygote(*start_zygote(self.home, agent_log))

    def _start_lean_zygote(self) -> None:
        self.use_zygote(*start_zygote(self.home, agent_log, lean=True), lean=True)

    def use_zygote(self, zygote: Zygote | None, started: float, lean: bool = False) -> None:
        """Take the zygote started (at ``started``, monotonic) by :func:`start_zygote`
        (``lean``: the one without torch)."""
        if lean:
            self.lean_zygote, self.lean_started = zygote, started
        else:
            self.zygote, self.zygote_started = zygote, started
        if zygote is not None:
            zygote.on_exit = self.wake.set

    def request_stop(self, why: str = "stop") -> None:
        self.exit_reason = why
        self.stopping = True
        self.wake.set()

    def _on_sigterm(self, *_: object) -> None:
        """SIGTERM: stop as asked. Flags only: the handler runs between any two lines of the
        main thread, which may hold ``self.wake``'s lock (in its wait or clear), so setting
        the Event here could deadlock; the loop sees ``stopping`` within its 0.5 s wait."""
        self.exit_reason = "sigterm"
        self.stopping = True

    def _shutdown(self) -> None:
        """End the self. Asked to stop (``gpujobs agent stop``, SIGTERM): running jobs are
        ended as cancelled, saying by what. Any other exit (an error) cancels nothing: the
        ranks keep running and the next agent re-adopts them."""
        asked = STOP_MESSAGES.get(self.exit_reason or "stop")
        with self.lock:
            for rec in self.recs.values():
                if rec.metrics is not None:
                    rec.metrics.stop(wait=False)
                    rec.metrics = None
                if rec.gang is None:
                    continue
                if asked is None:
                    if not rec.status.terminal:
                        self._update(rec, "agent-exited", f"the agent exited unexpectedly "
                                     f"({self.exit_reason}); its ranks keep running and the next "
                                     f"agent re-adopts them")
                    continue
                rec.gang.terminate(0.5)
                if not rec.status.terminal:
                    self._update(rec, "finished", "the agent was stopped", phase="cancelled",
                                 message=asked, finished_at=time.time())
                rec.gang = None
            self._flush_safely()
            for qs in self.subs.values():
                for q in qs:
                    q.put(None)
        for z in (self.zygote, self.lean_zygote):
            if z is None:
                continue
            z.close()  # not asked: it keeps reaping its ranks (exit files), exits after them
            if asked is not None:
                try:
                    z.proc.wait(5)
                except Exception:  # noqa: BLE001
                    z.proc.kill()
        try:
            os.unlink(self.home / "agent.pid")
        except OSError:
            pass
