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


# A pod with a regular init container before a sidecar, one after it, and overhead. By phase
# (KEP-753): init1 alone cpu 3; the sidecar starting cpu 1 / 1Gi; init2 beside the sidecar cpu 3.5
# / 4Gi; then the app beside the sidecar cpu 2 / 1Gi and 2 GPUs (a limit standing for a request).
# The most at once: cpu 3.5 / 4Gi / 2 GPUs, plus 100m of overhead.
SIDECAR_POD = {"spec": {
    "initContainers": [{"name": "init1", "resources": {"requests": {"cpu": "3"}}},
                       {"name": "proxy", "restartPolicy": "Always",
                        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                       {"name": "init2", "resources": {"requests": {"cpu": "2500m", "memory": "3Gi"}}}],
    "containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": 2}}}],
    "overhead": {"cpu": "100m"}}}


def test_a_sidecar_counts_beside_the_app_and_the_init_containers_after_it():
    """Kueue v0.17 counts a pod as component-helpers' PodRequests does (KEP-753): a sidecar runs
    for the pod's whole life. Before, a sidecar counted like a regular init container (cpu 3.1,
    memory 3Gi: the largest init container, not beside the app)."""
    assert f.pod_requests(SIDECAR_POD) == {"cpu": 3.6, "memory": 4 * 2 ** 30, "gpu": 2.0}


def test_pod_level_requests_replace_the_containers_cpu_and_memory_only():
    """PodLevelResources (component-helpers applyPodLevelResources): pod-level requests stand for
    the containers' cpu, memory and hugepages; GPUs stay the containers'."""
    pod = {"spec": {**SIDECAR_POD["spec"], "resources": {"requests": {"cpu": "8", "memory": "16Gi"}}}}
    assert f.pod_requests(pod) == {"cpu": 8.1, "memory": 16 * 2 ** 30, "gpu": 2.0}


def limit_range(ns: str, name: str, default: dict, default_request: dict) -> dict:
    return {"metadata": {"name": name, "namespace": ns}, "spec": {"limits": [
        {"type": "Pod", "max": {"cpu": "64"}},
        {"type": "Container", "default": default, "defaultRequest": default_request}]}}


def test_limit_range_defaults_fill_what_a_container_leaves_out_first_range_first():
    """kueue v0.17 handlePodLimitRange then UseLimitsAsMissingRequestsInPod: a missing request
    is the LimitRange's defaultRequest before the container's own limit; the first LimitRange
    to name a resource gives it (limitrange.Summarize); other namespaces' do not count."""
    ranges = [limit_range("ml", "a", {"cpu": "2"}, {"cpu": "500m"}),
              limit_range("ml", "b", {"memory": "1Gi"}, {"cpu": "4", "memory": "256Mi"}),
              limit_range("other", "c", {}, {"cpu": "8"})]
    d = f.container_defaults(ranges, "ml")
    assert d == ({"cpu": "2", "memory": "1Gi"}, {"cpu": "500m", "memory": "256Mi"})
    tmpl = {"spec": {"containers": [{"name": "a"},
                                    {"name": "b", "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": 1}}},
                                    {"name": "c", "resources": {"requests": {"memory": "2Gi"}}}]}}
    assert f.pod_requests(tmpl, d) == {"cpu": 1.5, "memory": 2.5 * 2 ** 30, "gpu": 1.0}
    assert f.pod_requests(tmpl) == {"cpu": 1.0, "memory": 2 * 2 ** 30, "gpu": 1.0}  # no defaults
    assert f.container_defaults(ranges, "none") == ({}, {})


def test_a_pending_workload_counts_its_namespaces_limit_range_defaults():
    """translate(): a pending Workload's pod set is counted with the defaults of its own
    namespace (an admitted one has Kueue's resourceUsage)."""
    c = _one_cq_objects(_workload(4, {}, cpu=None), limit_ranges=[limit_range("ml", "a", {}, {"cpu": "750m"})])
    (job,) = f.translate(c).snapshot.pending
    assert job.workload.podsets[0].requests == {"cpu": 0.75}


def _one_cq_objects(wl: dict, limit_ranges: tuple[dict, ...] | list[dict] = ()):
    """Kueue objects of one ClusterQueue ``cq`` (10 cpu) fed by LocalQueue ``ml/q``, and ``wl``."""
    from gpujobs.backends.kubernetes.status.kueue_read import KueueObjects
    cq = {"metadata": {"name": "cq"}, "spec": {"resourceGroups": [{
        "coveredResources": ["cpu"], "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": "10"}]}]}]}}
    lq = {"metadata": {"name": "q", "namespace": "ml"}, "spec": {"clusterQueue": "cq"}}
    return KueueObjects("cluster", "ml", cluster_queues=[cq], local_queues=[lq], workloads=[wl],
                        limit_ranges=list(limit_ranges))


