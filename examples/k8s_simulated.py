"""The Kubernetes path without a cluster: gpujobs against the simulated cluster in gpujobs_sim.

    .venv/bin/python examples/k8s_simulated.py

A fake API server over real HTTP plus simulated Kueue (quota, priority, preemption, the
visibility API for queue positions), Volcano and operator controllers, and pods that run the
real gpujobs runner as local processes. The client side is exactly what runs against a real
cluster: KUBECONFIG, the official kubernetes client, manifests, watches, the log channel.
"""
import os
import sys
import tempfile
import time

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # gpujobs_sim: repo root

import gpujobs  # noqa: E402
from gpujobs_sim import SimCluster  # noqa: E402


def estimate_pi(samples: int) -> float:
    import random
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rng = random.Random(comm.Get_rank())
    inside = sum(rng.random() ** 2 + rng.random() ** 2 <= 1 for _ in range(samples))
    return 4 * comm.allreduce(inside) / (samples * comm.Get_size())


def main() -> None:
    # MPI pods need sshd, ssh, Open MPI and mpi4py: gpujobs' docker/mpi image, built for this Python
    image = "gpujobs-mpi:py%d%d" % sys.version_info[:2]
    builder = gpujobs.job(estimate_pi, 200_000).mpi(ranks=1, gpus_per_rank=1).image(image).queue("q")
    print("--- what submit creates (builder.render) ---")
    objects = builder.render()  # shared runtime ConfigMap + key Secret (once per namespace), job
    for obj in objects:
        print(f"{obj['apiVersion']}/{obj['kind']} {obj['metadata'].get('name', '')}")
    print(yaml.safe_dump(objects[-1]["metadata"]["labels"]).strip())

    with SimCluster(gpus=1) as sim, tempfile.TemporaryDirectory() as tmp:
        os.environ["KUBECONFIG"] = sim.write_kubeconfig(os.path.join(tmp, "kubeconfig"))
        first = builder.name("first").on("kubernetes").submit()
        second = builder.name("second").on("kubernetes").submit()
        print(f"\nsubmitted {first.id} and {second.id} into LocalQueue q (quota: 1 GPU)")
        seen = set()
        while not (first.done() and second.done()):
            for job in (first, second):
                line = job.status().summary()
                if line not in seen:
                    seen.add(line)
                    print("  ", line)
            time.sleep(0.2)
        print(f"\nresults: {first.result():.4f} and {second.result():.4f}")


if __name__ == "__main__":
    main()
