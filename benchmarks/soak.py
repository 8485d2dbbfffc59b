"""A bounded soak of the local agent, with faults, checking its invariants.

    .venv/bin/python benchmarks/soak.py [--jobs 80] [--faults 12] [--minutes 5] [--slots 4]
                                        [--clients 3] [--seed 1] [--scenarios [NAME ...]] [--no-soak]

Jobs of 1-2 ranks (1 GPU slot each, CPU ranks here), 0.2-2 s each, mixed priorities (the first
third low and 1.5-3 s long, so later ones preempt them), in two
queues (qa, qb: half the slots each) of one cohort (qa reclaims Any, qb LowerPriority), so
preemptions happen; 10 % raise on purpose. ``--clients`` threads submit and collect. Faults,
at random moments: a rank SIGKILLed, a rank SIGSTOPped for 1 s, the agent SIGKILLed.
Every run of a job records ``start``/``end`` lines (restart, rank, pid, time) in a marker file.

Checked (all must be 0): agent crashes (loop errors or unexpected exits in agent.log, and
agent starts not explained by an injected agent kill), lost jobs (not ended by the deadline,
or ended "lost"), wrong results (a value or exception other than the job's own, except a job
whose rank a fault killed: that one must fail with JobFailedError), doubled runs (ranks of two
runs of one job alive at once), more ranks alive than slots, unsupervised ranks (alive after
the soak, or after their job ended), discarded finished runs (a run whose function ended, then
run again), more than one agent process at once. Prints a summary table; exit status 1 if an
invariant is broken. ``run(...)`` returns the counts (tests/local/test_soak.py).

``--scenarios`` adds targeted crash-and-recovery scenarios (issue 27), each in a fresh home:
the agent SIGKILLed as its zygote forks a gang (duplicate runs, ranks over slots, orphans),
zygote-less ranks finishing while the agent is down (a finished run discarded?), an agent kill
after a disk-full failure (its cause kept?), a zero-byte state database (refused, or silently
re-created?), a stall's event counts, and status()/jobs() latency behind 500 queued jobs.
"""
from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CONFIG = """
[[local.queues]]
name = "qa"
gpus = {half}
cohort = "lab"
reclaim = "Any"

[[local.queues]]
name = "qb"
gpus = {half}
cohort = "lab"
reclaim = "LowerPriority"
"""


def soak_job(marker: str, i: int, seconds: float, fail: bool):
    """Steps of 50 ms in a resumable loop (a preemption saves and requeues it)."""
    import os as _os
    import time as _t
    import gpujobs as _g
    import gpujobs.checkpoint as ck
    ctx = _g.context()
    path = f"{marker}/{i}.runs"

    def note(kind: str) -> None:
        with open(path, "a") as fh:
            fh.write(f"{kind} {ctx.restarts} {ctx.rank} {_os.getpid()} {_t.time():.3f}\n")
    note("start")
    how = "done"  # the function ended by itself (returned or raised its own error)
    try:
        steps = max(1, int(seconds / 0.05))
        loop = ck.resumable(steps, state={"n": 0})
        for _ in loop:
            loop.state["n"] += 1
            _t.sleep(0.05)
        if fail:
            raise ValueError(f"planned failure {i}")
        return i * i
    except ck.Preempted:
        how = "preempted"
        raise
    finally:
        note(how)


def _runs(marker: Path, i: int) -> list[tuple[str, int, int, int, float]]:
    try:
        lines = (marker / f"{i}.runs").read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) == 5:
            out.append((parts[0], int(parts[1]), int(parts[2]), int(parts[3]), float(parts[4])))
    return out


def _alive(pid: int, since: float) -> bool:
    import psutil
    try:
        p = psutil.Process(pid)
        return p.status() != psutil.STATUS_ZOMBIE and p.create_time() <= since + 1.0
    except psutil.NoSuchProcess:
        return False


