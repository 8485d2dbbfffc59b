"""Helpers shared by test modules (importable because pytest puts tests/ on sys.path)."""
from __future__ import annotations

import sys
import time
from typing import Any, Callable

MPI_IMAGE = "gpujobs-mpi:py%d%d" % sys.version_info[:2]
"""The image docker/mpi/Dockerfile builds for this Python (sshd, ssh, Open MPI, mpi4py): what MPI
jobs on a cluster name with .image(...) (the default pytorch image has none of these)."""


def wait_for(pred: Callable[[], Any], timeout: float = 30.0, every: float = 0.05) -> Any:
    """Poll ``pred`` until it returns something truthy (returned); AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"condition not reached within {timeout} s")


def unpack_pod(r: Any, template: dict, root: Any) -> dict[str, str]:
    """A rendered job's pod volumes written as the kubelet would; mount path -> local folder."""
    from gpujobs_sim.volumes import materialize

    objs = {(o["kind"], o["metadata"]["name"]): o for o in r.objects}
    return {k: str(v) for k, v in materialize(template, lambda kind, n: objs.get((kind, n)),
                                               root).items()}


def quiet_phase(seconds: float) -> None:
    """Where a stalled rank sits (the stall message names this function, from its stack)."""
    import time as t
    t.sleep(seconds)


def goes_quiet_then_moves(quiet_s: float, moving_s: float) -> int:
    """A job function for the stall tests: reports progress, goes quiet (no progress, no output,
    no CPU: a stall) for ``quiet_s``, then moves again for ``moving_s``; returns its last step."""
    import time as t

    import gpujobs
    ctx = gpujobs.context()
    for i in range(3):
        ctx.progress(i, total=20)
        t.sleep(0.3)
    quiet_phase(quiet_s)
    end, i = t.time() + moving_s, 3
    while t.time() < end:
        ctx.progress(i, total=20)
        print("step", i, flush=True)
        i += 1
        t.sleep(0.2)
    return i


def fails_on_rank_one() -> float:
    """A DDP job function: rank 1 raises after the first all_reduce; its peers then lose it in the
    second (their collateral error is noise that the client folds into one line)."""
    import torch
    import torch.distributed as dist

    import gpujobs
    ctx = gpujobs.context()
    t = torch.ones(1)
    dist.all_reduce(t)  # everyone is connected
    if ctx.rank == 1:
        raise KeyError("label column missing")
    dist.all_reduce(t)  # rank 0 and 2 lose their peer here
    return t.item()


def train(n: int, pause: float) -> int:
    """A job function that reports progress every step (rank 0): n steps, ``pause`` s each."""
    import time as t

    import gpujobs
    ctx = gpujobs.context()
    for i in range(n):
        ctx.progress(i + 1, total=n, loss=1.0 / (i + 1))
        t.sleep(pause)
    return n
