"""Ranks the agent did not start itself: those of a previous agent (crashed or stopped) that
a new agent re-adopts, watched by pid and judged by the exit files the zygote writes; and the
new agent's recovery of every stored job (:class:`Recovery`: re-queue, re-adopt, finish, or
mark lost)."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from dataclasses import dataclass, field
from typing import Iterator

from ...rank.contract import EXIT, FAILURE, OUTCOME, PROCESS, JobFolder, launch_state
from ...errors import GpuJobsError
from ...spec import JobSpec
from .gang import GangExit, failed_rank_message, first_failed, write_launch
from .procs import running
from .records import Rec, agent_log
from .store import Store


EXIT_FILE_GRACE_S = 3.0  # the zygote reaps a rank, then writes its exit file
STRAY_GRACE_S = 3.0  # a previous agent's rank told to stop gets SIGKILL after this


class Adopted:
    """Ranks of a previous agent still running: watched by pid, ended by signal.

    A rank's pid vanishes when the zygote reaps it, a moment before the zygote writes its
    exit file; so a gang whose ranks are all gone but whose exit files are missing waits up
    to ``grace`` seconds for them before it is called lost.
    """

    def __init__(self, pids: list[int], result_dir: Path, world_size: int,
                 grace: float = EXIT_FILE_GRACE_S):
        import psutil
        self.grace = grace
        self._gone_at: float | None = None  # when no rank was alive any more
        self.procs = {}
        for r, pid in enumerate(pids):
            try:
                self.procs[r] = psutil.Process(pid)
            except psutil.NoSuchProcess:
                pass
        self.world_size = world_size  # ranks (exit files), not launcher pids (mpirun, a driver)
        self.result_dir = result_dir

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs.values()]

    def _alive(self) -> bool:
        return any(running(p) for p in self.procs.values())

    def all_exited(self) -> bool:
        return not self._alive()

    def ended(self) -> bool:
        return self.poll() is not None

    def poll(self) -> GangExit | None:
        """None while a rank lives, or while exit files may still be on their way."""
        if self._alive():
            return None
        done = exit_from_files(self.result_dir, self.world_size)
        if done.message != "lost":
            return done
        now = time.monotonic()
        if self._gone_at is None:
            self._gone_at = now
        return done if now - self._gone_at >= self.grace else None

    def signal_all(self, sig: int) -> None:
        for p in self.procs.values():
            try:
                os.killpg(p.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def terminate(self, grace: float = 0.0) -> None:
        """Gone (or 5 s past SIGKILL) before their slots are handed out again."""
        stop_processes(list(self.procs.values()), grace)


def exit_from_files(result_dir: Path, world: int) -> GangExit:
    """How ranks ended, from the exit files the zygote writes; without them (ranks it did not
    fork), from the outcomes that verify under the job's key; else 'lost'."""
    codes: dict[int, int] = {}
    for r in range(world):
        try:
            codes[r] = int((result_dir / EXIT.name(r)).read_text())
        except (OSError, ValueError):
            return exit_from_outcomes(result_dir) or GangExit(False, codes, r, "lost")
    bad = [r for r, c in codes.items() if c != 0]
    if bad:
        first = first_failed(result_dir, bad)
        return GangExit(False, codes, first, failed_rank_message(result_dir, first, codes[first]))
    return GangExit(True, codes)


def launch_processes(folder: JobFolder) -> dict[int, tuple[object, str]]:
    """The job's rank processes still alive, from the pid files its ranks wrote at their start
    gate (start time checked: a reused pid is not the job's): pid -> (process, launch token).
    Files of processes that are gone are removed."""
    import json

    import psutil
    found: dict[int, tuple[object, str]] = {}
    for path in folder.pid_dir.glob(PROCESS.glob):
        try:
            rec = json.loads(path.read_text())
            p = psutil.Process(int(rec["pid"]))
            started = float(rec.get("start") or 0.0)
            if (started and abs(p.create_time() - started) >= 1) or p.status() == psutil.STATUS_ZOMBIE:
                raise psutil.NoSuchProcess(p.pid)
            found[p.pid] = (p, str(rec.get("launch", "")))
        except (OSError, ValueError, KeyError, TypeError, psutil.Error):
            try:
                path.unlink()
            except OSError:
                pass
    return found


