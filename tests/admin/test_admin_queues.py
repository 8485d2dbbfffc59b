"""Kueue admin objects from a teams table and from slurm.conf, checked against the real CRDs."""
from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import yaml

from gpujobs import admin
from gpujobs_sim import crds
from gpujobs.errors import SpecError

DATA = Path(__file__).parent / "data"
pytestmark = pytest.mark.skipif(not crds.crds_available(), reason="CRD folder (GPUJOBS_CRDS_DIR) missing")


def by_kind(objs):
    out: dict[str, dict[str, dict]] = {}
    for o in objs:
        out.setdefault(o["kind"], {})[o["metadata"]["name"]] = o
    return out


def check_kueue_rules(objs):
    """The CRD's CEL rules, which jsonschema cannot run, checked by hand."""
    for o in objs:
        assert crds.schema_errors(o) == [], o
        assert crds.unknown_fields(o) == [], o
        if o["kind"] != "ClusterQueue":
            continue
        spec = o["spec"]
        seen_flavors = set()
        for rg in spec["resourceGroups"]:
            for f in rg["flavors"]:
                # each flavor lists the group's resources in the same order
                assert [r["name"] for r in f["resources"]] == rg["coveredResources"]
                assert f["name"] not in seen_flavors
                seen_flavors.add(f["name"])
                if "cohortName" not in spec:
                    assert all("borrowingLimit" not in r for r in f["resources"])
        pre = spec["preemption"]
        assert not (pre.get("reclaimWithinCohort") == "Never" and "borrowWithinCohort" in pre)
    flavors = {o["metadata"]["name"] for o in objs if o["kind"] == "ResourceFlavor"}
    cqs = {o["metadata"]["name"] for o in objs if o["kind"] == "ClusterQueue"}
    for o in objs:
        if o["kind"] == "ClusterQueue":
            for rg in o["spec"]["resourceGroups"]:
                assert {f["name"] for f in rg["flavors"]} <= flavors
        if o["kind"] == "LocalQueue":
            assert o["spec"]["clusterQueue"] in cqs


