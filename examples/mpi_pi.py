"""Estimate pi with MPI: every rank integrates its share of 4/(1+x^2) and rank 0 gets the sum.

    .venv/bin/python examples/mpi_pi.py [--ranks 4] [--steps 2000000]

Locally this runs under mpirun (Open MPI) with mpi4py; on Kubernetes the same job renders
as an MPIJob (``.render(kind="MPIJob")``). Needs `apt-get install openmpi-bin libopenmpi-dev`
and `pip install mpi4py`; without them submit says so before anything starts.
"""
import argparse
import math
import time

import gpujobs


def integrate_pi(steps: int) -> dict:
    from mpi4py import MPI

    ctx = gpujobs.context()
    comm = MPI.COMM_WORLD
    h = 1.0 / steps
    # Rank r takes the midpoints r, r + size, r + 2*size, ...
    local = sum(4.0 / (1.0 + ((i + 0.5) * h) ** 2) for i in range(ctx.rank, steps, ctx.world_size)) * h
    total = comm.reduce(local, op=MPI.SUM, root=0)
    print(f"rank {ctx.rank}/{ctx.world_size} on {MPI.Get_processor_name()}: partial {local:.10f}")
    if ctx.rank == 0:
        return {"pi": total, "error": abs(total - math.pi), "ranks": ctx.world_size, "steps": steps}
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2_000_000)
    args = parser.parse_args()
    job = gpujobs.job(integrate_pi, args.steps).mpi(ranks=args.ranks, gpus_per_rank=0).name("mpi-pi").submit()
    print(f"submitted {job.id}")
    result = job.result(timeout=300)
    print(f"pi ~= {result['pi']:.12f} (error {result['error']:.2e}) from {result['ranks']} MPI ranks")
    print(job.logs(), end="")
    print(job.status().summary())


if __name__ == "__main__":
    start = time.time()
    main()
    print(f"done in {time.time() - start:.1f}s")
