"""Fan out Ray tasks from a gpujobs job: the function is the Ray driver of the job's own cluster.

    .venv/bin/python examples/ray_tasks.py [--workers 2] [--tasks 8]

Locally gpujobs starts a private Ray instance for the job (127.0.0.1, no dashboard, the
job's CPUs and GPUs) and removes it afterwards; on Kubernetes the same job renders as a
RayJob (``.render(kind="RayJob")``) and the function connects to that cluster. Without a
GPU the requested GPUs are logical Ray GPUs, so ``num_gpus=1`` tasks still run (on CPU).
"""
import argparse
import time

import gpujobs


def monte_carlo(tasks: int, samples: int) -> dict:
    import random

    import ray

    @ray.remote(num_gpus=1)
    def shard(seed: int) -> tuple[int, str]:
        import os
        rng = random.Random(seed)
        hits = sum(rng.random() ** 2 + rng.random() ** 2 <= 1.0 for _ in range(samples))
        return hits, os.environ.get("CUDA_VISIBLE_DEVICES", "")

    ctx = gpujobs.context()
    t0 = time.time()
    results = ray.get([shard.remote(seed) for seed in range(tasks)])
    hits = sum(h for h, _ in results)
    return {"pi": 4.0 * hits / (tasks * samples), "tasks": tasks,
            "gpus_used": sorted({g for _, g in results}),
            "cluster": {k: v for k, v in ray.cluster_resources().items() if k in ("CPU", "GPU")},
            "workers": ctx.world_size, "seconds": round(time.time() - t0, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--samples", type=int, default=100_000)
    args = parser.parse_args()
    job = (gpujobs.job(monte_carlo, args.tasks, args.samples)
           .ray(workers=args.workers, gpus_per_worker=1, cpus_per_worker=1)
           .name("ray-tasks").submit())
    print(f"submitted {job.id}")
    result = job.result(timeout=600)
    print(f"pi ~= {result['pi']:.5f} from {result['tasks']} Ray tasks on {result['cluster']} "
          f"(GPU ids handed out: {result['gpus_used']}) in {result['seconds']} s")
    print(job.status().summary())


if __name__ == "__main__":
    start = time.time()
    main()
    print(f"done in {time.time() - start:.1f}s")
