"""Kueue's feature gates as data: which scheduler behaviour each supported Kueue version has.

One row per gate that touches admission: its default in each supported Kueue version, read
from ``pkg/features/kube_features.go`` at that ref (``line`` is where the gate's versioned
spec starts there; line 0: the gate is not in that file, either not added yet, so its
behaviour is off, or removed after graduating to GA, so it is on), and how the engine treats
it (``engine``):

- ``modelled``: the engine follows the gate's value (``Engine(kueue_version=...,
  feature_gates=...)``);
- ``on`` / ``off``: the engine always behaves as with the gate at that value; choosing a
  version or override with the other value is refused (``SpecError``);
- ``n/a``: the gate switches something the engine does not model (docs/admission.md says
  what), so its value changes nothing here.

A Kueue version is chosen once per engine; every difference between versions below is a
value in this table, never a code path of its own. Kueue releases: ``v0.17.0`` and
``v0.19.2`` are tags; ``v0.20`` has no release tag in kubernetes-sigs/kueue yet (only the
``v0.20.0-devel`` branch point, whose kube_features.go lacks the v0.20 scheduler gates), so
its row is Kueue's main branch at the commit in ``REFS``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Mapping

from ..config import config_path
from ..errors import SpecError

VERSIONS = ("v0.17.0", "v0.19.2", "v0.20")
NEWEST = VERSIONS[-1]
# the ref of kubernetes-sigs/kueue each version's row (and its conformance data) is read at
REFS = {"v0.17.0": "v0.17.0", "v0.19.2": "v0.19.2",
        "v0.20": "main@ff69552e79ad21652c36caa97038382e55625cf7"}
SOURCE = "pkg/features/kube_features.go"
# s after quota is released before a cohort tree's inadmissible (parked) workloads are back in
# their queues: requeueBatchPeriod, 1 s at every ref above (pkg/cache/queue/inadmissible_workloads.go;
# 10 s under the alpha gate SchedulerLongRequeueInterval of v0.17-v0.19, off by default). A
# StrictFIFO head is retried every cycle meanwhile. tests/realcp/test_admission_differential.py
REQUEUE_BATCH_S = 1.0


@dataclass(frozen=True)
class Gate:
    name: str
    defaults: Mapping[str, bool]            # version -> default
    lines: Mapping[str, int]                # version -> line of its spec in SOURCE at REFS[version] (0: absent)
    engine: str                             # modelled | on | off | n/a
    what: str


def _g(name: str, v17: tuple, v19: tuple, v20: tuple, engine: str, what: str) -> Gate:
    rows = dict(zip(VERSIONS, (v17, v19, v20)))
    return Gate(name, {v: d for v, (d, _) in rows.items()}, {v: ln for v, (_, ln) in rows.items()}, engine, what)


# (default, line) at v0.17.0, v0.19.2, v0.20 (main@ff69552e)
GATES: tuple[Gate, ...] = (
    _g("FlavorFungibility", (True, 372), (True, 660), (True, 622), "on",
       "flavorFungibility: whenCanBorrow / whenCanPreempt, and the flavor scan resuming from "
       "the last tried flavor (LastTriedFlavorIdx)"),
    _g("FlavorFungibilityPreserveScanProgress", (False, 0), (True, 955), (True, 882), "modelled",
       "keep the flavor scan progress when a head is skipped in a cycle, and for one cycle "
       "whatever quota was released meanwhile (scheduler.go markSkipped, lastAssignmentOutdated)"),
    _g("RecomputeAssignmentUponPreemptionTargetsOverlap", (False, 0), (False, 967), (True, 894), "modelled",
       "a head whose preemption targets overlap an earlier head's of the same cycle recomputes "
       "its assignment as if those victims were gone: new targets are preempted in the same "
       "cycle, or it waits for them (DeferredFit) instead of being skipped"),
    _g("PrioritizePreemptorWorkloads", (False, 0), (False, 947), (False, 874), "off",
       "preemptor workloads first in the fair-sharing tournament and reserving quota"),
    _g("HierarchicalCohorts", (True, 419), (True, 695), (True, 0), "on",
       "cohorts with parents (GA since v0.17, removed from the table on main: always on)"),
    _g("LendingLimit", (True, 392), (True, 0), (True, 0), "on",
       "lendingLimit (GA since v0.17, removed from the table in v0.19: always on)"),
    _g("PrioritySortingWithinCohort", (True, 379), (True, 670), (True, 632), "on",
       "heads borrowing alike are ordered by priority before FIFO"),
    _g("FairSharingPreemptWithinNominal", (True, 382), (True, 673), (True, 635), "on",
       "fair sharing: a preemptor within nominal quota may preempt regardless of shares"),
    _g("FairSharingPrioritizeNonBorrowing", (True, 385), (True, 676), (True, 638), "on",
       "fair sharing: non-borrowing heads win the tournament"),
    _g("SchedulingEquivalenceHashing", (False, 516), (True, 824), (True, 756), "n/a",
       "set equal-shaped workloads aside with an inadmissible head at once (the engine keeps a "
       "heap per shape either way; equal shapes fit or fail alike, so decisions are the same)"),
    _g("PartialAdmission", (True, 368), (True, 656), (True, 618), "n/a",
       "partial admission (pod sets with a minimum count: not modelled)"),
    _g("AdmissionFairSharing", (True, 423), (True, 699), (True, 657), "n/a",
       "usage-based LocalQueue ordering; needs admissionFairSharing configured (not modelled)"),
    _g("TopologyAwareScheduling", (True, 402), (True, 683), (True, 645), "n/a",
       "topology-aware scheduling (not modelled)"),
    _g("TASRecomputeAssignmentWithinSchedulingCycle", (False, 0), (True, 903), (True, 830), "n/a",
       "recompute a topology assignment within the cycle (topology-aware scheduling: not modelled)"),
)
BY_NAME = {g.name: g for g in GATES}


def kueue_version(version: str | None) -> str:
    """The supported version row for a Kueue version string (``"v0.20.1"``, ``"0.19.2"``,
    ``"v0.17.3"``; None: the newest). Patch releases share their minor's row."""
    if version is None or version == "":
        return NEWEST
    m = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:[-+].*)?", str(version).strip())
    minor = f"v{m.group(1)}.{m.group(2)}" if m else None
    for v in VERSIONS:
        if minor is not None and (v == minor or v.startswith(minor + ".")):
            return v
    raise SpecError("kueue_version", f"Kueue {version!r} is not supported",
                    f"use one of {', '.join(VERSIONS)} (e.g. kueue_version={NEWEST!r})")


