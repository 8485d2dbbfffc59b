"""Where :class:`~gpujobs.rank.outcome.Outcome` lived before the rank package: outcomes sealed
then (a local job's results, the Kubernetes archive) name this module, and still open."""
from __future__ import annotations

from ..rank.outcome import Outcome, exception_line, is_collateral

__all__ = ["Outcome", "exception_line", "is_collateral"]
