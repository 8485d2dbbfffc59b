"""Property-based: any table or slurm.conf gives valid Kueue objects or a SpecError."""
from __future__ import annotations

import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpujobs import admin
from gpujobs_sim import crds
from gpujobs.errors import SpecError

pytestmark = pytest.mark.skipif(not crds.crds_available(), reason="CRD folder missing")

NAMES = st.sampled_from(["a", "team-a", "b2", "c", "gpu", "d", "e", "f", "g", "h", "i", "j", "k", "l",
                         "Bad_Name", "x" * 70])
QTY = st.one_of(st.integers(0, 64), st.integers(0, 64), st.sampled_from(["16Gi", "1.5", "100m"]),
                st.sampled_from(["lots", None, True, -1]))
RES = st.sampled_from(["gpu", "cpu", "memory", "nvidia.com/mig-1g.10gb", "gpus"])
QUOTA = st.dictionaries(RES, st.one_of(QTY, QTY, st.fixed_dictionaries(
    {"nominal": QTY}, optional={"borrowingLimit": QTY, "lendingLimit": QTY})), max_size=3)
TEAM = st.fixed_dictionaries({
    "quota": st.dictionaries(st.sampled_from(["f1", "f2", "f1", "f2", "nope"]), QUOTA, min_size=1, max_size=2)},
    optional={
    "cohort": st.one_of(st.none(), NAMES), "namespace": NAMES,
    "borrowingLimit": st.dictionaries(RES, QTY, max_size=2),
    "preemption": st.fixed_dictionaries({}, optional={
        "reclaimWithinCohort": st.sampled_from(["Never", "Any", "LowerPriority", "Sometimes"]),
        "withinClusterQueue": st.sampled_from(["Never", "LowerPriority", "Any"])}),
})
TABLE = st.fixed_dictionaries({"teams": st.dictionaries(NAMES, TEAM, min_size=1, max_size=3),
                               "flavors": st.just({"f1": {}, "f2": {"nodeLabels": {"k": "v"}}})}, optional={
    "cohort": NAMES,
    "priorities": st.dictionaries(NAMES, st.one_of(st.integers(-10, 10**10), st.text(max_size=3)), max_size=2),
})


@settings(max_examples=300, deadline=None)
@given(TABLE)
def test_tables_render_valid_objects_or_refuse(table):
    try:
        objs = admin.render_queues(table)  # validates against the CRDs itself
    except SpecError as exc:
        assert exc.field and exc.fix
        assert "does not match its CRD" not in str(exc), exc  # the table check must catch it first
        return
    for o in objs:
        assert crds.schema_errors(o) == []
        if o["kind"] == "ClusterQueue" and "cohortName" not in o["spec"]:
            flavors = o["spec"]["resourceGroups"][0]["flavors"]
            assert all("borrowingLimit" not in r for f in flavors for r in f["resources"])


LINES = st.sampled_from([
    "NodeName=n[1-4] CPUs=8 RealMemory=64000 Gres=gpu:a100:4", "NodeName=m1 CPUs=4",
    "NodeName=DEFAULT Sockets=2 CoresPerSocket=8", "NodeName=x[1-b] CPUs=2", "NodeName=y CPUs=many",
    "PartitionName=p1 Nodes=n[1-2]", "PartitionName=P_2 Nodes=ALL MaxTime=1-0", "PartitionName=p3 Nodes=zz",
    "PartitionName=DEFAULT State=UP", "GresTypes=gpu", "# comment", "NodeName=g Gres=gpu:v100:x",
    "PartitionName=p4", "NodeName=q CPUs=2 \\", "  RealMemory=10G", "PartitionName='unclosed",
])


@settings(max_examples=300, deadline=None)
@given(st.tuples(st.lists(LINES, max_size=6), st.sampled_from(["", "NodeName=n[1-4] CPUs=8 Gres=gpu:4"]),
                 st.sampled_from(["", "PartitionName=p9 Nodes=n[1-4]"]))
       .map(lambda t: "\n".join([t[1], *t[0], t[2]]) + "\n"))
def test_slurm_conf_never_crashes(text):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            objs = admin.render_queues(slurm_conf=text)
        except SpecError as exc:
            assert "does not match its CRD" not in str(exc), exc
            return
    assert all(crds.schema_errors(o) == [] for o in objs)
