"""Kueue objects -> the engine's model, on upstream examples (shared/crds/examples/kueue, each
file names its upstream source); expected values are the upstream docs' own words."""
from __future__ import annotations

import pytest
import yaml

from gpujobs.backends.kubernetes.status import kueue_model as f
from gpujobs_sim.crds import crds_dir

EXAMPLES = crds_dir() / "examples" / "kueue"  # $GPUJOBS_CRDS_DIR, else <repo>/../shared/crds
pytestmark = pytest.mark.skipif(not EXAMPLES.exists(), reason="shared/crds examples not available")


def load(rel):
    return [d for d in yaml.safe_load_all((EXAMPLES / rel).read_text()) if d]


def test_single_clusterqueue_setup():
    """kueue docs/tasks/manage/administer_cluster_quotas (admin/single-clusterqueue-setup.yaml):
    "admits Workloads if and only if the sum of the CPU requests is less than or equal to 9 and
    the sum of the memory requests is less than or equal to 36Gi"; the LocalQueue default/user-queue
    points at it; no preemption and BestEffortFIFO are Kueue's API defaults."""
    docs = load("admin/single-clusterqueue-setup.yaml")
    by = {d["kind"]: d for d in docs}
    c = f.KueueObjects("cluster", "default", cluster_queues=[by["ClusterQueue"]], flavors=[by["ResourceFlavor"]],
                  local_queues=[by["LocalQueue"]])
    tr = f.translate(c, now=0.0)
    (q,) = tr.snapshot.queues
    assert q.resource_groups == [{"default-flavor": {"cpu": 9.0, "memory": 36 * 2 ** 30}}]
    assert q.local_queues == ("default/user-queue",)
    assert (q.strategy, q.within_queue, q.reclaim_within_cohort) == ("BestEffortFIFO", "Never", "Never")
    assert [fl.name for fl in tr.snapshot.flavors or []] == ["default-flavor"]


def test_cohort_tree_parents():
    """kueue docs/concepts/cohort.md (cohort-tree.yaml): important-org and regular-org are children
    of root-cohort."""
    cohorts = {d["metadata"]["name"]: f.cohort(d) for d in load("cohort-tree.yaml") if d["kind"] == "Cohort"}
    assert cohorts["important-org"].parent == "root-cohort" and cohorts["regular-org"].parent == "root-cohort"
    assert cohorts["root-cohort"].parent is None


def test_admitted_podset_usage_is_per_pod():
    """kueue docs/tasks/troubleshooting/troubleshooting_jobs.md (status/workload-admission-
    podsetassignments.yaml): 3 pods of pod set main use cpu 3 and memory 600Mi in all, so one pod
    counts cpu 1 and 200Mi."""
    (wl,) = load("status/workload-admission-podsetassignments.yaml")
    asg = wl["status"]["admission"]["podSetAssignments"][0]
    (ps,) = f.podsets([{"name": "main", "count": 3, "template": {}}], {"cpu", "memory"},
                      {asg["name"]: asg["resourceUsage"]})
    assert ps.count == 3 and ps.requests == {"cpu": 1.0, "memory": 200 * 2 ** 20}
