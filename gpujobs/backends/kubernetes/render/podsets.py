"""The pod sets of a rendered job object: (name, replicas, pod template, per-pod requests).

Each kind derives its own as Kueue does (its module's ``pod_sets``, kinds/); used by the quota
preflight, the plan's Workload and the render tests' GPU / gang-size rules.
"""
from __future__ import annotations

from decimal import Decimal

from ..kinds import pod_sets
from ..kinds.base import PodSet, container_requests

__all__ = ["PodSet", "container_requests", "pod_sets", "total_requests"]


def total_requests(sets: list[PodSet]) -> dict[str, Decimal]:
    """The whole job's requests: each pod set's (already parsed) requests times its count."""
    out: dict[str, Decimal] = {}
    for ps in sets:
        for k, v in ps.requests.items():
            out[k] = out.get(k, Decimal(0)) + v * ps.count
    return out
