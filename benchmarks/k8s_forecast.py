"""Forecasts on Kubernetes: plan() and a refresh of every queued job, read from a cluster.

    .venv/bin/python benchmarks/k8s_forecast.py [--pending 10000] [--rounds 3]

The state of benchmarks/eta_accuracy.py's speed test, as Kueue objects on the simulated API
server (gpujobs_sim, real HTTP, the official client): 20 ClusterQueues of 8 GPUs in 4 cohorts
of 5 (reclaimWithinCohort LowerPriority), a LocalQueue each, 80 admitted Workloads (2 GPUs,
maximumExecutionTimeSeconds 1-4 h), 10,000 pending Workloads (1/2/4/8 GPUs, priority classes
low/normal/high, maximumExecutionTimeSeconds 0.5-2 h). Only the API server runs (no simulated
controllers: the objects stay as written). Measured, best and worst of ``--rounds``:

- ``plan()`` of one more 4-GPU low-priority job through ``KubernetesBackend.plan`` (render,
  reading the cluster-wide watches' caches, translation, the forecast simulation with the job
  added); the first call, which starts the watches (six initial lists), is reported apart;
- a forecast refresh of every queued job (what one status or ``gpujobs queue`` triggers at
  most once a second), split into reading (the watches' caches) and translation + simulation.
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import gpujobs  # noqa: E402
from gpujobs.backends.kubernetes.backend import KubernetesBackend  # noqa: E402
from gpujobs.backends.kubernetes.status import forecasting, live  # noqa: E402
from gpujobs_sim.apiserver import FakeApiServer  # noqa: E402

API = "kueue.x-k8s.io/v1beta2"
NS = "team"
PRIOS = {"low": 100, "normal": 500, "high": 1000}
MPI_IMAGE = "gpujobs-mpi:py%d%d" % sys.version_info[:2]  # gpujobs' MPI image (docker/mpi)


def iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def podset(gpus: int) -> list[dict]:
    return [{"name": "main", "count": gpus, "template": {"spec": {"containers": [{
        "name": "c", "image": "x", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}}}]


def seed(server: FakeApiServer, pending_n: int, queues: int = 20, rng_seed: int = 0) -> None:
    rng = random.Random(rng_seed)
    st = server.store
    now = time.time()
    st.create({"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": "default-flavor"}})
    for name, value in PRIOS.items():
        st.create({"apiVersion": API, "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value})
    for i in range(queues):
        st.create({"apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": f"cq{i}"}, "spec": {
            "cohortName": f"c{i % 4}", "namespaceSelector": {},
            "preemption": {"reclaimWithinCohort": "LowerPriority"},
            "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [{
                "name": "default-flavor", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "8"}]}]}]}})
        st.create({"apiVersion": API, "kind": "LocalQueue", "metadata": {"name": f"q{i}", "namespace": NS},
                   "spec": {"clusterQueue": f"cq{i}"}})
        for k in range(4):
            at = iso(now - rng.uniform(0, 3000))
            st.create({"apiVersion": API, "kind": "Workload", "metadata": {"name": f"r{i}-{k}", "namespace": NS},
                       "spec": {"queueName": f"q{i}", "podSets": podset(2), "priority": 500,
                                "maximumExecutionTimeSeconds": rng.choice([3600, 7200, 14400])},
                       "status": {"admission": {"clusterQueue": f"cq{i}", "podSetAssignments": [{
                           "name": "main", "count": 2, "flavors": {"nvidia.com/gpu": "default-flavor"}}]},
                           "conditions": [{"type": t, "status": "True", "reason": t, "message": "",
                                           "lastTransitionTime": at} for t in ("QuotaReserved", "Admitted")]}})
    for n in range(pending_n):
        p = rng.choice(["low", "normal", "normal", "high"])
        st.create({"apiVersion": API, "kind": "Workload", "metadata": {"name": f"p{n}", "namespace": NS},
                   "spec": {"queueName": f"q{n % queues}", "podSets": podset(rng.choice([1, 2, 4, 8])),
                            "priority": PRIOS[p], "priorityClassRef": {
                                "group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": p},
                            "maximumExecutionTimeSeconds": rng.choice([1800, 3600, 7200])},
                   "status": {"conditions": [{"type": "QuotaReserved", "status": "False",
                                              "reason": "WaitingForQuota", "message": "",
                                              "lastTransitionTime": iso(now)}]}})


def nap(s):
    time.sleep(s)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pending", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    server = FakeApiServer(cel=False).start()
    try:
        t = time.perf_counter()
        seed(server, a.pending)
        print(f"seeded {a.pending:,} pending Workloads in {time.perf_counter() - t:.1f} s")
        from kubernetes import client
        be = KubernetesBackend(api_client=client.ApiClient(server.configuration()), namespace=NS)
        return _measure(be, a)
    finally:
        server.stop()


def _measure(be: KubernetesBackend, a: argparse.Namespace) -> int:
    try:
        spec = gpujobs.job(nap, 1).mpi(ranks=1, gpus_per_rank=4).image(MPI_IMAGE).queue("q7").priority("low") \
            .max_runtime(3600).spec()
        f = live.forecasts_for(be, NS)
        t = time.perf_counter()
        p = be.plan(spec)  # starts the cluster-wide watches: their first list is paid here, once
        first = time.perf_counter() - t
        plans, reads, sims = [], [], []
        fcs: dict = {}
        for _ in range(a.rounds):
            t = time.perf_counter()
            p = be.plan(spec)
            plans.append(time.perf_counter() - t)
            t = time.perf_counter()
            c = f.cluster()
            reads.append(time.perf_counter() - t)
            t = time.perf_counter()
            fcs = forecasting.forecasts(c)
            sims.append(time.perf_counter() - t)
        assert p is not None
        known = sum(x.expected_start is not None for x in fcs.values())
        start = f"in {(p.expected_start - time.time()) / 3600:.1f} h" if p.expected_start else p.basis.split(":")[0]
        print(f"kubernetes plan() behind {a.pending:,} pending Workloads in 20 ClusterQueues: best {min(plans):.3f} s, "
              f"worst {max(plans):.3f} s (target < 1 s; position {p.position}, start {start}); the first, "
              f"which starts the watches (their initial lists), {first:.3f} s")
        total = [r + s for r, s in zip(reads, sims)]
        print(f"kubernetes forecast refresh of every queued job ({len(fcs):,}; {known:,} get a start): best "
              f"{min(total):.3f} s, worst {max(total):.3f} s (target < 2 s); reading {min(reads):.3f} s, "
              f"translation + simulation {min(sims):.3f} s")
    finally:
        be.state.stop_watches()
    return 0


if __name__ == "__main__":
    sys.exit(main())
