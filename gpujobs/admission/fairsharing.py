"""Kueue's fair sharing for the admission engine: dominant resource shares (DRS), the
tournament that orders a cohort tree's heads, and fair-sharing preemption.

After Kueue v0.19 ``pkg/cache/scheduler/fair_sharing.go`` (DRS), ``pkg/scheduler/
fair_sharing_iterator.go`` (tournament) and ``pkg/scheduler/preemption`` (``fairPreemptions``,
``fairsharing/ordering.go``, ``strategy.go``). Used only when ``Engine(fair_sharing=True)``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence

from .quota import EPS, CohortNode, Entry, Node, QueueNode, parent_of, potential
from .victims import Targets, candidate_key, fill_back, may_preempt


@dataclass(frozen=True)
class DRS:
    weight: float
    ratio: float          # unweighted: borrowed / lendable above this node, times 1000
    dominant: str = ""
    borrowing: bool = False
    borrowed: frozenset = frozenset()

    def share(self) -> float:
        if self.ratio == 0:
            return 0.0
        if self.weight == 0:
            return math.inf
        return self.ratio / self.weight

    def zero_weight_borrows(self) -> bool:
        return self.weight == 0 and self.ratio != 0

    def borrowing_on(self, requests: Mapping) -> bool:
        return any(requests.get(fr, 0.0) > 0 for fr in self.borrowed)


NEGATIVE = DRS(1.0, -1.0)


def compare(a: DRS, b: DRS) -> int:
    """Kueue CompareDRS: lower is preferred for scheduling, higher for preemption."""
    az, bz = a.zero_weight_borrows(), b.zero_weight_borrows()
    if az and bz:
        x, y = a.ratio, b.ratio
    elif az:
        return 1
    elif bz:
        return -1
    else:
        x, y = a.share(), b.share()
    return (x > y) - (x < y)


def drs(node: Node) -> DRS:
    """Dominant resource share of a queue or cohort: for every resource it uses above its
    subtree quota, the borrowed amount over what its parent could lend it; the largest."""
    parent = parent_of(node)
    if parent is None:
        return DRS(node.weight, 0.0)
    borrowing: dict[str, float] = {}
    frs = []
    for fr, q in node.subtree.items():
        b = node.usage.get(fr, 0.0) - q
        if b > EPS:
            borrowing[fr[1]] = borrowing.get(fr[1], 0.0) + b
            frs.append(fr)
    if not borrowing:
        return DRS(node.weight, 0.0)
    root = node.root
    lendable: dict[str, float] = {}
    for fr in root.subtree:
        lendable[fr[1]] = lendable.get(fr[1], 0.0) + potential(parent, fr)
    ratio, dom = 0.0, ""
    for r, b in borrowing.items():
        lr = lendable.get(r, 0.0)
        if lr > 0:
            x = b * 1000.0 / lr
            if x > ratio or (x == ratio and r < dom):
                ratio, dom = x, r
    return DRS(node.weight, ratio, dom, True, frozenset(frs))


def ancestors(node: Node) -> Iterator[CohortNode]:
    """The cohorts above a queue or a cohort, nearest first."""
    p = parent_of(node)
    while p is not None:
        yield p
        p = p.parent


# ------------------------------------------------------------------ tournament
def pop_fair(remaining: dict) -> tuple:
    """The next head to process (Kueue fairSharingIterator.pop): ``remaining`` maps a queue to
    its head tuple (sort key, entry, assignment, targets)."""
    cq = next(iter(remaining))
    if cq.cohort is None:
        return remaining.pop(cq)
    root = cq.root
    values: dict = {}
    requested: dict = {}
    for q in root.all_cqs:
        h = remaining.get(q)
        if h is None:
            continue
        asg = h[2]
        q.charge(asg.usage, +1)
        wid = h[1].w.id
        requested[wid] = asg.usage
        d = drs(q)
        for anc in ancestors(q):
            values[(anc.name, wid)] = d
            d = drs(anc)
        q.charge(asg.usage, -1)
    best = _tournament(root, remaining, values, requested)
    return remaining.pop(best[1].cq)


def _less(a: tuple, b: tuple, cohort: str, values: dict, requested: dict) -> bool:
    ea, eb = a[1], b[1]
    da, db = values[(cohort, ea.w.id)], values[(cohort, eb.w.id)]
    ba, bb = da.borrowing_on(requested[ea.w.id]), db.borrowing_on(requested[eb.w.id])
    if ba != bb:  # FairSharingPrioritizeNonBorrowing (on by default)
        return not ba
    c = compare(da, db)
    if c != 0:
        return c < 0
    if ea.prio != eb.prio:
        return ea.prio > eb.prio
    return ea.key[1] < eb.key[1]


def _tournament(cohort: CohortNode, remaining: dict, values: dict, requested: dict):
    cands = []
    for child in cohort.children:
        w = _tournament(child, remaining, values, requested)
        if w is not None:
            cands.append(w)
    for q in cohort.members:
        if q in remaining:
            cands.append(remaining[q])
    if not cands:
        return None
    best = cands[0]
    for cur in cands[1:]:
        if _less(cur, best, cohort.name, values, requested):
            best = cur
    return best


# ------------------------------------------------------------------ preemption
class _Ordering:
    """Kueue TargetClusterQueueOrdering: queues to take victims from, highest share first."""

    def __init__(self, cq: QueueNode, cands: list):
        self.cq = cq
        self.path = set(id(a) for a in ancestors(cq))
        self.targets: dict = {}
        for c in cands:
            self.targets.setdefault(c.cq.name, []).append(c)
        self.pruned_cqs: set = set()
        self.pruned_cohorts: set = set()

    def has(self, q) -> bool:
        return bool(self.targets.get(q.name))

    def pop(self, q) -> Entry:
        return self.targets[q.name].pop(0)

    def __iter__(self):
        cq = self.cq
        if cq.cohort is None:
            while cq.name not in self.pruned_cqs and self.has(cq):
                yield cq
            return
        root = cq.root
        while id(root) not in self.pruned_cohorts:
            t = self._next(root)
            if t is not None:
                yield t

    def _next(self, cohort):
        best_q, best_d = None, NEGATIVE
        for q in cohort.members:
            if q.name in self.pruned_cqs:
                continue
            d = drs(q)
            if (not d.borrowing and q is not self.cq) or not self.has(q):
                self.pruned_cqs.add(q.name)
            elif best_q is not None and compare(d, best_d) == 0:
                if candidate_key(self.targets[q.name][0], 0 if q is not self.cq else 2) < \
                        candidate_key(self.targets[best_q.name][0], 0 if best_q is not self.cq else 2):
                    best_q = q
            elif compare(d, best_d) == 1:
                best_q, best_d = q, d
        best_c, best_cd = None, NEGATIVE
        for c in cohort.children:
            if id(c) in self.pruned_cohorts:
                continue
            d = drs(c)
            if not d.borrowing and id(c) not in self.path:
                self.pruned_cohorts.add(id(c))
            elif compare(d, best_cd) >= 0:
                best_c, best_cd = c, d
        if best_c is None and best_q is None:
            self.pruned_cohorts.add(id(cohort))
            return None
        if best_c is not None and compare(best_cd, best_d) >= 0:
            return self._next(best_c)
        return best_q

    def almost_lca(self, q, lca):
        node = q
        for anc in ancestors(q):
            if anc is lca:
                return node
            node = anc
        raise AssertionError("no least common ancestor")

    def lca(self, q):
        for anc in ancestors(q):
            if id(anc) in self.path:
                return anc
        raise AssertionError("no least common ancestor")

    def shares(self, q) -> tuple[DRS, DRS]:
        lca = self.lca(q)
        return drs(self.almost_lca(self.cq, lca)), drs(self.almost_lca(q, lca))

    def target_share_after(self, q, c) -> DRS:
        c.cq.charge(c.usage, -1)
        d = drs(self.almost_lca(q, self.lca(q)))
        c.cq.charge(c.usage, +1)
        return d


def _passes(strategy: str, preemptor_new: DRS, target_old: DRS, target_new: DRS) -> bool:
    if strategy == "LessThanOrEqualToFinalShare":
        return compare(preemptor_new, target_new) <= 0
    return compare(preemptor_new, target_old) < 0


def fair_targets(e: Entry, need: set, requests: Mapping, strategies: Sequence[str]) -> Targets:
    """Kueue fairPreemptions: victims chosen by the fair-sharing ``strategies`` (rules S2-a,
    S2-b of KEP-1714), fill-back minimised; [] when they do not make ``requests`` fit."""
    cq, spec = e.cq, e.cq.spec
    cands = []
    if spec.within_queue != "Never":
        cands += [c for c in cq.admitted.values()
                  if not need.isdisjoint(c.usage) and may_preempt(e, c, spec.within_queue)]
    if cq.cohort is not None and spec.reclaim_within_cohort != "Never":
        for other in cq.cohort.root.all_cqs:
            if other is cq or not any(other.usage.get(fr, 0.0) > other.nominal.get(fr, 0.0) + EPS for fr in need):
                continue
            cands += [c for c in other.admitted.values()
                      if not need.isdisjoint(c.usage) and may_preempt(e, c, spec.reclaim_within_cohort)]
    if not cands:
        return Targets()
    cands.sort(key=lambda c: candidate_key(c, 2 if c.cq is cq else 0))
    removed: list = []  # (entry, reason)

    def take(c, reason):
        c.cq.charge(c.usage, -1)
        removed.append((c, reason))

    def fits() -> bool:
        cq.charge(requests, -1)
        ok = cq.fits(requests, True)
        cq.charge(requests, +1)
        return ok

    cq.charge(requests, +1)  # shares count the incoming workload
    within_nominal = all(cq.usage.get(fr, 0.0) <= cq.nominal.get(fr, 0.0) + EPS for fr in need)
    ordering = _Ordering(cq, cands)
    retry: list = []
    ok = False
    for q in ordering:
        if q is cq:
            take(ordering.pop(q), "InClusterQueue")
            if fits():
                ok = True
                break
            continue
        if within_nominal:
            take(ordering.pop(q), "InCohortReclamation")
            if fits():
                ok = True
                break
            continue
        p_new, t_old = ordering.shares(q)
        if math.isinf(p_new.share()) and not math.isinf(t_old.share()):
            while ordering.has(q):
                retry.append(ordering.pop(q))
            continue
        while ordering.has(q):
            c = ordering.pop(q)
            if _passes(strategies[0], p_new, t_old, ordering.target_share_after(q, c)):
                take(c, "InCohortFairSharing")
                if fits():
                    ok = True
                break
            retry.append(c)
        if ok:
            break
    if not ok and len(strategies) > 1 and retry:
        second = _Ordering(cq, retry)
        for q in second:
            p_new, t_old = second.shares(q)
            passed = compare(p_new, t_old) < 0
            c = second.pop(q)
            if passed:
                take(c, "InCohortFairSharing")
                if fits():
                    ok = True
                    break
            second.pruned_cqs.add(q.name)
    cq.charge(requests, -1)
    fill_back(cq, requests, True, removed, ok)
    if not ok:
        return Targets()
    out = Targets(c for c, _ in removed)
    out.reasons = {c.w.id: r for c, r in removed}
    return out
