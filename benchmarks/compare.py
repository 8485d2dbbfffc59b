"""New/old ratios of the benchmarks' headline figures, for ``run_all.sh --against REV``:

    python benchmarks/compare.py NAME NEW_OUTPUT OLD_OUTPUT [NAME NEW OLD ...]

Each figure is read from the two outputs (the same benchmark script, run with this checkout's
gpujobs and with REV's) by the pattern in :data:`FIGURES`. For "lower is better" figures
(times, overheads) new/old < 1 is an improvement; for admissions per second new/old > 1 is.
A figure that got more than 20 % worse is flagged SLOWER. Figures of other tools measured in
the same runs (torchrun, submitit, kubeflow) are listed too: their new/old ratio shows how
much the machine's load moved between the two runs.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

LOWER, HIGHER = "lower", "higher"
NUM = r"([0-9][0-9,]*\.?[0-9]*)"

#: benchmark -> (figure, pattern with one number, which way is better)
FIGURES: dict[str, list[tuple[str, str, str]]] = {
    "local_launch": [
        ("4-rank launch to result, median (s)", r"gpujobs local : " + NUM + " s", LOWER),
        ("agent start, first submit (s)", r"starting the agent: " + NUM + " s", LOWER),
        ("  torchrun, same runs (s)", r"torchrun      : " + NUM + " s", LOWER)],
    "local_throughput": [
        ("200 tiny jobs, wall (s)", r"gpujobs local agent : \d+ jobs in +" + NUM + " s", LOWER),
        ("  submitit, same runs (s)", r"submitit LocalExecutor: \d+ jobs in +" + NUM + " s", LOWER)],
    "local_forecast_latency": [
        ("status() p99 behind 500 queued (ms)", r"status\(\) .*p99 +" + NUM + " ms", LOWER),
        ("plan() through the agent (s)", r"plan\(\) through the agent: median " + NUM + " s", LOWER)],
    "admission": [
        ("engine admissions per CPU second", r"gpujobs engine: " + NUM + " admissions/s", HIGHER)],
    "admission_kueue": [
        ("real Kueue, admissions per CPU s (same run)", r"real Kueue: +" + NUM + " admissions per", HIGHER),
        ("engine, admissions per CPU s (same run)", r"gpujobs engine: +" + NUM + " admissions per", HIGHER)],
    "submit_overhead": [
        ("k8s submit, preflight cached (ms)", r"gpujobs submit \(preflight cached\) +" + NUM, LOWER),
        ("k8s submit, no preflight cache (ms)", r"gpujobs submit \(no preflight cache\) +" + NUM, LOWER),
        ("  kubeflow create_job (ms)", r"kubeflow TrainingClient.create_job +" + NUM, LOWER)],
    "status_fanout": [
        ("status of 1,000 jobs, p95 (s)", r"latency p95 \(s\) +" + NUM, LOWER)],
    "metrics_overhead": [
        ("sampler / rank CPU (%)", r"sampler / rank CPU time : " + NUM + " %", LOWER)],
    "progress_overhead": [
        ("ctx.progress, one call (ns)", r"one throttled call \(the hot path\): " + NUM + " ns", LOWER),
        ("job.stacks(), local (s)", r"3-rank local job, \d+ calls: median " + NUM + " s", LOWER)],
    "fault_report": [
        ("faults injected", r"^" + NUM + r" faults injected over", HIGHER),
        ("lost", r"faults injected over \d+ jobs in \d+ scenarios: " + NUM + " lost", LOWER)],
    "eta_accuracy": [
        ("plan() behind 10,000 pending (s)", r"\[48 h horizon\] plan\(\) .*: best " + NUM + " s", LOWER),
        ("forecast of every queued job (s)", r"\[48 h horizon\] forecast of every .*: best " + NUM + " s",
         LOWER)],
    "k8s_forecast": [
        ("k8s plan() behind 10,000 (s)", r"kubernetes plan\(\) .*: best " + NUM + " s", LOWER),
        ("k8s forecast refresh (s)", r"kubernetes forecast refresh .*: best " + NUM + " s", LOWER)],
}


def figure(text: str, pattern: str) -> float | None:
    m = re.search(pattern, text, re.MULTILINE)
    return float(m.group(1).replace(",", "")) if m else None


def rows(name: str, new_text: str, old_text: str) -> list[str]:
    out = []
    for label, pattern, better in FIGURES.get(name, []):
        new, old = figure(new_text, pattern), figure(old_text, pattern)
        if new is None:
            out.append(f"| {name} | {label} | n/a (not in the output) | {old if old is not None else 'n/a'} | | |")
            continue
        if old is None:
            out.append(f"| {name} | {label} | {new:g} | n/a (did not run at the old commit) | | |")
            continue
        ratio = new / old if old else float("inf") if new else 1.0
        worse = ratio > 1.2 if better == LOWER else ratio < 1 / 1.2
        flag = " SLOWER" if worse and not label.startswith("  ") else ""
        out.append(f"| {name} | {label} | {new:g} | {old:g} | {ratio:.2f} | {better} is better{flag} |")
    return out


def main(argv: list[str]) -> int:
    if len(argv) % 3:
        raise SystemExit(__doc__)
    print("| benchmark | figure | new | old | new/old | |")
    print("|---|---|---:|---:|---:|---|")
    for i in range(0, len(argv), 3):
        name, new, old = argv[i:i + 3]
        read = [Path(p).read_text(errors="replace") if Path(p).exists() else "" for p in (new, old)]
        for line in rows(name, *read):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
