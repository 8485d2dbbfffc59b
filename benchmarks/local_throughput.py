"""Many tiny one-slot jobs: gpujobs' local agent vs submitit's LocalExecutor, side by side.

    .venv/bin/python benchmarks/local_throughput.py [--n 200] [--slots 4]

Both run the same function (``square(i)``) N times and collect every result, from a
fresh state directory each (gpujobs: the agent is started by the first submit and its
start-up is included). gpujobs runs each job as a 1-rank ddp gang on ``--slots`` GPU slots
(CPU ranks on a machine without GPUs: each forks from the agent's lean zygote, without torch,
and would set up torch.distributed if ``square`` imported torch; it does not); submitit runs
each as a plain Python subprocess. Timed: first submit -> last result, wall clock.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def square(i: int) -> int:
    return i * i


def run_gpujobs(n: int, slots: int) -> float:
    home = tempfile.mkdtemp(prefix="gpujobs-bench-")
    os.environ["GPUJOBS_HOME"] = home
    os.environ["GPUJOBS_LOCAL_GPUS"] = str(slots)
    os.environ.setdefault("GPUJOBS_AGENT_IDLE_S", "30")
    import gpujobs
    from gpujobs.backends import get_backend
    from gpujobs.backends.local import stop_agent
    get_backend.cache_clear()
    t0 = time.perf_counter()
    jobs = [gpujobs.submit(square, i, gpus=1) for i in range(n)]
    results = [j.result(timeout=600) for j in jobs]
    wall = time.perf_counter() - t0
    assert results == [i * i for i in range(n)], "wrong results"
    stop_agent(home=Path(home))
    return wall


def run_submitit(n: int) -> float:
    import submitit
    folder = tempfile.mkdtemp(prefix="submitit-bench-")
    ex = submitit.LocalExecutor(folder=folder)
    ex.update_parameters(timeout_min=10)
    t0 = time.perf_counter()
    jobs = [ex.submit(square, i) for i in range(n)]
    results = [j.result() for j in jobs]
    wall = time.perf_counter() - t0
    assert results == [i * i for i in range(n)], "wrong results"
    return wall


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--slots", type=int, default=4, help="gpujobs GPU slots (concurrent jobs)")
    args = ap.parse_args()
    g = run_gpujobs(args.n, args.slots)
    print(f"gpujobs local agent : {args.n} jobs in {g:6.2f} s  ({args.n / g:5.1f} jobs/s, "
          f"{args.slots} slots, 1-rank ddp gangs, agent start-up included)", flush=True)
    print(f"  (PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r}: when set, "
          f"every process compiles the sources it imports that have no cached bytecode)", flush=True)
    s = run_submitit(args.n)
    print(f"submitit LocalExecutor: {args.n} jobs in {s:6.2f} s  ({args.n / s:5.1f} jobs/s)")
    print(f"ratio gpujobs/submitit wall time: {g / s:.2f} "
          f"(target <= 0.1: {'met' if g / s <= 0.1 else 'NOT met'})")


if __name__ == "__main__":
    main()