def feature_gates(version: str | None = None, overrides: Mapping[str, bool] | None = None) -> dict[str, bool]:
    """Every gate's value for ``version`` (its defaults, then ``overrides`` as Kueue's
    ``--feature-gates``); SpecError for an unknown gate, or a value the engine cannot follow."""
    v = kueue_version(version)
    out = {g.name: bool(g.defaults[v]) for g in GATES}
    for name, val in (overrides or {}).items():
        g = BY_NAME.get(name)
        if g is None:
            raise SpecError("feature_gates", f"unknown feature gate {name!r}",
                            f"use one of {', '.join(sorted(BY_NAME))}")
        out[name] = bool(val)
    for g in GATES:
        if g.engine in ("on", "off") and out[g.name] != (g.engine == "on"):
            raise SpecError("feature_gates", f"{g.name}={out[g.name]} is not modelled (the engine "
                            f"always runs with {g.name}={g.engine == 'on'})",
                            f"leave {g.name} at {g.engine == 'on'}")
    return out


def basis(version: str | None = None, overrides: Mapping[str, bool] | None = None) -> str:
    """One line for a plan's basis: the Kueue version and the modelled gates' values."""
    v = kueue_version(version)
    vals = feature_gates(v, overrides)
    gates = ", ".join(f"{g.name}={'on' if vals[g.name] else 'off'}" for g in GATES if g.engine == "modelled")
    return f"Kueue {v} scheduler ({gates})"


def with_basis(plan, version: str | None, source: str):  # noqa: ANN001, ANN201 - a status.Plan
    """``plan`` with the Kueue version its admission followed (and where that version came
    from) added to its basis."""
    line = f"admission as {basis(version)}, {source}"
    return replace(plan, basis=f"{plan.basis}; {line}" if plan.basis else line)


def kueue_version_of(version: str | None, where: str) -> str:
    """The supported Kueue version row ``version`` names (the newest when None); SpecError naming
    ``where`` for one that is not supported."""
    try:
        return kueue_version(version)
    except SpecError as exc:
        raise SpecError(where, f"Kueue {version!r} is not supported",
                        f'set kueue_version = "{NEWEST}" (or one of {", ".join(VERSIONS)}) '
                        f"in {config_path()}") from exc
