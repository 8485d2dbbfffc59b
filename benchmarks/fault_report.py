"""Fault report: run every fault scenario of tests/faults/scenarios.py and print the table
(faults injected vs jobs / results / status transitions lost; the target is 0 lost).

    .venv/bin/python benchmarks/fault_report.py [--quick] [--json OUT]

--quick skips the full-disk scenario (it mounts a tmpfs and needs root). Each scenario gets
a fresh GPUJOBS_HOME; local agents started here are stopped at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # gpujobs_sim and tests/ live in the repository root

from tests.faults import scenarios  # noqa: E402


def _fresh_home() -> Path:
    from gpujobs.backends import get_backend
    home = Path(tempfile.mkdtemp(prefix="gpujobs-faults-"))
    os.environ["GPUJOBS_HOME"] = str(home)
    get_backend.cache_clear()
    return home


def _run(name: str, fn, homes: list[Path]) -> dict:
    home = _fresh_home()
    homes.append(home)
    return _guarded(name, lambda: fn(home) if fn is scenarios.local_agent_killed else fn())


def _guarded(name: str, call: Callable[[], dict]) -> dict:
    """The scenario's row, or a CRASHED row when it raised (its counts are then unknown)."""
    t0 = time.monotonic()
    try:
        return call()
    except Exception as exc:  # noqa: BLE001 - a crashed scenario is reported, not hidden
        return scenarios.row(name, 0, 0, note=f"CRASHED {type(exc).__name__}: {exc}"[:200],
                             seconds=time.monotonic() - t0)


def _full_disk(homes: list[Path]) -> dict:
    from gpujobs.backends import get_backend
    mnt = Path(tempfile.mkdtemp(prefix="gpujobs-tinyfs-"))
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m,mode=0700", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        return scenarios.row("local: state disk full (tmpfs)", 0, 0, note="skipped: cannot mount")
    os.environ["GPUJOBS_HOME"] = str(mnt)
    get_backend.cache_clear()
    try:
        return scenarios.local_full_disk(mnt)
    finally:
        from gpujobs.backends.local import stop_agent
        stop_agent(home=mnt)
        subprocess.run(["umount", "-l", str(mnt)], check=False)
        shutil.rmtree(mnt, ignore_errors=True)


#: (name, scenario) in the order they run; the local_agent_killed scenario takes the home
PLAN: list[tuple[str, Callable[..., dict]]] = [
    ("k8s_submit_bursts", scenarios.k8s_submit_bursts),
    ("k8s_status_faults", scenarios.k8s_status_faults),
    ("k8s_log_read_faults", scenarios.k8s_log_read_faults),
    ("local_rank_oom_kill", scenarios.local_rank_oom_kill),
    ("local_rendezvous_port_taken", scenarios.local_rendezvous_port_taken),
    ("local_agent_killed", scenarios.local_agent_killed)]
COLS = ("faults_injected", "jobs", "jobs_lost", "results_lost", "transitions_lost")


def crashed(r: dict) -> bool:
    return r["note"].startswith("CRASHED")


def table(rows: list[dict]) -> tuple[str, int]:
    """The report and its exit code: 0 only when every scenario ran and nothing was lost. A
    crashed scenario's counts are unknown: its row says "crashed", never 0 lost."""
    out = ["| scenario | faults injected | jobs | jobs lost | results lost | transitions lost | s |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        cells = ["crashed"] * len(COLS) if crashed(r) else [str(r[c]) for c in COLS]
        out.append(f"| {r['scenario']} | " + " | ".join(cells) + f" | {r['seconds']} |")
        if crashed(r) or r["note"].startswith("skipped"):
            out.append(f"|   ({r['note']}) | | | | | | |")
    ran = [r for r in rows if not crashed(r)]
    total = {c: sum(r[c] for r in ran) for c in COLS}
    out.append("| **total** | " + " | ".join(str(total[c]) for c in COLS) + " | |")
    lost = total["jobs_lost"] + total["results_lost"] + total["transitions_lost"]
    broken = [r["scenario"] for r in rows if crashed(r)]
    out.append("")
    if broken:
        out.append(f"FAILED: {len(broken)} of {len(rows)} scenarios crashed ({', '.join(broken)}): "
                   f"what they would have lost is unknown; the {len(ran)} that ran injected "
                   f"{total['faults_injected']} faults over {total['jobs']} jobs and lost {lost}")
    else:
        out.append(f"{total['faults_injected']} faults injected over {total['jobs']} jobs in "
                   f"{len(rows)} scenarios: {lost} lost")
    return "\n".join(out), 0 if lost == 0 and not broken else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="skip the full-disk scenario")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args(argv)
    os.environ.pop("GPUJOBS_BACKEND", None)
    os.environ["GPUJOBS_CONFIG"] = str(Path(tempfile.gettempdir()) / "gpujobs-no-config.toml")
    homes: list[Path] = []
    rows = []
    try:
        for name, fn in PLAN:
            rows.append(_run(name, fn, homes))
            print(f"  {rows[-1]['scenario']}: {rows[-1]['seconds']} s", file=sys.stderr)
        if not args.quick:
            rows.append(_guarded("local: state disk full (tmpfs)", lambda: _full_disk(homes)))
    finally:
        from gpujobs.backends.local import stop_agent
        for h in homes:
            stop_agent(home=h)
            shutil.rmtree(h, ignore_errors=True)
    text, code = table(rows)
    print(text)
    if args.json:
        args.json.write_text(json.dumps({"scenarios": rows}, indent=1))
    return code


if __name__ == "__main__":
    sys.exit(main())
