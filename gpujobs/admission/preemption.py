"""Preemption (Kueue's classical preemptor): which admitted workloads would have to make room
for a pending one, within its queue and by reclaiming quota lent in its cohort tree; fair
sharing's variant is in :mod:`.fairsharing`."""
from __future__ import annotations

from typing import Iterable, Iterator, Mapping, Sequence

from . import fairsharing
from .quota import EPS, FR, CohortNode, Entry, QueueNode, within_nominal
from .victims import Targets, candidate_key, fill_back, may_preempt

# candidate variants (Kueue preemption/classical)
WITHIN_CQ, HIER_RECLAIM, RECLAIM_NO_BORROW, RECLAIM_WHILE_BORROW = range(4)
REASON = {WITHIN_CQ: "InClusterQueue", HIER_RECLAIM: "InCohortReclamation",
          RECLAIM_NO_BORROW: "InCohortReclamation", RECLAIM_WHILE_BORROW: "InCohortReclaimWhileBorrowing"}


class Preemptor:
    """Kueue's preemptor: classical, or fair sharing's when given ``fair_strategies``
    (``Engine(fair_sharing=True)``)."""

    def __init__(self, fair_strategies: Sequence[str] | None = None):
        self.fair_strategies = tuple(fair_strategies) if fair_strategies is not None else None

    def targets(self, e: Entry, need: set, requests: Mapping[FR, float]) -> Targets:
        """The victims that make ``requests`` fit (fill-back minimised), or [] when no set of
        allowed candidates does: Kueue classicalPreemptions (fairPreemptions with fair sharing)."""
        if self.fair_strategies is not None:
            return fairsharing.fair_targets(e, need, requests, self.fair_strategies)
        cq, spec = e.cq, e.cq.spec
        cands: list[tuple] = []  # (sort key, entry, variant)
        within, reclaim = spec.within_queue, spec.reclaim_within_cohort
        if within != "Never" and cq.admitted_prios and (
                min(cq.admitted_prios) < e.prio or (within != "LowerPriority" and min(cq.admitted_prios) == e.prio)):
            for c in cq.admitted.values():
                if need.isdisjoint(c.usage) or not may_preempt(e, c, spec.within_queue):
                    continue
                cands.append((candidate_key(c, 2), c, WITHIN_CQ, None))
        n_other = n_hier = 0
        coh = cq.cohort
        if coh is not None and reclaim != "Never" and _may_reclaim(cq, e.prio, reclaim):
            # Kueue collectCandidatesForHierarchicalReclaim: walk up from the queue's cohort;
            # in each subtree, queues (and child cohorts) above nominal in a resource that
            # needs preemption give candidates. Once the request fits in the quota of the
            # queue or of a cohort on the way, candidates from there up are "hierarchy"
            # candidates (any priority the reclaim policy allows).
            adv = True
            remaining = {}
            for fr, v in requests.items():
                u = cq.usage.get(fr, 0.0)
                if u + v > cq.nominal.get(fr, 0.0) + EPS:
                    adv = False
                remaining[fr] = max(0.0, v - max(0.0, cq.guaranteed.get(fr, 0.0) - u))
            thr = spec.max_priority_threshold
            prev: CohortNode | None = None
            node: CohortNode | None = coh
            while node is not None:
                for other, lca in _subtree_cqs(node, prev, need):
                    if other is cq or not other.admitted:
                        continue
                    if reclaim == "LowerPriority" and min(other.admitted_prios) >= e.prio:
                        continue
                    if within_nominal(other, need):
                        continue
                    for c in other.admitted.values():
                        if need.isdisjoint(c.usage) or not may_preempt(e, c, reclaim):
                            continue
                        if adv:
                            var = HIER_RECLAIM
                            n_hier += 1
                        elif not cq.bwc or c.prio >= e.prio or (thr is not None and c.prio > thr):
                            var = RECLAIM_NO_BORROW
                        else:
                            var = RECLAIM_WHILE_BORROW
                        n_other += 1
                        cands.append((candidate_key(c, 0 if var == HIER_RECLAIM else 1), c, var, lca))
                if node.parent is not None:
                    fits = True
                    for fr, v in list(remaining.items()):
                        nu = node.usage.get(fr, 0.0)
                        if nu + v > node.subtree.get(fr, 0.0) + EPS:
                            fits = False
                        remaining[fr] = max(0.0, v - max(0.0, node.lq.get(fr, 0.0) - nu))
                    adv = adv or fits
                prev, node = node, node.parent
        if not cands:
            return Targets()
        # Kueue NewCandidateIterator: evicted ones first; then hierarchy, priority and
        # same-queue candidates, each by CandidatesOrdering (priority, newest admission)
        cands.sort(key=lambda t: t[0])
        forbidden = not cq.bwc
        if n_other == 0 or (forbidden and not all(cq.usage.get(fr, 0.0) < cq.nominal.get(fr, 0.0) - EPS
                                                  for fr in need)):
            attempts: tuple = (True,)
        elif forbidden and n_hier == 0:
            attempts = (False, True)
        else:
            attempts = (True, False)
        for borrow in attempts:
            removed: list[tuple] = []
            fitted = False
            for _, c, var, lca in cands:
                if c.cq is not cq:
                    if borrow and var == RECLAIM_NO_BORROW:
                        continue
                    if within_nominal(c.cq, need):
                        continue
                    up = c.cq.cohort
                    while up is not None and up is not lca:  # Kueue candidateIsValid
                        if within_nominal(up, need):
                            break
                        up = up.parent
                    if up is not None and up is not lca:
                        continue
                c.cq.charge(c.usage, -1)
                removed.append((c, var))
                if cq.fits(requests, borrow):
                    fitted = True
                    break
            fill_back(cq, requests, borrow, removed, fitted)
            if fitted:
                out = Targets(c for c, _ in removed)
                out.reasons = {c.w.id: REASON[var] for c, var in removed}
                return out
        return Targets()

    def for_assignment(self, e: Entry, flavors: Mapping[str, Mapping[str, str]],
                       preempt: Iterable[tuple[str, str]]) -> dict[str, str]:
        """The victims (id -> Kueue Preempted reason) that the pending ``e`` would evict with
        the given flavor assignment ({pod set: {resource: flavor}}) when the (flavor, resource)
        pairs in ``preempt`` need preemption: Kueue's ``Preemptor.GetTargets``."""
        usage: dict[FR, float] = {}
        for ps_name, reqs in e.podsets:
            for r, a in reqs.items():
                f = (flavors.get(ps_name) or {}).get(r)
                if f is not None:
                    e.cq.ensure((f, r))
                    usage[(f, r)] = usage.get((f, r), 0.0) + a
        targets = self.targets(e, set(preempt), usage)
        return {t.w.id: targets.reasons[t.w.id] for t in targets}