def stop_processes(procs: list, grace: float = STRAY_GRACE_S) -> None:
    """SIGTERM each process (its process group when it leads one), SIGKILL what is left after
    ``grace`` seconds; returns once they are gone (or 5 s more have passed)."""
    import psutil

    def send(p, sig: int) -> None:
        try:
            if os.getpgid(p.pid) == p.pid:
                os.killpg(p.pid, sig)
            else:
                p.send_signal(sig)
        except (OSError, psutil.Error):
            pass

    def alive() -> list:
        out = []
        for p in procs:
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
            except psutil.Error:
                pass
        return out

    for p in procs:
        send(p, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    for p in alive():
        send(p, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while alive() and time.monotonic() < deadline:
        time.sleep(0.02)


def stop_strays(folder: JobFolder, keep: str = "", fence: bool = True) -> list[int]:
    """End every rank process of the job not of launch ``keep`` (a previous agent's launch
    the store does not know as started): first fence the start gate (a rank not yet recorded
    then exits by itself), then stop the recorded ones. Returns the pids stopped."""
    if fence and not keep and folder.launch_file.exists():
        try:
            write_launch(folder, f"fenced-{os.getpid()}", go=False)
        except OSError as exc:
            agent_log(f"cannot fence the start gate {folder.launch_file}: {exc}")
    strays = [p for p, token in launch_processes(folder).values() if not keep or token != keep]
    if strays:
        stop_processes(strays)
    return [p.pid for p in strays]  # type: ignore[attr-defined]


def release_adopted(folder: JobFolder, token: str) -> None:
    """An adopted gang whose start gate its agent did not open before it died: open it."""
    try:
        if token and launch_state(folder.launch_file.read_text(), token) == "wait":
            write_launch(folder, token, go=True)
    except OSError:
        pass


def exit_from_outcomes(result_dir: Path) -> GangExit | None:
    """How a gang whose ranks are all gone ended, from the outcomes it wrote that verify under
    the job's key (a rank's own failure marker says it failed): the first failed rank, else
    rank 0's result; None when no outcome is the job's."""
    from ...errors import ResultAuthError
    from ...rank.envelope import verified_body
    try:
        key = bytes.fromhex(JobFolder(result_dir.parent).key_file.read_text().strip())
    except (OSError, ValueError):
        return None
    ranks = []
    for path in result_dir.glob(OUTCOME.glob):
        rank = OUTCOME.rank_of(path.name)
        try:
            if rank is not None and verified_body(path.read_bytes(), key):
                ranks.append(rank)
        except (OSError, ResultAuthError):
            continue
    failed = [r for r in ranks if (result_dir / FAILURE.name(r)).exists()]
    if failed:
        first = first_failed(result_dir, failed)
        return GangExit(False, {r: 1 for r in failed}, first, failed_rank_message(result_dir, first, 1))
    return GangExit(True, {0: 0}) if 0 in ranks else None


def live_pids(runtime: dict) -> list[int]:
    """The job's recorded rank pids still alive and still the job's (start time checked: a
    reused pid is not)."""
    import psutil
    alive = []
    for pid, started in runtime.get("pids", []):
        try:
            p = psutil.Process(pid)
            if abs(p.create_time() - started) < 1 and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


@dataclass
class Found:
    """A stored job as a new agent finds it: its record back, the previous agent's unrecorded
    ranks it stopped (``stray``), and either its ranks still running (``alive``: re-adopt
    them), or how they ended (``done``: none is alive), or neither (never started: queue it)."""
    rec: Rec
    folder: JobFolder
    stray: list[int]
    alive: list[int] = field(default_factory=list)
    done: GangExit | None = None


class Recovery:
    """A new agent's start-up, on the processes and files: each stored job found as it is now
    (:class:`Found`), for the agent to queue, re-adopt, finish or mark lost. Jobs that ended
    have their last ranks stopped; a stored spec that no longer loads is marked failed."""

    def __init__(self, store: Store, home: Path):
        self.store = store
        self.home = home

    def found(self) -> Iterator[Found]:
        for jid, seq, st, spec, runtime in self.store.all():
            folder = JobFolder(runtime.get("job_dir", self.home / "jobs" / jid))
            if st.terminal:
                # Ended (e.g. cancelled) while the previous agent was still stopping its ranks:
                # finish that stop, or they would hold GPUs the agent hands out again.
                for pid in live_pids(runtime):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                stop_strays(folder, fence=False)
                continue
            try:
                typed = JobSpec.stored(spec)  # the store's plain data, typed once
            except (GpuJobsError, TypeError, ValueError) as exc:  # written by another version
                agent_log(f"job {jid}: its stored spec does not load ({exc}); marked failed")
                self.store.write([(jid, seq, st.with_(phase="failed", reason="unschedulable",
                                                     message=f"its stored spec does not load: {exc}",
                                                     finished_at=time.time()), spec, runtime)])
                continue
            rec = Rec(jid, seq, st, typed, runtime)
            alive = live_pids(runtime)
            # Ranks a previous agent started but had not recorded as started (it died while
            # forking them): ended before the job is started again, never beside its new run.
            stray = stop_strays(folder, keep=runtime.get("launch", "") if alive else "")
            if stray:
                agent_log(f"job {jid}: stopped rank processes {stray} a previous agent started "
                          f"and did not record")
            if st.phase == "queued" or (st.phase == "admitted" and not runtime.get("pids")):
                yield Found(rec, folder, stray)
            elif alive:
                release_adopted(folder, runtime.get("launch", ""))
                yield Found(rec, folder, stray, alive=alive)
            else:
                yield Found(rec, folder, stray, done=exit_from_files(folder.result_dir, typed.world_size))
