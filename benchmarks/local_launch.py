"""Launch-to-result of a 4-rank gloo gang: gpujobs local backend vs torchrun, side by side.

    .venv/bin/python benchmarks/local_launch.py [--ranks 4] [--runs 5]

Both run the same function (all_reduce, barrier, destroy, return). torchrun is timed as the
whole `torchrun --nproc_per_node=N script.py` command (what a user types); gpujobs from
`submit()` to `result()` in an already-running Python (what a notebook user waits for), with
the local agent already up (its warm zygote forks ranks with torch imported); the first
submit of a session, which starts the agent, is printed separately.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_fn import allreduce_and_return  # noqa: E402

import gpujobs  # noqa: E402

TORCHRUN_SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {bench_dir!r})
    import torch.distributed as dist
    from _bench_fn import allreduce_and_return
    dist.init_process_group("gloo")
    value = allreduce_and_return()
    dist.barrier()
    dist.destroy_process_group()
    if int(__import__("os").environ["RANK"]) == 0:
        print("RESULT", value)
""")


def run_torchrun(ranks: int, script: Path) -> float:
    torchrun = Path(sys.executable).with_name("torchrun")
    start = time.perf_counter()
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = subprocess.run([str(torchrun), f"--nproc_per_node={ranks}", f"--master_port={port}",
                          str(script)], capture_output=True, text=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    elapsed = time.perf_counter() - start
    if out.returncode != 0 or "RESULT" not in out.stdout:
        raise SystemExit(f"torchrun failed:\n{out.stdout}\n{out.stderr}")
    return elapsed


def run_gpujobs(ranks: int) -> float:
    start = time.perf_counter()
    value = gpujobs.job(allreduce_and_return).ddp(gpus=ranks).env(OMP_NUM_THREADS="1").submit().result()
    elapsed = time.perf_counter() - start
    assert value == float(sum(range(ranks))), value
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    os.environ.setdefault("GPUJOBS_LOCAL_GPUS", str(args.ranks))
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("GPUJOBS_HOME", tmp)
        script = Path(tmp) / "torchrun_job.py"
        script.write_text(TORCHRUN_SCRIPT.format(bench_dir=str(Path(__file__).resolve().parent)))
        cold = run_gpujobs(args.ranks)  # the first submit of a session also starts the agent
        run_torchrun(args.ranks, script)
        g, t = [], []
        for i in range(args.runs):  # interleaved, so machine noise hits both alike
            g.append(run_gpujobs(args.ranks))
            t.append(run_torchrun(args.ranks, script))
            print(f"run {i + 1}: gpujobs {g[-1]:.2f}s  torchrun {t[-1]:.2f}s", flush=True)
        try:
            from gpujobs.backends.local import stop_agent
            stop_agent()
        except ImportError:
            pass
    gm, tm = statistics.median(g), statistics.median(t)
    print(f"\n{args.ranks} ranks, {args.runs} runs each (median launch-to-result)")
    print(f"  gpujobs local : {gm:.2f} s   (first submit of a session, starting the agent: {cold:.2f} s)")
    print(f"  torchrun      : {tm:.2f} s")
    print(f"  ratio gpujobs/torchrun = {gm / tm:.2f}  (target <= 1.0)")


if __name__ == "__main__":
    main()
