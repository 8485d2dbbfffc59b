"""Pod launcher with metrics: ``python -m gpujobs.rank.podlaunch [--interval 2] -- CMD ...``.

Runs CMD (e.g. ``python -m gpujobs.rank.runner``) as its child, forwards the
child's stdout line by line, and every ``interval`` seconds writes one
``GPUJOBS-METRICS`` line for the GPUs the container sees (NVML lists only the
GPUs allocated to it; CUDA_VISIBLE_DEVICES narrows them), or the child's CPU
and RSS without NVML. Metric lines never split a line of the child's output.
SIGTERM/SIGINT go to the child; the launcher exits with the child's code.
Needs no cluster permission: the client already follows the pod's log.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading

from .nvml import NvmlReader, parse_visible_devices
from .sampler import Sampler, log_sink


def visible_gpus() -> list:
    """The GPUs this container may use ([] without NVML)."""
    reader = NvmlReader.open()
    if reader is None:
        return []
    try:
        count = reader.count()
    finally:
        reader.close()
    listed = parse_visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES"))
    return list(range(count)) if listed is None else listed


def start_pod_sampler(ranks: dict, interval: float = 2.0,
                      lock: threading.Lock | None = None) -> Sampler:
    """Start sampling ``{rank: (pid, [gpus])}`` into ``GPUJOBS-METRICS`` lines on stdout.

    For a pod launcher that starts the ranks itself (e.g. the Kubernetes bootstrap):
    call it after the rank processes exist, ``.stop()`` it when they have ended.
    """
    holder: list[Sampler] = []
    sampler = Sampler(ranks, interval=interval,
                      sink=log_sink(sys.stdout, lock, reason=lambda: holder[0].reason))
    holder.append(sampler)
    return sampler.start()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpujobs.rank.podlaunch")
    ap.add_argument("--interval", type=float, default=2.0)
    ap.add_argument("--rank", type=int, default=None, help="default: $RANK or 0")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    ns = ap.parse_args(argv)
    cmd = ns.cmd[1:] if ns.cmd[:1] == ["--"] else ns.cmd
    if not cmd:
        ap.error("give the command to run after --")
    rank = ns.rank if ns.rank is not None else int(os.environ.get("RANK", "0") or 0)
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    def forward(sig: int, _frame: object) -> None:  # to the rank, while it runs
        if child.poll() is None:
            child.send_signal(sig)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    lock = threading.Lock()
    out = sys.stdout.buffer

    sampler = start_pod_sampler({rank: (child.pid, visible_gpus())}, ns.interval, lock)
    try:
        assert child.stdout is not None
        for line in iter(child.stdout.readline, b""):
            with lock:
                out.write(line)
                out.flush()
        code = child.wait()
    finally:
        sampler.stop()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main())
