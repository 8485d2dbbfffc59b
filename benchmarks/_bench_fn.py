"""The function both launchers run in benchmarks/local_launch.py."""


def allreduce_and_return() -> float:
    import torch
    import torch.distributed as dist
    t = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(t)
    return t.item()
