"""``gpujobs.checkpoint``: resume after preemption (the code is :mod:`gpujobs.rank.checkpoint`)."""
from __future__ import annotations

from .rank.checkpoint import (Checkpointable, Preempted, resumable, uses_checkpoints,
                              watches_preemption)

__all__ = ["Checkpointable", "Preempted", "resumable", "uses_checkpoints", "watches_preemption"]
