"""Per-framework set-up and teardown inside a rank (torch.distributed, MPI, Ray)."""
from __future__ import annotations

import os
from typing import Any

from ..context import JobContext


def setup(framework: str, ctx: JobContext) -> Any:
    if framework in ("ddp", "fsdp"):
        return _setup_torch(ctx)
    if framework == "mpi":
        return _setup_mpi(ctx)
    if framework == "ray":
        return _setup_ray(ctx)
    raise ValueError(f"unknown framework {framework!r}")


def teardown(framework: str, state: Any) -> None:
    if framework in ("ddp", "fsdp") and state is not None:
        import torch.distributed as dist
        if dist.is_initialized():
            dist.barrier()  # barrier first: destroy alone aborts ~25% of runs with gloo
            dist.destroy_process_group()


def _setup_torch(ctx: JobContext) -> Any:
    import torch
    import torch.distributed as dist

    if os.environ.get("GPUJOBS_DEVICE", "auto") != "cpu" and torch.cuda.is_available():
        index = ctx.local_rank % torch.cuda.device_count()
        torch.cuda.set_device(index)
        ctx.device = f"cuda:{index}"
        backend = "nccl"
    else:
        ctx.device = "cpu"
        backend = "gloo"
    if not dist.is_initialized():
        kwargs = {"device_id": torch.device(ctx.device)} if backend == "nccl" else {}
        dist.init_process_group(backend=backend, init_method="env://", rank=ctx.rank,
                                world_size=ctx.world_size, **kwargs)
    return True


def _setup_mpi(ctx: JobContext) -> Any:
    from mpi4py import MPI  # noqa: F401  (initialises MPI; COMM_WORLD is ready for fn)

    ctx.rank = MPI.COMM_WORLD.Get_rank()
    ctx.world_size = MPI.COMM_WORLD.Get_size()
    return MPI


def _setup_ray(ctx: JobContext) -> Any:
    import ray

    address = os.environ.get("GPUJOBS_RAY_ADDRESS")
    if address and not ray.is_initialized():
        ray.init(address=address)
    return ray
