"""``gpujobs.fsdp``: shard a model across an fsdp job's ranks (the code is :mod:`gpujobs.rank.fsdp`)."""
from __future__ import annotations

from .rank.fsdp import shard

__all__ = ["shard"]
