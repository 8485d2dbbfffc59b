"""Flavor assignment (Kueue's ``flavorassigner``): for each pod set and resource group, the
flavors in order, each judged Fit / Preempt / NoFit against quota (preemption simulated, or
asked of a ``preemption_oracle``), chosen by ``flavorFungibility``."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from .model import ClusterQueue, ResourceFlavor
from .preemption import Preemptor
from .quota import EPS, FR, Entry
from .victims import Targets

# preemption modes of one flavor/resource, worst first (Kueue flavorassigner.preemptionMode)
NOFIT, NOCAND, PREEMPT, RECLAIM, FIT = range(5)

Oracle = Callable[[str, tuple[str, str], float], tuple[str, int]]


@dataclass(slots=True)
class Assignment:
    """A flavor assignment (Kueue flavorassigner.Assignment)."""
    mode: int = FIT                      # representative: NOFIT, PREEMPT or FIT
    podsets: list = field(default_factory=list)   # [(name, {resource: flavor})]
    usage: dict = field(default_factory=dict)     # {fr: amount}
    need: set = field(default_factory=set)        # frs whose mode is Preempt
    borrow: int = 0
    modes: dict = field(default_factory=dict)     # (pod set, resource) -> preemption mode
    tried: dict = field(default_factory=dict)     # (pod set, resource) -> last flavor index tried
    left: bool = False                            # a scan stopped before its last flavor


class FlavorAssigner:
    """Kueue's FlavorAssigner: given the ``preemptor`` whose targets it simulates (or an
    ``oracle`` that answers instead, Kueue's ``preemptionOracle``), the ResourceFlavors by name
    (``flavors``, None: every flavor admits every pod) and whether fair sharing is on.
    ``simulated`` keeps the last simulation (entry, fr, amount, targets) so that the cycle
    need not ask the preemptor the same question again."""

    def __init__(self, preemptor: Preemptor, flavors: Mapping[str, ResourceFlavor] | None = None,
                 oracle: Oracle | None = None, fair_sharing: bool = False):
        self.preemptor = preemptor
        self.flavors = flavors
        self.oracle = oracle
        self.fair_sharing = fair_sharing
        self.simulated: tuple[Entry, FR, float, Targets] | None = None

    @staticmethod
    def _preferred(a: tuple, b: tuple, spec: ClusterQueue) -> bool:
        """Whether (mode, borrow) ``a`` is better than ``b`` (Kueue isPreferred)."""
        if a[0] == NOFIT:
            return False
        if b[0] == NOFIT:
            return True
        if (a[0] == NOCAND) != (b[0] == NOCAND):
            return a[0] != NOCAND
        if spec.preference == "PreemptionOverBorrowing":
            if a[1] != b[1]:
                return a[1] < b[1]
            return a[0] > b[0]
        if a[0] != b[0]:
            return a[0] > b[0]
        return a[1] < b[1]

    @staticmethod
    def _try_next(rep: tuple, spec: ClusterQueue) -> bool:
        if rep[0] in (NOFIT, NOCAND):
            return True
        if rep[0] in (PREEMPT, RECLAIM) and spec.when_can_preempt == "TryNextFlavor":
            return True
        return rep[1] > 0 and spec.when_can_borrow == "TryNextFlavor"

    def _fits_quota(self, e: Entry, fr: FR, val: float) -> tuple[int, int]:
        """Kueue fitsResourceQuota: (mode, borrowing level) of taking ``val`` of ``fr``."""
        cq = e.cq
        n = cq.nominal.get(fr)
        if n is None or val > cq.potential[fr] + EPS:
            return NOFIT, 0
        if cq.cohort is None:
            borrow, may_reclaim = 0, False
        elif cq.usage[fr] + val <= n + EPS:
            borrow, may_reclaim = 0, True
        elif cq.cohort.parent is None:  # flat cohort: the root holds it or nothing does
            borrow, may_reclaim = cq.cohort.height, False
        else:
            borrow, may_reclaim = cq.borrow_level(fr, val)
        if val <= cq.available(fr) + EPS:
            return FIT, borrow
        if n + EPS >= val or may_reclaim or cq.bwc or (
                self.fair_sharing and cq.spec.reclaim_within_cohort != "Never"):
            if self.oracle is not None:
                poss, after = self.oracle(cq.name, fr, val)
                return {"Preempt": PREEMPT, "Reclaim": RECLAIM}.get(poss, NOCAND), after
            targets = self.preemptor.targets(e, {fr}, {fr: val})
            self.simulated = (e, fr, val, targets)
            if not targets:
                return NOCAND, cq.borrow_level(fr, val)[0]
            for t in targets:
                t.cq.charge(t.usage, -1)
            after = cq.borrow_level(fr, val)[0]
            for t in targets:
                t.cq.charge(t.usage, +1)
            return (PREEMPT if any(t.cq is cq for t in targets) else RECLAIM), after
        return NOFIT, borrow

    def assign(self, e: Entry) -> Assignment:
        """Kueue FlavorAssigner.Assign: per pod set and resource group, the flavors in order
        (from where the last scan stopped), chosen by the queue's ``flavorFungibility``."""
        cq = e.cq
        podsets = e.podsets
        if len(podsets) == 1 and e.pin is None and self.flavors is None and (e.last is None or not e.last[3]):
            ps_name, reqs = podsets[0]
            if len(reqs) == 1:
                for r in reqs:
                    rg = cq.rg_of.get(r)
                    if rg is not None and len(rg.flavors) == 1:
                        return self._assign_one(e, ps_name, r, rg.flavors[0], reqs[r])
        return self._assign_general(e)

    def _assign_general(self, e: Entry) -> Assignment:
        """:meth:`assign` in every case."""
        cq, spec = e.cq, e.cq.spec
        asg = Assignment()
        worst = FIT
        # Kueue LastTriedFlavorIdx: a scan resumes after the flavor it tried last
        resume = e.last[0] if e.last is not None and e.last[3] else None
        pin = e.pin
        for ps_name, reqs in e.podsets:
            flavors: dict[str, str] = {}
            for r in (reqs if len(reqs) == 1 else sorted(reqs)):
                if r in flavors:
                    continue
                rg = cq.rg_of.get(r)
                if rg is None:
                    if reqs[r] == 0:
                        continue
                    asg.mode = NOFIT
                    return asg
                group = {r: reqs[r]} if len(reqs) == 1 else {rr: reqs[rr] for rr in rg.resources if rr in reqs}
                best, best_mode = None, (NOFIT, 1 << 30)
                start = resume.get((ps_name, r), -1) + 1 if resume else 0
                attempted = -1
                for attempted, f in enumerate(rg.flavors[start:] if start else rg.flavors, start):  # noqa: B007 (read after it)
                    if pin is not None and pin.get((ps_name, r), f) != f:
                        continue  # recomputing: only the flavor nominated first (NominationMapping)
                    if self.flavors is not None and (f not in self.flavors
                                                     or not self.flavors[f].admits(e.pspecs[ps_name])):
                        continue  # an untolerated taint or a node selector it does not match
                    rep = (FIT, 0)
                    per = {}
                    for rr, val in group.items():
                        fr = (f, rr)
                        mode = self._fits_quota(e, fr, asg.usage.get(fr, 0.0) + val)
                        if self._preferred(rep, mode, spec):
                            rep = mode
                        if rep[0] == NOFIT:
                            break
                        per[rr] = mode
                    if rep[0] == NOFIT:
                        continue
                    if not self._try_next(rep, spec):
                        best, best_mode = (f, per), rep
                        break
                    if self._preferred(rep, best_mode, spec):
                        best, best_mode = (f, per), rep
                if best is None:
                    asg.mode = NOFIT
                    return asg
                f, per = best
                last_idx = -1 if attempted == len(rg.flavors) - 1 else attempted
                asg.left = asg.left or last_idx >= 0
                for rr, (rr_mode, borrow) in per.items():
                    asg.tried[(ps_name, rr)] = last_idx
                    flavors[rr] = f
                    asg.modes[(ps_name, rr)] = rr_mode
                    fr = (f, rr)
                    asg.usage[fr] = asg.usage.get(fr, 0.0) + group[rr]
                    asg.borrow = max(asg.borrow, borrow)
                    if rr_mode != FIT:
                        asg.need.add(fr)
                        worst = PREEMPT
            asg.podsets.append((ps_name, flavors))
        asg.mode = worst
        return asg

    def _assign_one(self, e: Entry, ps_name: str, r: str, f: str, amount: float) -> Assignment:
        """:meth:`assign` of one pod set asking for one resource whose group has one flavor, no
        scan to resume, nothing pinned, every flavor admitting every pod: the same answer
        without the general loops (the common case: a queue of plain GPU quota)."""
        fr = (f, r)
        val = 0.0 + amount
        mode, borrow = self._fits_quota(e, fr, val)
        if mode == NOFIT:
            return Assignment(NOFIT)
        key = (ps_name, r)
        return Assignment(FIT if mode == FIT else PREEMPT, [(ps_name, {r: f})], {fr: val},
                          set() if mode == FIT else {fr}, max(0, borrow), {key: mode}, {key: -1}, False)

    def describe(self, e: Entry) -> dict:
        """The flavor assignment ``e`` would get now, as plain data: ``{"mode":
        "Fit"|"Preempt"|"NoFit", "borrowing": level, "podsets": {pod set: {resource:
        {"flavor": f, "mode": "Fit"|"Preempt"}}}}``."""
        asg = self.assign(e)
        names = {FIT: "Fit", PREEMPT: "Preempt", NOFIT: "NoFit"}
        return {"mode": names[asg.mode], "borrowing": asg.borrow if asg.mode != NOFIT else 0,
                "podsets": {ps: {r: {"flavor": f, "mode": "Fit" if asg.modes[(ps, r)] == FIT else "Preempt"}
                                 for r, f in fl.items()} for ps, fl in asg.podsets}}
