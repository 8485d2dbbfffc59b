"""gpujobs quick start: train a tiny model with DDP over 4 ranks on the local backend.

    make demo            # or: .venv/bin/python examples/quickstart.py

Without a GPU each requested GPU runs as a CPU rank (gloo), and gpujobs says so.
"""
import time

import gpujobs


def train(steps: int = 60, lr: float = 0.05) -> dict:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    ctx = gpujobs.context()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(16, 1).to(ctx.device))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    true_w = torch.arange(16, dtype=torch.float32).unsqueeze(1) / 16
    gen = torch.Generator().manual_seed(1000 + ctx.rank)  # each rank its own shard of data
    losses = []
    for _ in range(steps):
        x = torch.randn(64, 16, generator=gen)
        y = x @ true_w + 0.01 * torch.randn(64, 1, generator=gen)
        loss = torch.nn.functional.mse_loss(model(x.to(ctx.device)), y.to(ctx.device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        avg = loss.detach().clone()
        dist.all_reduce(avg)
        losses.append(avg.item() / ctx.world_size)
    if ctx.rank == 0:
        print(f"rank 0 of {ctx.world_size} on {ctx.device}: final loss {losses[-1]:.4f}")
    return {"world_size": ctx.world_size, "device": ctx.device,
            "first_loss": round(losses[0], 4), "final_loss": round(losses[-1], 4)}


def main() -> None:
    job = gpujobs.submit(train, gpus=4, name="quickstart")
    print(f"submitted {job.id}")
    result = job.result()
    status = job.status()
    print(f"loss {result['first_loss']} -> {result['final_loss']} over {result['world_size']} "
          f"ranks on {result['device']}")
    print("result:", result)
    print("timeline:")
    t0 = status.events[0].time if status.events else 0.0
    for ev in status.events:
        print(f"  +{ev.time - t0:6.2f}s  {ev.kind}{'  ' + ev.message if ev.message else ''}")
    print(status.summary())


if __name__ == "__main__":
    start = time.time()
    main()
    print(f"done in {time.time() - start:.1f}s")
