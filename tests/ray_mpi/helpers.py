"""Shared helpers of the Ray / MPI tests: a job directory for launcher-level runs, process checks."""
from __future__ import annotations


from tests.support import wait_for  # noqa: F401  (re-exported for the tests here)
from pathlib import Path

import psutil

from gpujobs.backends.local.jobdir import JobDir
from gpujobs.payload import open_envelope


def make_job_dir(root: Path, spec) -> tuple[JobDir, bytes]:
    jd = JobDir(root)
    key = jd.create(spec.to_dict(), spec.payload())
    return jd, key


def outcomes(jd: JobDir, key: bytes) -> dict:
    return {rank: open_envelope(blob, key) for rank, blob in jd.outcomes().items()}


def alive(pids) -> list[int]:
    """The pids that still run (zombies count as gone)."""
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def described(pids) -> list[str]:
    """The still-running ``pids`` as 'pid status ppid cmdline' (what an assertion should show)."""
    out = []
    for pid in alive(pids):
        try:
            p = psutil.Process(pid)
            out.append(f"{pid} {p.status()} ppid={p.ppid()} {' '.join(p.cmdline())[:160]}")
        except psutil.Error as exc:
            out.append(f"{pid} ({type(exc).__name__})")
    return out


def cmdline_mentions(text: str) -> list[int]:
    """Live processes whose command line contains ``text`` (Ray's temp dir, a job dir …)."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and text in " ".join(p.info["cmdline"] or ()):
                found.append(p.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found
