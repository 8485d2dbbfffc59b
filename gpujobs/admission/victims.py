"""Preemption victims, shared by the classical preemptor (:mod:`.preemption`) and fair sharing's
(:mod:`.fairsharing`): the :class:`Targets` list, the order candidates are tried in, which
priorities a policy lets a workload preempt, and Kueue's fill-back."""
from __future__ import annotations

from typing import Any, Mapping

from .quota import FR, Entry, QueueNode


class Targets(list):
    """Preemption victims, with Kueue's Preempted reason for each."""
    reasons: dict = {}


def may_preempt(e: Entry, c: Entry, policy: str) -> bool:
    """Whether ``e`` may preempt the admitted ``c`` under ``policy`` (Kueue's
    ``withinClusterQueue`` / ``reclaimWithinCohort`` values)."""
    if policy == "LowerPriority":
        return c.prio < e.prio
    if policy == "LowerOrNewerEqualPriority":
        return c.prio < e.prio or (c.prio == e.prio and e.key[1] < c.key[1])
    return policy == "Any"


def candidate_key(c: Entry, group: int) -> tuple:
    """Order of preemption candidates: evicted first, then by group (0 hierarchy reclaim,
    1 other queues, 2 own queue), lower priority first, most recently admitted first, then by
    id (Kueue: UID)."""
    return (c.state != "evicting", group, c.prio, -c.reserved[0], c.w.id)


def fill_back(cq: QueueNode, requests: Mapping[FR, float], borrow: bool,
              removed: list[tuple[Entry, Any]], fitted: bool) -> None:
    """Kueue's fill-back: when the victims in ``removed`` (usage taken out, in the order
    chosen) made ``requests`` fit, put back each one but the last that is not needed after
    all (dropped from ``removed``); then give every victim's usage back (a simulation)."""
    if fitted:
        for i in range(len(removed) - 2, -1, -1):  # the last choice is kept
            c = removed[i][0]
            c.cq.charge(c.usage, +1)
            if cq.fits(requests, borrow):
                removed[i] = removed[-1]
                removed.pop()
            else:
                c.cq.charge(c.usage, -1)
    for c, _ in removed:
        c.cq.charge(c.usage, +1)
