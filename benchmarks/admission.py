"""Admission engine throughput: Kueue's scheduler-perf scenario, in-process.

    .venv/bin/python benchmarks/admission.py [--n 15000] [--growth 1000,10000,100000] [--quick]

Scenario (after kueue test/performance/scheduler/configs/baseline): 10 ClusterQueues in one
cohort, nominal 20 GPUs each, borrowing limit 100; workloads 70 % small (1 GPU), 20 % medium
(5), 10 % large (20), priorities low/normal/high mixed; within-queue preemption
LowerPriority, reclaim within the cohort LowerPriority. All workloads are pending at the start; a
virtual clock finishes admitted ones after 200 ms / 500 ms / 1 s of *virtual* time and
preempted ones are requeued at once. We time the engine's own work (add + schedule +
finish/requeue) with time.process_time (CPU time of this process, so other load on the
machine does not count) and report admissions per second of CPU time.

No absolute anchor: Kueue's perf-test figure (about 43 admissions/s) and a fixed target came
from other hardware and do not travel between machines. Real Kueue is compared on this machine, in
one run, by benchmarks/admission_kueue.py (the same workload through both, admissions per CPU
second); run_all.sh --against compares this figure with an older commit's in the same run.
"""
from __future__ import annotations

import argparse
import heapq
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpujobs.admission import ClusterQueue, Engine, PodSet, Workload  # noqa: E402

SIZES = [(1, 0.2, 0.7), (5, 0.5, 0.2), (20, 1.0, 0.1)]  # gpus, runtime (virtual s), share


def run(n: int, queues: int = 10, seed: int = 0) -> dict:
    rng = random.Random(seed)
    eng = Engine([ClusterQueue(f"cq-{i}", {"gpu": 20}, cohort="all", borrowing_limit={"gpu": 100},
                               within_queue="LowerPriority", reclaim_within_cohort="LowerPriority")
                  for i in range(queues)])
    runtime = {}
    prios = ["low", "normal", "high"]
    wls = []
    for i in range(n):
        r = rng.random()
        acc = 0.0
        for gpus, rt, share in SIZES:  # noqa: B007 - the row chosen is used after the break
            acc += share
            if r <= acc:
                break
        wid = f"w{i}"
        runtime[wid] = rt
        wls.append(Workload(wid, f"cq-{i % queues}", [PodSet("main", 1, {"gpu": gpus})],
                            priority=rng.choice(prios), created=i * 1e-3))
    t0 = time.process_time()
    for w in wls:
        eng.add(w)
    t_add = time.process_time() - t0
    now = 0.0
    ends: list = []  # (end time, id)
    running: set = set()
    admitted = preempted = cycles = 0
    done = 0
    t1 = time.process_time()
    while done < n:
        d = eng.schedule()
        cycles += 1
        for a in d.admitted:
            admitted += 1
            running.add(a.id)
            heapq.heappush(ends, (now + runtime[a.id], a.id))
        for victim, _ in d.preempted:
            preempted += 1
            running.discard(victim)
            eng.requeue(victim)
        if d.preempted:
            continue
        # advance the virtual clock to the next finish; finish everything due then
        while ends:
            end, wid = heapq.heappop(ends)
            if wid not in running:
                continue  # preempted and requeued meanwhile
            now = end
            running.discard(wid)
            eng.finish(wid)
            done += 1
            while ends and ends[0][0] <= now:
                _, w2 = heapq.heappop(ends)
                if w2 in running:
                    running.discard(w2)
                    eng.finish(w2)
                    done += 1
            break
    t_sched = time.process_time() - t1
    total = t_add + t_sched
    return dict(n=n, admitted=admitted, preempted=preempted, cycles=cycles, add_s=t_add,
                sched_s=t_sched, total_s=total, rate=admitted / total, virtual_s=now,
                per_adm_us=total / admitted * 1e6)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=15000)
    ap.add_argument("--growth", default="1000,10000,100000")
    ap.add_argument("--quick", action="store_true", help="growth at 1k/10k only")
    args = ap.parse_args()
    r = run(args.n)
    print(f"scenario: {args.n} pending workloads, 10 ClusterQueues in one cohort "
          f"(nominal 20 GPUs, borrowing limit 100), sizes 1/5/20, priorities low/normal/high")
    print(f"gpujobs engine: {r['admitted']} admissions ({r['preempted']} preemptions, "
          f"{r['cycles']} schedule calls) in {r['total_s']:.2f} s CPU "
          f"(add {r['add_s']:.2f} s, schedule/finish {r['sched_s']:.2f} s); "
          f"virtual makespan {r['virtual_s']:.0f} s")
    print(f"gpujobs engine: {r['rate']:,.0f} admissions/s")
    print("(real Kueue on this machine, the same workload through both: benchmarks/admission_kueue.py)")
    sizes = [int(x) for x in args.growth.split(",")]
    if args.quick:
        sizes = [s for s in sizes if s <= 10000]
    print("\ngrowth (cost per admission should stay flat for near-linear cost):")
    print(f"{'pending':>9} {'admissions':>11} {'seconds':>8} {'adm/s':>9} {'us/adm':>8}")
    base = None
    for n in sizes:
        g = run(n)
        base = base or g["per_adm_us"]
        print(f"{n:>9,} {g['admitted']:>11,} {g['total_s']:>8.2f} {g['rate']:>9,.0f} "
              f"{g['per_adm_us']:>8.1f}  (x{g['per_adm_us'] / base:.2f} per admission vs {sizes[0]:,})")


if __name__ == "__main__":
    main()