def test_table_renders_valid_objects():
    objs = admin.render_queues(DATA / "teams.yaml")
    check_kueue_rules(objs)
    k = by_kind(objs)
    assert set(k) == {"ResourceFlavor", "WorkloadPriorityClass", "ClusterQueue", "LocalQueue"}
    a = k["ClusterQueue"]["team-a"]["spec"]
    assert a["cohortName"] == "research"
    assert a["preemption"] == {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    assert a["resourceGroups"][0]["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu"]
    a100 = {r["name"]: r for r in a["resourceGroups"][0]["flavors"][0]["resources"]}
    assert a100["nvidia.com/gpu"] == {"name": "nvidia.com/gpu", "nominalQuota": 16, "borrowingLimit": 8}
    cpu_nodes = {r["name"]: r for r in a["resourceGroups"][0]["flavors"][1]["resources"]}
    assert cpu_nodes["cpu"] == {"name": "cpu", "nominalQuota": 64, "borrowingLimit": 64, "lendingLimit": 32}
    assert cpu_nodes["nvidia.com/gpu"]["nominalQuota"] == 0
    assert k["ClusterQueue"]["team-b"]["spec"]["preemption"]["withinClusterQueue"] == "LowerOrNewerEqualPriority"
    assert k["LocalQueue"]["team-b"]["metadata"]["namespace"] == "ml"
    assert k["WorkloadPriorityClass"]["high"]["value"] == 1000
    # apply order: flavors and priority classes before the queues that name them
    kinds = [o["kind"] for o in objs]
    assert kinds.index("LocalQueue") > kinds.index("ClusterQueue") > kinds.index("ResourceFlavor")


def test_no_cohort_means_no_borrowing_field():
    objs = admin.render_queues({"flavors": {"f": {}}, "teams": {"solo": {"quota": {"f": {"gpu": 2}}}}})
    check_kueue_rules(objs)
    cq = by_kind(objs)["ClusterQueue"]["solo"]["spec"]
    assert "cohortName" not in cq


@pytest.mark.parametrize("table,words", [
    ({"teams": {"a": {"quota": {"nope": {"gpu": 1}}}}}, "flavor 'nope' is not defined"),
    ({"flavors": {"f": {}}, "teams": {"a": {"quota": {"f": {"gpu": 1}}, "borrowingLimit": {"gpu": 1}}}},
     "need a cohort"),
    ({"flavors": {"f": {}}, "teams": {"A_team": {"quota": {"f": {"gpu": 1}}}}}, "not a valid Kubernetes name"),
    ({"flavors": {"f": {}}, "teams": {"a": {"quota": {"f": {"gpu": -1}}}}}, "negative"),
    ({"flavors": {"f": {}}, "teams": {"a": {"quota": {"f": {"memory": "lots"}}}}}, "not a quantity"),
    ({"flavors": {"f": {}}, "teams": {"a": {"quota": {"f": {"gpu": 1}},
                                            "preemption": {"withinClusterQueue": "Any"}}}}, "not allowed"),
    ({"flavors": {"f": {}}, "teams": {"a": {"quota": {"f": {"gpu": 1}}, "cohort": "c",
      "preemption": {"reclaimWithinCohort": "Never", "borrowWithinCohort": {"policy": "LowerPriority"}}}}},
     "reclaimWithinCohort other than Never"),
    ({"flavors": {"f": {}}, "teams": {}}, "lists no team"),
    ({"flavours": {}}, "not a table section"),
    ({"priorities": {"high": "very"}, "flavors": {"f": {}}, "teams": {"a": {"quota": {"f": {"gpu": 1}}}}},
     "32-bit integer"),
])
def test_bad_tables_fail_before_rendering(table, words):
    with pytest.raises(SpecError, match=words):
        admin.render_queues(table)


def test_hostlists():
    assert admin.expand_hostlist("gpu[01-03,07],login1") == ["gpu01", "gpu02", "gpu03", "gpu07", "login1"]
    assert admin.expand_hostlist("r[1-2]n[1-2]") == ["r1n1", "r1n2", "r2n1", "r2n2"]


def test_slurm_conf_to_queues():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        objs = admin.render_queues(slurm_conf=DATA / "slurm.conf", namespace="research")
    check_kueue_rules(objs)
    k = by_kind(objs)
    assert set(k["ClusterQueue"]) == {"a100", "h100", "cpu", "debug-all"}
    assert set(k["ResourceFlavor"]) == {"a100", "h100", "cpu"}
    q = {f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]}
         for f in k["ClusterQueue"]["a100"]["spec"]["resourceGroups"][0]["flavors"]}
    # 4 nodes × 8 A100, 2 sockets × 32 cores, 1031000 MB
    assert q == {"a100": {"cpu": 256, "memory": "4124000Mi", "nvidia.com/gpu": 32}}
    h = k["ClusterQueue"]["h100"]["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    assert {r["name"]: r["nominalQuota"] for r in h} == {"cpu": 192, "memory": "1024Gi", "nvidia.com/gpu": 8}
    assert all(cq["spec"]["cohortName"] == "slurm" for cq in k["ClusterQueue"].values())
    assert all(lq["metadata"]["namespace"] == "research" for lq in k["LocalQueue"].values())
    msgs = [str(w.message) for w in caught]
    assert any("a100 and debug-all share 1 node" in m for m in msgs)
    assert any("maxtime" in m and "prioritytier" in m for m in msgs)


@pytest.mark.parametrize("text,words", [
    ("NodeName=n1 CPUs=4\n", "no PartitionName"),
    ("NodeName=n1 CPUs=4\nPartitionName=p Nodes=n2\n", "node n2 has no NodeName"),
    ("NodeName=n[1-x] CPUs=4\nPartitionName=p Nodes=n1\n", "not a host list"),
    ("NodeName=n1 CPUs=4 Gres=gpu:a100:lots\nPartitionName=p Nodes=n1\n", "no GPU count"),
])
def test_bad_slurm_conf(text, words):
    with pytest.raises(SpecError, match=words):
        admin.table_from_slurm_conf(text)


def test_yaml_round_trip():
    docs = list(yaml.safe_load_all(admin.queues_yaml(DATA / "teams.yaml")))
    assert docs == admin.render_queues(DATA / "teams.yaml")