def _workload(count: int, status: dict, cpu: str | None = "1") -> dict:
    """Workload ``ml/w`` on LocalQueue ``q``: ``count`` pods of one container asking ``cpu``
    (None: no request of its own)."""
    container = {"name": "x", **({"resources": {"requests": {"cpu": cpu}}} if cpu else {})}
    return {"metadata": {"name": "w", "namespace": "ml", "uid": "u1", "creationTimestamp": "2026-12-04T10:00:00Z"},
            "spec": {"queueName": "q", "podSets": [{"name": "main", "count": count, "template": {"spec": {
                "containers": [container]}}}]},
            "status": status}


@pytest.mark.parametrize("count, admitted, reclaim, held", [
    (4, 4, 0, 4.0),   # all its pods hold quota
    (4, 4, 3, 1.0),   # three of a Job's pods finished: Kueue counts one (podSetsCountsAfterReclaim)
    (6, 4, 0, 4.0),   # partially admitted: the admission's 4 pods, not the pod set's 6
    (6, 4, 3, 3.0),   # 6 - 3 left, fewer than the 4 admitted
    (4, 4, 4, 0.0),   # every pod done
])
def test_an_admitted_workload_holds_the_quota_of_its_pods_not_yet_reclaimable(count, admitted, reclaim, held):
    """kueue v0.17 totalRequestsFromAdmission: resourceUsage is for the admission's count; pods in
    status.reclaimablePods scale it down (tests/realcp checks it against real Kueue)."""
    at = "2026-12-04T10:00:01Z"
    status = {"admission": {"clusterQueue": "cq", "podSetAssignments": [
        {"name": "main", "count": admitted, "flavors": {"cpu": "f"}, "resourceUsage": {"cpu": str(admitted)}}]},
        "conditions": [{"type": t, "status": "True", "lastTransitionTime": at} for t in ("QuotaReserved", "Admitted")],
        "reclaimablePods": [{"name": "main", "count": reclaim}] if reclaim else []}
    (job,) = f.translate(_one_cq_objects(_workload(count, status))).snapshot.running
    assert job.workload.total().get("cpu", 0.0) == pytest.approx(held)


def test_a_pending_workload_asks_for_its_pods_not_yet_reclaimable():
    (job,) = f.translate(_one_cq_objects(_workload(4, {"reclaimablePods": [{"name": "main", "count": 1}]}))).snapshot.pending
    assert job.workload.podsets[0].count == 3 and job.workload.total() == {"cpu": 3.0}


def test_a_pod_naming_a_runtime_class_counts_its_overhead_unless_it_sets_its_own():
    """kueue v0.17 handlePodOverhead: runtimeClassName and no spec.overhead -> the class's
    overhead.podFixed; a class without overhead, or an unknown one, adds nothing."""
    overheads = f.runtime_overheads([{"metadata": {"name": "kata"}, "overhead": {"podFixed": {"cpu": "250m", "memory": "128Mi"}}},
                                     {"metadata": {"name": "nvidia"}, "handler": "nvidia"}])
    pod = {"spec": {"runtimeClassName": "kata", "containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}]}}
    assert f.pod_requests(pod, overheads=overheads) == {"cpu": 1.25, "memory": 128 * 2 ** 20}
    own = {"spec": {**pod["spec"], "overhead": {"cpu": "100m"}}}
    assert f.pod_requests(own, overheads=overheads) == {"cpu": 1.1}
    for name in ("nvidia", "unknown"):
        assert f.pod_requests({"spec": {**pod["spec"], "runtimeClassName": name}}, overheads=overheads) == {"cpu": 1.0}


@pytest.mark.parametrize("job, limit", [
    ({"spec": {"activeDeadlineSeconds": 600}}, 600.0),  # batch/v1 Job
    ({"spec": {"runPolicy": {"activeDeadlineSeconds": 300}}}, 300.0),  # the Kubeflow v1 kinds
    ({"metadata": {"labels": {f.MAX_EXEC_LABEL: "900"}}, "spec": {}}, 900.0),  # Kueue's timer alone
    ({"metadata": {"labels": {f.MAX_EXEC_LABEL: "900"}}, "spec": {"activeDeadlineSeconds": 600}}, 600.0),
    ({"metadata": {"labels": {f.MAX_EXEC_LABEL: "soon"}}, "spec": {}}, None),
    ({"spec": {"activeDeadlineSeconds": 0}}, None),
    (None, None),
])
def test_a_jobs_declared_limit_is_its_own_deadline_before_kueues_label(job, limit):
    """The forecast's limit and the status' time-limit message read one deadline
    (objects.own_deadline_s); Kueue's max-exec-time label counts only without one."""
    assert f._job_limit(job) == limit
