"""Two dumps of ``benchmarks/eta_replay.py --dump`` compared job by job (same seed: the same
trace, so row ``i`` is the same job in both runs).

    .venv/bin/python benchmarks/eta_pair.py A.json B.json

Per population (all, per size, priority, scenario), over the jobs that waited in both runs and
got a forecast: the median |forecast - actual first start| of each run, and how many jobs each
run forecast more than 0.5 s closer. Two runs of the same code differ too (the machine's
timing): compare against such a pair before reading a difference as the code's.
"""
from __future__ import annotations

import json
import statistics
import sys


def _ok(r: dict) -> bool:
    return r["phase"] == "queued" and r["actual"] is not None and r["expected"] is not None


def main(argv: list[str]) -> None:
    a, b = (json.load(open(p)) for p in argv[:2])
    if len(a) != len(b):
        raise SystemExit("the dumps are not of the same trace (different lengths)")
    pops = {"all": lambda r: True}
    for g in (1, 2, 4, 8):
        pops[f"{g} GPU"] = lambda r, g=g: r["gpus"] == g
    for p in ("low", "normal", "high"):
        pops[p] = lambda r, p=p: r["prio"] == p
    for sc in ("steady", "heavy", "sweeps"):
        pops[sc] = lambda r, sc=sc: r["scenario"] == sc
    for name, f in pops.items():
        pr = [(abs(x["expected"] - x["actual"]), abs(y["expected"] - y["actual"]))
              for x, y in zip(a, b) if _ok(x) and _ok(y) and f(x)]
        if not pr:
            continue
        wa = sum(1 for x, y in pr if x < y - 0.5)
        wb = sum(1 for x, y in pr if y < x - 0.5)
        print(f"{name:8s} pairs {len(pr):3d}  median |err| A {statistics.median(x for x, _ in pr):6.1f} "
              f"B {statistics.median(y for _, y in pr):6.1f}  A better by >0.5 s: {wa:3d}  B better: {wb:3d}")


if __name__ == "__main__":
    main(sys.argv[1:])
