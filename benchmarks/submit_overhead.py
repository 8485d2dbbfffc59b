"""Submit overhead: gpujobs' Kubernetes submit vs kubeflow-training's TrainingClient.create_job.

Both create an equivalent 2-worker PyTorchJob (1 GPU per worker, Kueue queue label)
against the same fake kube-apiserver over real HTTP (gpujobs_sim.apiserver), one
after the other in the same run. Reported per submit: median / p90 latency and
HTTP requests. gpujobs ships the closure by value (cloudpickle, HMAC-sealed) inside the
job object, so a submit is one create; it also checks more on purpose (preflight: CRD
discovery, three RBAC SelfSubjectAccessReviews, LocalQueue/ClusterQueue fit, and a lookup
of the shared runtime ConfigMap and key Secret), cached for 30 s, so the "no cache" row
shows the cold cost of a submit after a pause.

    .venv/bin/python benchmarks/submit_overhead.py [--n 50] [--quick] [--rtt-ms 0,5]

``--rtt-ms`` adds a server-side delay per request, standing for the network round trip
to a real API server (0 = loopback only, where request count matters least).
"""
from __future__ import annotations

import argparse
import itertools
import logging
import os
import statistics
import sys
import tempfile
import time

import kubernetes

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import gpujobs  # noqa: E402
from gpujobs.backends.kubernetes import KubernetesBackend  # noqa: E402
from gpujobs_sim.apiserver import FakeApiServer  # noqa: E402

NS = "bench"


def train(config=None):
    import torch.distributed as dist
    dist.init_process_group("gloo")
    return dist.get_rank()


def train_checkpointing(config=None):
    import gpujobs as g
    return str(g.context().checkpoint_dir)


def seed(store) -> None:
    store.create({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "provisioner": "x",
                  "metadata": {"name": "standard", "annotations": {
                      "storageclass.kubernetes.io/is-default-class": "true"}}})
    store.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
                  "metadata": {"name": "cq"}, "spec": {"resourceGroups": [{
                      "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                      "flavors": [{"name": "gpu", "resources": [
                          {"name": "cpu", "nominalQuota": "1000"},
                          {"name": "memory", "nominalQuota": "10Ti"},
                          {"name": "nvidia.com/gpu", "nominalQuota": "64"}]}]}]}})
    store.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                  "metadata": {"name": "team-a", "namespace": NS}, "spec": {"clusterQueue": "cq"}})


def measure(server: FakeApiServer, n: int, submit) -> tuple[list[float], list[int]]:
    times, reqs = [], []
    for i in range(n):
        server.reset_counts()
        t0 = time.perf_counter()
        submit(i)
        times.append(time.perf_counter() - t0)
        reqs.append(server.request_count)
    return times, reqs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=50, help="submits per side (default 50)")
    ap.add_argument("--quick", action="store_true", help="10 submits per side")
    ap.add_argument("--rtt-ms", default="0,5", help="comma-separated round-trip delays to run")
    args = ap.parse_args()
    n = 10 if args.quick else args.n
    os.environ.setdefault("GPUJOBS_HOME", tempfile.mkdtemp(prefix="gpujobs-bench-"))
    logging.getLogger("kubeflow").setLevel(logging.ERROR)

    from kubeflow.training import TrainingClient

    server = FakeApiServer().start()
    try:
        seed(server.store)
        cfg = server.configuration()
        tc = TrainingClient(client_configuration=cfg, namespace=NS)
        be = KubernetesBackend(kubernetes.client.ApiClient(cfg), namespace=NS)
        be_cold = KubernetesBackend(kubernetes.client.ApiClient(cfg), namespace=NS, preflight_ttl=0)
        spec = gpujobs.job(train).ddp(nodes=2, gpus_per_node=1).queue("team-a") \
            .options(kind="PyTorchJob").spec()

        ckpt_spec = gpujobs.job(train_checkpointing).ddp(nodes=2, gpus_per_node=1).queue("team-a") \
            .options(kind="PyTorchJob").spec()
        names = itertools.count()

        def kubeflow_submit(i: int) -> None:
            tc.create_job(name=f"kf-{next(names)}", train_func=train, num_workers=2,
                          resources_per_worker={"gpu": "1", "cpu": "1"},
                          base_image="pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime",
                          queue_name="team-a")

        for rtt in [float(x) for x in args.rtt_ms.split(",")]:
          server.latency_s = rtt / 1000.0
          rows = []
          for label, fn in (("kubeflow TrainingClient.create_job", kubeflow_submit),
                          ("gpujobs submit (preflight cached)", lambda i: be.submit(spec)),
                          ("gpujobs submit (no preflight cache)", lambda i: be_cold.submit(spec)),
                          ("gpujobs submit, checkpointing (cached)", lambda i: be.submit(ckpt_spec))):
            fn(-1 if label.startswith("kubeflow") else 0)  # warm-up (not timed)
            times, reqs = measure(server, n, fn)
            rows.append((label, statistics.median(times), sorted(times)[int(0.9 * (n - 1))],
                         statistics.median(reqs)))
          print(f"submit overhead, {n} submits per side, fake kube-apiserver over HTTP on "
                f"127.0.0.1, {rtt:g} ms added per request")
          print(f"{'':38} {'median ms':>10} {'p90 ms':>9} {'requests':>9} {'ratio vs kubeflow':>18}")
          base = rows[0][1]
          for label, med, p90, req in rows:
              print(f"{label:38} {med * 1e3:10.2f} {p90 * 1e3:9.2f} {req:9.0f} {med / base:17.2f}x")
          print()
        n_jobs = sum(1 for res, o in server.store.all_objects() if res.kind == "PyTorchJob")
        n_rtts = len(args.rtt_ms.split(","))
    finally:
        server.stop()
    print(f"PyTorchJobs in the server afterwards: {n_jobs} (expected {n_rtts * (4 * n + 4)})")
    print("gpujobs requests: 1 create (the job, carrying the sealed call) + when not cached: "
          "preflight (discovery, 3 SelfSubjectAccessReviews, LocalQueue, ClusterQueue) and the "
          "lookup of the shared runtime ConfigMap and key Secret, all read together")


if __name__ == "__main__":
    main()
