"""FSDP2 helper for ``.fsdp()`` jobs: shard a model across the job's ranks.

    model = gpujobs.fsdp.shard(MyModel())      # inside fn, after gpujobs set up the gang

On CPU ranks it uses a CPU device mesh (gloo) and full precision; on GPUs a CUDA mesh
with bf16 parameters and fp32 gradient reduction.
"""
from __future__ import annotations

from typing import Any, cast

from .context import context


def shard(model: Any, *, layers: type | tuple[type, ...] | None = None,
          mixed_precision: bool | None = None) -> Any:
    """Apply ``fully_shard`` to each submodule of type ``layers`` (if given), then to the root."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    ctx = context()
    if not dist.is_initialized():
        raise RuntimeError("gpujobs.fsdp.shard() must run inside an fsdp/ddp job (no process group)")
    on_gpu = ctx.device.startswith("cuda")
    mesh = init_device_mesh("cuda" if on_gpu else "cpu", (dist.get_world_size(),))
    kwargs: dict[str, Any] = {"mesh": mesh}
    if mixed_precision if mixed_precision is not None else on_gpu:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                                   reduce_dtype=torch.float32)
    model = model.to(ctx.device)
    if layers is not None:
        for module in model.modules():
            if isinstance(module, layers):
                fully_shard(cast(torch.nn.Module, module), **kwargs)  # modules() yields Modules
    fully_shard(model, **kwargs)
    return model
