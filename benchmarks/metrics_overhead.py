"""What the metrics sampler costs next to a busy rank (target: < 0.5 % of the rank's CPU time).

A real busy rank (a torch matmul loop in its own process) runs twice for the same
wall time: once alone, once while a gpujobs Sampler (the thread the local agent /
pod launcher runs) samples it every ``--interval`` seconds. Printed:

- sampler CPU time (its thread's CPU clock) / the rank's CPU time -> the overhead %;
- CPU time per sampling round;
- the rank's matmul throughput with / without the sampler (noisy on shared cores).

Without NVML (as here) the sampler reads the rank's process tree with psutil; on a
GPU machine it reads NVML for the rank's GPU (``--gpu 0``).

    python benchmarks/metrics_overhead.py            # 2 x 30 s
    python benchmarks/metrics_overhead.py --quick    # 2 x 10 s
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time

import psutil

from gpujobs.metrics import MetricsHistory, Sampler

RANK = r"""
import sys, time, torch
torch.set_num_threads(1)
a = torch.randn(256, 256); b = torch.randn(256, 256)
end = time.time() + float(sys.argv[1]); n = 0
while time.time() < end:
    a = (a @ b).tanh_(); n += 1
print(n, flush=True)
"""
TARGET_PCT = 0.5


def run_rank(seconds: float, interval: float | None, gpus: list[int]) -> dict:
    p = subprocess.Popen([sys.executable, "-c", RANK, str(seconds)], stdout=subprocess.PIPE,
                         text=True)
    sampler = None
    try:
        if interval:
            sampler = Sampler({0: (p.pid, gpus)}, interval=interval, sink=MetricsHistory())
            sampler.start()
        proc = psutil.Process(p.pid)
        times = proc.cpu_times()
        while p.poll() is None:  # the rank's CPU time just before it exits
            try:
                times = proc.cpu_times()
            except psutil.NoSuchProcess:
                break
            time.sleep(0.05)
        out, _ = p.communicate(timeout=60)
    finally:
        if sampler is not None:
            sampler.stop()
        if p.poll() is None:
            p.kill()
            p.wait()
    res = {"iters": int(out.strip() or 0), "rank_cpu_s": times.user + times.system}
    if sampler is not None:
        res.update(sampler_cpu_s=sampler.cpu_seconds, rounds=sampler.rounds,
                   source="nvml" if sampler.nvml_available and gpus else "psutil")
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--interval", type=float, default=2.0)
    ap.add_argument("--gpu", type=int, action="append", default=[],
                    help="GPU index the rank owns (NVML machines)")
    ap.add_argument("--quick", action="store_true", help="10 s per arm")
    a = ap.parse_args()
    seconds = 10.0 if a.quick else a.seconds
    base = run_rank(seconds, None, a.gpu)
    with_s = run_rank(seconds, a.interval, a.gpu)
    pct = 100.0 * with_s["sampler_cpu_s"] / with_s["rank_cpu_s"]
    per_round = 1000.0 * with_s["sampler_cpu_s"] / max(with_s["rounds"], 1)
    print(f"busy rank: torch 256x256 matmul loop, 1 thread, {seconds:.0f} s per arm; "
          f"sampler every {a.interval} s ({with_s['source']})")
    print(f"rank CPU time           : {with_s['rank_cpu_s']:.2f} s (alone: {base['rank_cpu_s']:.2f} s)")
    print(f"sampler CPU time        : {with_s['sampler_cpu_s'] * 1000:.1f} ms over "
          f"{with_s['rounds']} rounds ({per_round:.2f} ms/round)")
    print(f"rank throughput         : {with_s['iters'] / seconds:.0f} it/s with sampler, "
          f"{base['iters'] / seconds:.0f} it/s alone (ratio {with_s['iters'] / base['iters']:.3f}; "
          f"shared cores: noisy)")
    verdict = "OK" if pct < TARGET_PCT else "OVER TARGET"
    print(f"sampler / rank CPU time : {pct:.3f} %  (target < {TARGET_PCT} %)  {verdict}")


if __name__ == "__main__":
    main()