def _live_ranks(marker: Path, n: int) -> dict[int, set[tuple[int, int]]]:
    """job -> {(restart, pid)} of ranks alive now (a pid reused later is not counted)."""
    live: dict[int, set[tuple[int, int]]] = {}
    for i in range(n):
        ended = {pid for kind, _, _, pid, _ in _runs(marker, i) if kind != "start"}
        for kind, restart, _, pid, t in _runs(marker, i):
            if kind == "start" and pid not in ended and _alive(pid, t):
                live.setdefault(i, set()).add((restart, pid))
    return live


def _agent_procs(home: Path) -> int:
    import psutil
    n = 0
    for p in psutil.process_iter(["cmdline", "status"]):
        cmd = " ".join(p.info["cmdline"] or ())
        if "gpujobs.backends.local.daemon" in cmd and str(home) in cmd and \
                p.info["status"] != psutil.STATUS_ZOMBIE:
            n += 1
    return n


def run(jobs: int = 80, faults: int = 12, minutes: float = 5.0, slots: int = 4, clients: int = 3,
        seed: int = 1, quiet: bool = False) -> dict:
    home = Path(tempfile.mkdtemp(prefix="gpujobs-soak-"))
    marker = home / "marks"
    marker.mkdir()
    (home / "config.toml").write_text(CONFIG.format(half=slots // 2))
    os.environ.update(GPUJOBS_HOME=str(home), GPUJOBS_LOCAL_GPUS=str(slots),
                      GPUJOBS_AGENT_IDLE_S="120")
    os.environ.pop("GPUJOBS_CONFIG", None)
    import gpujobs
    from gpujobs.backends import get_backend
    from gpujobs.backends.local import agent_pids, stop_agent
    from gpujobs.errors import GpuJobsError, JobFailedError
    get_backend.cache_clear()
    rng = random.Random(seed)
    plan = []
    for i in range(jobs):
        first = i < jobs // 3
        plan.append({"i": i, "ranks": rng.choice((1, 1, 2)),
                     "seconds": rng.uniform(1.5, 3.0) if first else rng.uniform(0.2, 2.0),
                     "fail": rng.random() < 0.1, "queue": rng.choice(("qa", "qb")),
                     # the first third low: running when the others arrive (preemptions)
                     "priority": "low" if first else rng.choice(("low", "normal", "high"))})
    deadline = time.monotonic() + minutes * 60
    handles: dict[int, object] = {}
    outcome: dict[int, tuple[str, object]] = {}
    hit: set[int] = set()  # jobs a rank fault hit
    counts = {"faults_rank_kill": 0, "faults_rank_stop": 0, "faults_agent_kill": 0,
              "max_agent_procs": 0, "over_slots": 0, "doubled_runs": 0, "client_errors": 0}
    lock = threading.Lock()
    done = threading.Event()
    t0 = time.monotonic()

    def client(k: int) -> None:
        mine = plan[k::clients]
        for p in mine:
            b = (gpujobs.job(soak_job, str(marker), p["i"], p["seconds"], p["fail"])
                 .ddp(gpus=p["ranks"]).queue(p["queue"]).priority(p["priority"])
                 .options(grace_period_s=2))
            for attempt in range(3):
                try:
                    handles[p["i"]] = b.submit()
                    break
                except GpuJobsError as exc:
                    with lock:
                        counts["client_errors"] += 1
                    if attempt == 2:
                        outcome[p["i"]] = ("submit-error", exc)
            time.sleep(rng.uniform(0, 0.05))
        for p in mine:
            h = handles.get(p["i"])
            if h is None:
                continue
            left = max(1.0, deadline - time.monotonic())
            try:
                outcome[p["i"]] = ("value", h.result(timeout=left))
            except BaseException as exc:  # noqa: BLE001 - judged below
                outcome[p["i"]] = ("error", exc)

    def inject() -> None:
        kinds = ["rank_kill", "rank_stop", "agent_kill"]
        spread = max(5.0, min(minutes * 60 * 0.5, jobs * 0.4))
        frng = random.Random(seed + 1)
        moments = sorted(frng.uniform(2.0, spread) for _ in range(faults))
        for m in moments:
            while time.monotonic() - t0 < m:
                if done.is_set():
                    return
                time.sleep(0.05)
            kind = frng.choice(kinds)
            live = _live_ranks(marker, jobs)
            if kind == "agent_kill":
                pid = agent_pids(home).get("agent")
                if pid:
                    os.kill(pid, signal.SIGKILL)
                    counts["faults_agent_kill"] += 1
                continue
            if not live:
                continue
            i = frng.choice(sorted(live))
            _, pid = frng.choice(sorted(live[i]))
            try:
                if kind == "rank_kill":
                    os.kill(pid, signal.SIGKILL)
                    hit.add(i)
                    counts["faults_rank_kill"] += 1
                else:
                    os.kill(pid, signal.SIGSTOP)
                    time.sleep(1.0)
                    os.kill(pid, signal.SIGCONT)
                    counts["faults_rank_stop"] += 1
            except ProcessLookupError:
                pass

    def sample() -> None:
        while not done.is_set():
            live = _live_ranks(marker, jobs)
            total = sum(len(v) for v in live.values())
            if total > slots:
                counts["over_slots"] += 1
            for i, ranks in live.items():
                if len({r for r, _ in ranks}) > 1 or len(ranks) > plan[i]["ranks"]:
                    counts["doubled_runs"] += 1
            counts["max_agent_procs"] = max(counts["max_agent_procs"], _agent_procs(home))
            time.sleep(0.1)

    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(clients)]
    helpers = [threading.Thread(target=inject, daemon=True), threading.Thread(target=sample, daemon=True)]
    for t in threads + helpers:
        t.start()
    for t in threads:
        t.join(max(1.0, deadline - time.monotonic()))
    done.set()
    for t in helpers:
        t.join(5)
    wall = time.monotonic() - t0

    # ---- judge
    right = planned = fault_failed = wrong = lost = discarded = preemptions = requeued = 0
    examples: list[str] = []
    for p in plan:
        i = p["i"]
        kind, got = outcome.get(i, ("missing", None))
        st = None
        if i in handles:
            try:
                st = handles[i].status()
            except GpuJobsError:
                pass
        if st is not None:
            preemptions += sum(1 for e in st.events if e.kind == "preempted")
            requeued += sum(1 for e in st.events if e.kind == "requeued")
        if kind == "missing" or st is None or not st.terminal or st.reason == "lost":
            lost += 1
            examples.append(f"job {i}: lost ({kind}, {st.phase if st else '?'} {st.reason if st else ''})")
            continue
        if kind == "value" and got == i * i and not p["fail"]:
            right += 1
        elif kind == "error" and p["fail"] and isinstance(got, ValueError) and \
                str(got) == f"planned failure {i}":
            planned += 1
        elif kind == "error" and i in hit and isinstance(got, JobFailedError):
            fault_failed += 1
        else:
            wrong += 1
            examples.append(f"job {i}: {kind} {got!r} (planned fail: {p['fail']})")
        runs = _runs(marker, i)
        for restart in {r for _, r, _, _, _ in runs}:
            finished = [x for x in runs if x[0] == "done" and x[1] == restart]
            later = [x for x in runs if x[0] == "start" and x[1] > restart]
            if finished and later:  # its function ended by itself, and it was run again
                discarded += 1
                examples.append(f"job {i}: run {restart} ended by itself, then ran again")
    time.sleep(3.5)  # a cancel's grace (3 s) for ranks still being stopped
    unsupervised = sum(len(v) for v in _live_ranks(marker, jobs).values())
    log = (home / "agent.log").read_text(errors="replace") if (home / "agent.log").exists() else ""
    loop_errors = log.count("agent loop error") + log.count("exits unexpectedly")
    starts = log.count("agent started for")
    crashes = loop_errors + max(0, starts - 1 - counts["faults_agent_kill"])
    stop_agent(home=home)
    res = {"jobs": jobs, "succeeded_right": right, "failed_as_planned": planned,
           "failed_by_rank_fault": fault_failed, "wrong_results": wrong, "lost_jobs": lost,
           "crashes": crashes, "agent_starts": starts, "doubled_runs": counts["doubled_runs"],
           "over_slot_samples": counts["over_slots"], "unsupervised_ranks": unsupervised,
           "discarded_finished_runs": discarded, "max_agent_processes": counts["max_agent_procs"],
           "client_errors": counts["client_errors"], "faults_rank_kill": counts["faults_rank_kill"],
           "faults_rank_stop": counts["faults_rank_stop"],
           "faults_agent_kill": counts["faults_agent_kill"], "preemptions": preemptions, "requeued": requeued,
           "wall_s": round(wall, 1),
           "home": str(home), "examples": examples[:10]}
    res["ok"] = (crashes == lost == wrong == discarded == unsupervised == 0
                 and counts["doubled_runs"] == counts["over_slots"] == 0
                 and counts["max_agent_procs"] <= 2)
    if res["ok"]:  # kept for inspection only when an invariant broke
        import shutil
        shutil.rmtree(home, ignore_errors=True)
        res["home"] = ""
    if not quiet:
        print_table(res)
    return res


# --------------------------------------------------------------------------- scenarios
# Targeted crash-and-recovery scenarios (issue 27), each in a fresh GPUJOBS_HOME: counted, not
# asserted, so that one run reports every number.

def gated_job(marker: str, i: int, gate: str, value):
    """Notes its start, waits for ``gate`` (a file), notes its end, returns ``value``."""
    import os as _os
    import time as _t
    import gpujobs as _g
    ctx = _g.context()

    def note(kind: str) -> None:
        with open(f"{marker}/{i}.runs", "a") as fh:
            fh.write(f"{kind} {ctx.restarts} {ctx.rank} {_os.getpid()} {_t.time():.3f}\n")
    note("start")
    while not _os.path.exists(gate):
        _t.sleep(0.05)
    note("done")
    return value


def quiet_job(quiet_s: float, moving_s: float) -> int:
    """Reports progress, goes quiet (a stall) for ``quiet_s``, then moves for ``moving_s``."""
    import time as _t
    import gpujobs as _g
    ctx = _g.context()
    for i in range(3):
        ctx.progress(i, total=20)
        _t.sleep(0.1)
    _t.sleep(quiet_s)
    end = _t.monotonic() + moving_s
    i = 3
    while _t.monotonic() < end:
        ctx.progress(i, total=20)
        i += 1
        _t.sleep(0.1)
    return i


def noop(value):
    return value


def _fresh_home(prefix: str, slots: int, **env: str) -> Path:
    from gpujobs.backends import get_backend
    home = Path(tempfile.mkdtemp(prefix=prefix))
    (home / "marks").mkdir()
    os.environ.update(GPUJOBS_HOME=str(home), GPUJOBS_LOCAL_GPUS=str(slots),
                      GPUJOBS_AGENT_IDLE_S="120", **env)
    os.environ.pop("GPUJOBS_CONFIG", None)
    get_backend.cache_clear()
    return home


def _wait(cond, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return False


def _starts(marker: Path, i: int) -> dict[int, int]:
    """rank -> how many runs of job ``i`` started its function."""
    out: dict[int, int] = {}
    for kind, _, rank, _, _ in _runs(marker, i):
        if kind == "start":
            out[rank] = out.get(rank, 0) + 1
    return out


class _OverSlots(threading.Thread):
    """Samples the ranks alive (from the marker files) against the slots."""

    def __init__(self, marker: Path, jobs: int, slots: int):
        super().__init__(daemon=True)
        self.marker, self.jobs, self.slots = marker, jobs, slots
        self.samples = self.over = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.samples += 1
            if sum(len(v) for v in _live_ranks(self.marker, self.jobs).values()) > self.slots:
                self.over += 1
            time.sleep(0.05)


def scenario_fork_kill(slots: int) -> dict:
    """The agent SIGKILLed as soon as its zygote forks the first rank of a ``slots``-rank gang."""
    import psutil

    import gpujobs
    from gpujobs.backends.local import agent_pids, stop_agent
    home = _fresh_home("gpujobs-soak-fork-", slots)
    marker = home / "marks"
    gpujobs.job(noop, 1).ddp(gpus=1).submit().result(timeout=300)  # a warm agent and zygote
    pids = agent_pids(home)
    zyg = psutil.Process(pids["zygote"])
    before = {c.pid for c in zyg.children()}
    seen: set[int] = set()
    killed = threading.Event()
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            try:
                kids = {c.pid for c in zyg.children()} - before
            except psutil.NoSuchProcess:
                return
            seen.update(kids)
            if kids and not killed.is_set():
                os.kill(pids["agent"], signal.SIGKILL)
                killed.set()
            time.sleep(0.001 if not killed.is_set() else 0.01)
    sampler = _OverSlots(marker, 1, slots)
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    sampler.start()
    gate = home / "go"
    job = gpujobs.job(gated_job, str(marker), 0, str(gate), 0).ddp(gpus=slots).submit()
    _wait(killed.is_set, 120)
    gate.touch()
    try:
        value = job.result(timeout=300)
    except Exception as exc:  # noqa: BLE001 - counted
        value = exc
    stop.set()
    sampler.stop.set()
    watcher.join()
    sampler.join()
    _wait(lambda: not any(_alive(p, time.time()) for p in seen), 15)
    orphans = sum(1 for p in seen if _alive(p, time.time())) + \
        sum(len(v) for v in _live_ranks(marker, 1).values())
    starts = _starts(marker, 0)
    st = job.status()
    stop_agent(home=home)
    return {"killed_during_fork": killed.is_set(), "forked_before_the_kill": len(seen),
            "result": value, "duplicate_runs": sum(n - 1 for n in starts.values() if n > 1),
            "ranks_run": sorted(starts), "over_slot_samples": sampler.over,
            "samples": sampler.samples, "orphans_after": orphans,
            "recovery": [e.kind for e in st.events if e.kind in ("strays-stopped", "adopted")]}


def scenario_zygote_less(slots: int) -> dict:
    """Ranks started without the zygote (it was killed) finish while the agent is down."""
    import gpujobs
    from gpujobs.backends.local import agent_pids, stop_agent
    home = _fresh_home("gpujobs-soak-nozyg-", slots)
    marker = home / "marks"
    gpujobs.job(noop, 1).ddp(gpus=1).submit().result(timeout=300)
    pids = agent_pids(home)
    os.kill(pids["zygote"], signal.SIGKILL)  # the agent falls back to plain child processes
    gate = home / "go"
    job = gpujobs.job(gated_job, str(marker), 0, str(gate), 7).ddp(gpus=2).submit()
    _wait(lambda: sum(_starts(marker, 0).values()) == 2, 300)
    os.kill(agent_pids(home)["agent"], signal.SIGKILL)
    ranks = [pid for kind, _, _, pid, _ in _runs(marker, 0) if kind == "start"]
    gate.touch()
    _wait(lambda: not any(_alive(p, time.time()) for p in ranks), 60)
    st = job.status()  # a new agent recovers it
    try:
        value = job.result(timeout=60)
    except Exception as exc:  # noqa: BLE001 - counted
        value = exc
    stop_agent(home=home)
    return {"phase": st.phase, "reason": st.reason, "result": value,
            "finished_runs_discarded": int(value != 7)}


def scenario_disk_full(slots: int) -> dict:
    """A result that does not fit on a full disk (tmpfs), then the agent SIGKILLed."""
    import subprocess

    import gpujobs
    from gpujobs.backends.local import agent_pids, stop_agent
    mnt = Path(tempfile.mkdtemp(prefix="gpujobs-soak-full-"))
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        mnt.rmdir()
        return {"skipped": f"cannot mount a tmpfs ({done.stderr.strip()})"}
    try:
        from gpujobs.backends import get_backend
        os.environ.update(GPUJOBS_HOME=str(mnt), GPUJOBS_LOCAL_GPUS=str(slots), GPUJOBS_AGENT_IDLE_S="120")
        get_backend.cache_clear()
        marks = Path(tempfile.mkdtemp(prefix="gpujobs-soak-full-marks-"))
        gate = marks / "go"
        job = gpujobs.job(gated_job, str(marks), 0, str(gate), b"x" * 300_000).ddp(gpus=1).submit()
        _wait(lambda: sum(_starts(marks, 0).values()) == 1, 300)
        filler = mnt / "filler"
        with open(filler, "ab", buffering=0) as fh:
            try:
                while True:
                    fh.write(b"\0" * 4096)
            except OSError:
                pass
        gate.touch()
        before = job.wait(timeout=120)
        os.kill(agent_pids(mnt)["agent"], signal.SIGKILL)
        after = job.status()  # a new agent, the disk still full
        filler.unlink()
        stop_agent(home=mnt)
        return {"reported": (before.phase, before.reason), "after_restart": (after.phase, after.reason),
                "cause_kept": int(after.reason == before.reason == "disk-full")}
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
        mnt.rmdir()


def scenario_zero_byte_db(slots: int) -> dict:
    """The state database truncated to zero bytes after a job ran."""
    import gpujobs
    from gpujobs.backends.local import stop_agent
    from gpujobs.errors import GpuJobsError
    home = _fresh_home("gpujobs-soak-db-", slots)
    job = gpujobs.job(noop, 3).ddp(gpus=1).submit()
    job.result(timeout=300)
    stop_agent(home=home)
    (home / "state.db").write_bytes(b"")
    for extra in ("state.db-wal", "state.db-shm"):
        (home / extra).unlink(missing_ok=True)
    try:
        gpujobs.jobs()
        said = "no error"
    except GpuJobsError as exc:
        said = str(exc)
    try:
        gpujobs.job(noop, 4).ddp(gpus=1).submit()
        submitted = "submitted"
    except GpuJobsError as exc:
        submitted = str(exc)
    size = (home / "state.db").stat().st_size
    stop_agent(home=home)
    return {"jobs()": said[:160], "submit": submitted[:80], "db_bytes_after": size,
            "silently_recreated": int(size > 0)}


def scenario_stall_events(slots: int) -> dict:
    """A job quiet for 8 s (stall floor 1.5 s, a sampling round every 0.3 s)."""
    import gpujobs
    from gpujobs.backends.local import stop_agent
    home = _fresh_home("gpujobs-soak-stall-", slots, GPUJOBS_METRICS_INTERVAL="0.3")
    job = (gpujobs.job(quiet_job, 8.0, 3.0).ddp(gpus=1)
           .env(GPUJOBS_STALL_FLOOR_S="1.5", GPUJOBS_STALL_FACTOR="1",
                GPUJOBS_PROGRESS_INTERVAL="0.1").submit())
    flagged_message = ""
    end = time.monotonic() + 300
    while time.monotonic() < end:
        st = job.status()
        if st.stalled_since is not None and not flagged_message:
            flagged_message = st.message
        if st.terminal:
            break
        time.sleep(0.2)
    job.result(timeout=60)
    kinds = [e.kind for e in job.status().events]
    stop_agent(home=home)
    os.environ.pop("GPUJOBS_METRICS_INTERVAL", None)
    return {"stalled_events": kinds.count("stalled"), "moving_events": kinds.count("moving"),
            "message_while_flagged": flagged_message[:160]}


def scenario_backlog_latency(slots: int, queued: int = 500, calls: int = 200) -> dict:
    """status() and jobs() latency behind ``queued`` queued jobs (a blocker holds every slot)."""
    import gpujobs
    from gpujobs.backends.local import stop_agent
    home = _fresh_home("gpujobs-soak-backlog-", slots)
    gate = home / "go"
    blocker = gpujobs.job(gated_job, str(home / "marks"), 0, str(gate), 0).ddp(gpus=slots).submit()
    handles = [gpujobs.job(noop, i).ddp(gpus=1).submit() for i in range(queued)]
    probe = handles[len(handles) // 2]

    def pct(xs: list[float], q: float) -> float:
        xs = sorted(xs)
        return round(1000 * xs[min(len(xs) - 1, int(q * len(xs)))], 1)
    status_s, jobs_s = [], []
    for k in range(calls):
        t = time.perf_counter()
        probe.status()
        status_s.append(time.perf_counter() - t)
        if k % 10 == 0:
            t = time.perf_counter()
            gpujobs.jobs()
            jobs_s.append(time.perf_counter() - t)
    phase = probe.status().phase
    for h in handles:
        h.cancel()
    blocker.cancel()
    gate.touch()
    stop_agent(home=home)
    return {"queued": queued, "probe_phase": phase, "status_p50_ms": pct(status_s, 0.5),
            "status_p99_ms": pct(status_s, 0.99), "status_max_ms": round(1000 * max(status_s), 1),
            "jobs_p50_ms": pct(jobs_s, 0.5), "jobs_max_ms": round(1000 * max(jobs_s), 1)}


SCENARIOS = {"fork_kill": scenario_fork_kill, "zygote_less": scenario_zygote_less,
             "disk_full": scenario_disk_full, "zero_byte_db": scenario_zero_byte_db,
             "stall_events": scenario_stall_events, "backlog_latency": scenario_backlog_latency}


def scenarios(slots: int = 4, only: list[str] | None = None) -> dict:
    """Each scenario's numbers (an exception is reported as its result)."""
    out: dict = {}
    for name, fn in SCENARIOS.items():
        if only and name not in only:
            continue
        t = time.monotonic()
        try:
            out[name] = fn(slots)
        except Exception as exc:  # noqa: BLE001 - reported
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
        out[name]["wall_s"] = round(time.monotonic() - t, 1)
        print(f"| {name} | {out[name]} |", flush=True)
    return out


def print_table(res: dict) -> None:
    rows = [("jobs", res["jobs"]), ("succeeded, right value", res["succeeded_right"]),
            ("failed as planned (own exception)", res["failed_as_planned"]),
            ("failed: a rank was SIGKILLed (JobFailedError)", res["failed_by_rank_fault"]),
            ("faults: rank SIGKILL / rank SIGSTOP 1 s / agent SIGKILL",
             f"{res['faults_rank_kill']} / {res['faults_rank_stop']} / {res['faults_agent_kill']}"),
            ("preemptions / of them requeued (the others ended within their grace)",
             f"{res['preemptions']} / {res['requeued']}"),
            ("agent starts", res["agent_starts"]),
            ("**crashes**", res["crashes"]), ("**lost jobs**", res["lost_jobs"]),
            ("**wrong results**", res["wrong_results"]),
            ("**doubled runs (samples)**", res["doubled_runs"]),
            ("**more ranks than slots (samples)**", res["over_slot_samples"]),
            ("**unsupervised ranks at the end**", res["unsupervised_ranks"]),
            ("**discarded finished runs**", res["discarded_finished_runs"]),
            ("max agent processes at once (daemonize parent included)", res["max_agent_processes"]),
            ("client calls retried", res["client_errors"]),
            ("wall time", f"{res['wall_s']} s")]
    print("| soak | value |\n|---|---|")
    for k, v in rows:
        print(f"| {k} | {v} |")
    if res["examples"]:
        print("\n".join(res["examples"]))
    print("invariants:", "all held" if res["ok"] else "BROKEN")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=80)
    ap.add_argument("--faults", type=int, default=12)
    ap.add_argument("--minutes", type=float, default=5.0, help="deadline for the whole soak")
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--clients", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--scenarios", nargs="*", metavar="NAME", choices=sorted(SCENARIOS),
                    help="then the crash-and-recovery scenarios (all when no NAME given)")
    ap.add_argument("--no-soak", action="store_true", help="the scenarios only")
    a = ap.parse_args()
    ok = True
    if not a.no_soak:
        ok = run(a.jobs, a.faults, a.minutes, a.slots, a.clients, a.seed)["ok"]
    if a.scenarios is not None:
        print("| scenario | numbers |\n|---|---|")
        scenarios(a.slots, a.scenarios)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