def _may_reclaim(cq: QueueNode, prio: int, policy: str) -> bool:
    """Whether some other queue of ``cq``'s cohort tree has an admitted workload that ``policy``
    could let a workload of priority ``prio`` preempt (when none has, the walk up the tree
    finds no candidate: it is skipped)."""
    root = cq.root
    assert isinstance(root, CohortNode)
    lows = root.lows
    if lows[0] != root.admitted_version:  # the tree admitted or let go since: look again
        found = sorted(((min(q.admitted_prios), i), q) for i, q in enumerate(root.all_cqs) if q.admitted_prios)
        root.lows = lows = (root.admitted_version, len(found), tuple((p, q) for (p, _), q in found[:2]))
    n = lows[1] - (1 if cq.admitted_prios else 0)  # other queues with admitted workloads
    if n <= 0:
        return False
    if policy == "Any":
        return True
    first, *second = lows[2]
    low = first[0] if first[1] is not cq else second[0][0]  # the lowest of the other queues'
    return low < prio or (low == prio and policy == "LowerOrNewerEqualPriority")


def _subtree_cqs(root: CohortNode, skip: CohortNode | None, need: set) -> Iterator[tuple[QueueNode, CohortNode]]:
    """(queue, lca) for the queues under ``root``, not under ``skip``, through child cohorts
    that are above nominal in a resource that needs preemption (Kueue
    collectCandidatesInSubtree)."""
    stack = [root]
    while stack:
        node = stack.pop()
        for child in node.children:
            if child is not skip and not within_nominal(child, need):
                stack.append(child)
        for q in node.members:
            yield q, root
