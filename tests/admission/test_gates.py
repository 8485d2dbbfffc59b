"""Kueue feature gates per version (gpujobs.admission.gates) and the engine following them."""
from __future__ import annotations

import pytest

from gpujobs.admission import ClusterQueue, Engine, PodSet, Workload, gates
from gpujobs.errors import SpecError


def wl(wid, queue, gpus, t=0.0):
    return Workload(wid, queue, [PodSet("main", 1, {"gpu": gpus})], priority=0, created=t)


def test_every_gate_has_a_default_and_a_source_line_per_version():
    for g in gates.GATES:
        assert set(g.defaults) == set(g.lines) == set(gates.VERSIONS), g.name
        assert g.engine in ("modelled", "on", "off", "n/a") and g.what
    assert gates.NEWEST == "v0.20"
    # the two scheduler gates of the issue, as kube_features.go gives them
    assert [gates.feature_gates(v)["FlavorFungibilityPreserveScanProgress"] for v in gates.VERSIONS] == \
        [False, True, True]
    assert [gates.feature_gates(v)["RecomputeAssignmentUponPreemptionTargetsOverlap"] for v in gates.VERSIONS] == \
        [False, False, True]


@pytest.mark.parametrize("given,row", [(None, "v0.20"), ("v0.20.1", "v0.20"), ("0.19.2", "v0.19.2"),
                                       ("v0.19.0", "v0.19.2"), ("v0.17.3", "v0.17.0"), ("v0.20.0-rc.1", "v0.20")])
def test_version_strings_map_to_their_minor_row(given, row):
    assert gates.kueue_version(given) == row
    assert Engine([ClusterQueue("q", {"gpu": 1})], kueue_version=given).kueue_version == row


def test_bad_versions_and_gates_are_refused_with_a_fix():
    with pytest.raises(SpecError, match="v0.17.0, v0.19.2, v0.20"):
        gates.kueue_version("v0.18.6")
    with pytest.raises(SpecError, match="unknown feature gate 'NoSuchGate'"):
        Engine([ClusterQueue("q", {"gpu": 1})], feature_gates={"NoSuchGate": True})
    with pytest.raises(SpecError, match="leave PrioritizePreemptorWorkloads at False"):
        gates.feature_gates("v0.19.2", {"PrioritizePreemptorWorkloads": True})
    assert gates.feature_gates("v0.19.2", {"RecomputeAssignmentUponPreemptionTargetsOverlap": True})[
        "RecomputeAssignmentUponPreemptionTargetsOverlap"]


def test_basis_names_the_version_and_the_modelled_gates():
    assert gates.basis("v0.19.2") == ("Kueue v0.19.2 scheduler (FlavorFungibilityPreserveScanProgress=on, "
                                      "RecomputeAssignmentUponPreemptionTargetsOverlap=off)")


def _overlap_engine(version, **kw):
    """a and b (same priority, different queues) both need the quota v1 and v2 borrow."""
    eng = Engine([ClusterQueue("qa", {"gpu": 4}, cohort="c", reclaim_within_cohort="Any"),
                  ClusterQueue("qb", {"gpu": 4}, cohort="c", reclaim_within_cohort="Any"),
                  ClusterQueue("qv", {"gpu": 0}, cohort="c")], kueue_version=version, **kw)
    eng.restore_admitted(wl("v1", "qv", 4), reserved_at=1, check=False)
    eng.restore_admitted(wl("v2", "qv", 4), reserved_at=2, check=False)
    eng.add(wl("b", "qb", 4, t=0))
    eng.add(wl("a", "qa", 4, t=1))
    return eng


@pytest.mark.parametrize("version,gate,victims", [
    ("v0.19.2", None, ["v2"]),            # a's targets overlap b's: a waits for the next cycle
    ("v0.20", None, ["v1", "v2"]),        # a recomputes without v2 and preempts v1 at once
    ("v0.19.2", True, ["v1", "v2"]),      # the gate, not the version, decides
    ("v0.20", False, ["v2"]),
])
def test_overlapping_targets_recomputed_in_the_same_cycle(version, gate, victims):
    over = None if gate is None else {"RecomputeAssignmentUponPreemptionTargetsOverlap": gate}
    eng = _overlap_engine(version, feature_gates=over)
    d = eng.schedule(cycles=1)
    assert sorted(v for v, _ in d.preempted) == victims
    assert dict(d.preempted)["v2"] == "b"
    if len(victims) == 2:
        assert dict(d.preempted)["v1"] == "a"
    for v in victims:
        eng.requeue(v)
    assert sorted(eng.schedule().admitted_ids) == (["a", "b"] if len(victims) == 2 else ["b"])


def _scan_engine(version):
    """qa's flavors f1, f2; a stops its scan on f1 (whenCanPreempt MayStopSearch) where b
    already claimed the only victim; f2 is free."""
    eng = Engine([ClusterQueue("qa", {"f1": {"gpu": 4}, "f2": {"gpu": 4}}, cohort="c",
                               reclaim_within_cohort="Any", when_can_preempt="MayStopSearch"),
                  ClusterQueue("qb", {"f1": {"gpu": 4}}, cohort="c", reclaim_within_cohort="Any"),
                  ClusterQueue("qv", {"f1": {"gpu": 0}}, cohort="c")], kueue_version=version)
    eng.restore_admitted(wl("v", "qv", 8), reserved_at=1, check=False)
    eng.add(wl("b", "qb", 4, t=0))
    eng.add(wl("a", "qa", 4, t=1))
    return eng


@pytest.mark.parametrize("version,a_flavor", [
    ("v0.17.0", "f1"),   # skipped: the progress is dropped, the next cycle scans f1 again and waits there
    ("v0.19.2", "f2"),   # PreserveScanProgress: the next cycle resumes after f1 and takes f2
    ("v0.20", "f1"),     # a recomputes in the first cycle and waits for b's victim (DeferredFit)
])
def test_flavor_scan_progress_follows_the_version(version, a_flavor):
    eng = _scan_engine(version)
    d = eng.schedule(cycles=1)
    assert d.preempted == [("v", "b")] and d.admitted_ids == []
    d = eng.schedule()
    assert d.admitted_ids == (["a"] if a_flavor == "f2" else [])
    eng.requeue("v")
    eng.schedule()
    assert {w: eng.admission(w).flavors["main"]["gpu"] for w in ("a", "b")} == {"a": a_flavor, "b": "f1"}

