"""A bounded soak of the local agent, with faults, checking its invariants.

    .venv/bin/python benchmarks/soak.py [--jobs 80] [--faults 12] [--minutes 5] [--slots 4]
                                        [--clients 3] [--seed 1]

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
    a = ap.parse_args()
    res = run(a.jobs, a.faults, a.minutes, a.slots, a.clients, a.seed)
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
