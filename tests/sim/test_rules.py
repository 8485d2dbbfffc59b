"""The simulator's own upstream rules (gpujobs_sim.rules), checked against upstream facts, and
kept apart from the code they judge."""
from __future__ import annotations

import ast
import time
from decimal import Decimal
from pathlib import Path

import pytest

from gpujobs_sim import rules

SIM = Path(rules.__file__).resolve().parent


def test_the_simulator_never_calls_gpujobs_status_mapping_or_pod_sets():
    """Its controllers derive state from rules of their own; it may use the admission engine,
    gpujobs' error types and the rank contract's names (its kubelet sets gpujobs' variables of a
    pod's ranks: names only, no mapping) only."""
    allowed = {"gpujobs.admission", "gpujobs.errors", "gpujobs.rank.contract", "gpujobs.rank"}
    used = set()
    for path in SIM.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "gpujobs":
                used.add(node.module)
            elif isinstance(node, ast.Import):
                used |= {a.name for a in node.names if a.name.split(".")[0] == "gpujobs"}
    assert used <= allowed, used - allowed


@pytest.mark.parametrize("text,value", [
    # kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/ and
    # /docs/concepts/configuration/manage-resources-containers/#meaning-of-cpu (0.1 == 100m)
    ("100m", Decimal("0.1")), ("0.1", Decimal("0.1")), ("1Gi", Decimal(2 ** 30)), ("128974848", Decimal(128974848)),
    ("129e6", Decimal(129000000)), ("129M", Decimal(129000000)), ("123Mi", Decimal(123 * 2 ** 20)), (2, Decimal(2)),
])
def test_quantities(text, value):
    assert rules.quantity(text) == value


@pytest.mark.parametrize("bad", ["", "1.2.3", "1Kb", "Gi", "one"])
def test_bad_quantities(bad):
    assert not rules.is_quantity(bad)


def test_pod_requests_follow_kubernetes():
    # limits stand in for missing requests; init containers count by their max; overhead adds
    tmpl = {"spec": {"containers": [{"resources": {"limits": {"cpu": "2", "nvidia.com/gpu": 1}}},
                                    {"resources": {"requests": {"cpu": "500m"}}}],
                     "initContainers": [{"resources": {"requests": {"cpu": "4"}}}],
                     "overhead": {"cpu": "250m"}}}
    assert rules.pod_requests(tmpl) == {"cpu": Decimal("4.25"), "nvidia.com/gpu": Decimal(1)}


def test_pod_requests_peak_over_the_pods_phases_with_a_sidecar():
    """KEP-753 (kubernetes.io/docs/concepts/workloads/pods/sidecar-containers/#resource-sharing-
    within-containers): init1 alone cpu 3; the sidecar cpu 1 / 1Gi from its start on; init2 beside
    it cpu 3.5 / 4Gi; the app beside it cpu 2 / 1Gi; the peak plus overhead. Pod-level requests
    stand for the containers' cpu and memory."""
    spec = {"initContainers": [{"resources": {"requests": {"cpu": "3"}}},
                               {"restartPolicy": "Always", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                               {"resources": {"requests": {"cpu": "2500m", "memory": "3Gi"}}}],
            "containers": [{"resources": {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": 2}}}],
            "overhead": {"cpu": "100m"}}
    assert rules.pod_requests({"spec": spec}) == {"cpu": Decimal("3.6"), "memory": Decimal(4 * 2 ** 30),
                                                  "nvidia.com/gpu": Decimal(2)}
    spec["resources"] = {"requests": {"memory": "16Gi"}}
    assert rules.pod_requests({"spec": spec})["memory"] == Decimal(16 * 2 ** 30)


def test_rayjob_pod_sets_count_the_submitter_and_hosts():
    job = {"kind": "RayJob", "spec": {"rayClusterSpec": {
        "headGroupSpec": {"template": {}},
        "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "numOfHosts": 2, "template": {}}]}}}
    assert [(p.name, p.count) for p in rules.pod_sets(job)] == [("head", 1), ("gpu", 4), ("submitter", 1)]
    assert rules.pod_requests(rules.pod_sets(job)[-1].template) == {"cpu": Decimal("0.5"),
                                                                    "memory": Decimal(200 * 2 ** 20)}
    job["spec"]["submissionMode"] = "HTTPMode"
    assert [p.name for p in rules.pod_sets(job)] == ["head", "gpu"]


@pytest.mark.parametrize("job,finished,ok", [
    ({"kind": "TrainJob", "status": {"conditions": [{"type": "Complete", "status": "True"}]}}, True, True),
    ({"kind": "TrainJob", "status": {"conditions": [{"type": "Succeeded", "status": "True"}]}}, False, False),
    ({"kind": "MPIJob", "status": {"conditions": [{"type": "Failed", "status": "True"}]}}, True, False),
    ({"kind": "PyTorchJob", "status": {"conditions": [{"type": "Running", "status": "True"}]}}, False, False),
    ({"kind": "RayJob", "status": {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}}, True, True),
    ({"kind": "RayJob", "status": {"jobDeploymentStatus": "Running", "jobStatus": "SUCCEEDED"}}, False, False),
    ({"kind": "Job", "status": {"state": {"phase": "Aborted"}}}, True, False),
    ({"kind": "AppWrapper", "status": {"phase": "Succeeded"}}, True, True),
])
def test_finished_rules(job, finished, ok):
    out = rules.outcome(job)
    assert (out.finished, out.succeeded) == (finished, ok)


def test_limit_range_defaults_fill_missing_limits_and_requests_first_listed_wins():
    """kueue v0.17 handlePodLimitRange: the Container items' default -> missing limits,
    defaultRequest -> missing requests, in init and app containers; the first listed wins."""
    ranges = [{"spec": {"limits": [{"type": "Container", "default": {"cpu": "2"}, "defaultRequest": {"cpu": "1"}}]}},
              {"spec": {"limits": [{"type": "Pod", "max": {"cpu": "9"}},
                                   {"type": "Container", "defaultRequest": {"cpu": "3", "memory": "1Gi"}}]}}]
    tmpl = {"spec": {"initContainers": [{"name": "i"}],
                     "containers": [{"name": "a", "resources": {"limits": {"cpu": "500m"}}}]}}
    out = rules.with_limit_range_defaults(tmpl, ranges)
    assert out["spec"]["initContainers"][0]["resources"] == {"limits": {"cpu": "2"},
                                                            "requests": {"cpu": "1", "memory": "1Gi"}}
    assert out["spec"]["containers"][0]["resources"] == {"limits": {"cpu": "500m"},
                                                        "requests": {"cpu": "1", "memory": "1Gi"}}
    assert tmpl["spec"]["containers"][0]["resources"] == {"limits": {"cpu": "500m"}}  # not changed
    assert rules.pod_requests(out) == {"cpu": Decimal(1), "memory": Decimal(2 ** 30)}


def test_the_simulated_kueue_writes_resource_usage_with_the_namespaces_defaults():
    """As real Kueue does (tests/realcp: test_a_namespaces_limit_range_defaults_...): the
    admission's resourceUsage per pod set, the LimitRange's defaults counted."""
    from gpujobs_sim import SimCluster
    from tests.support import wait_for
    sim = SimCluster(gpus=None, cpus=None)
    sim.add_queue("q", "default", gpus=4, cpus=8)
    sim.store.create({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "d", "namespace": "default"},
                      "spec": {"limits": [{"type": "Container", "defaultRequest": {"cpu": "750m"}}]}})
    sim.store.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                      "metadata": {"name": "w", "namespace": "default"},
                      "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 2, "template": {"spec": {
                          "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}]}})
    sim.start()
    try:
        wl = wait_for(lambda: (w := sim.store.get("kueue.x-k8s.io/v1beta2", "Workload", "w", "default"))
                      and (w.get("status") or {}).get("admission") and w, timeout=20)
        (asg,) = wl["status"]["admission"]["podSetAssignments"]
        assert asg["resourceUsage"] == {"cpu": "1500m", "nvidia.com/gpu": "2"}
    finally:
        sim.stop()


def test_the_simulated_kueue_gives_back_the_quota_of_reclaimable_pods():
    """As real Kueue does (tests/realcp: test_a_workloads_reclaimable_pods_give_...): once 3 of
    a's 4 pods are reclaimable, b (3 GPUs) fits beside a's last one in the 4 GPUs."""
    from gpujobs_sim import SimCluster
    from tests.support import wait_for
    api = "kueue.x-k8s.io/v1beta2"

    def workload(name: str, count: int) -> dict:
        return {"apiVersion": api, "kind": "Workload", "metadata": {"name": name, "namespace": "default"},
                "spec": {"queueName": "q", "podSets": [{"name": "main", "count": count, "template": {"spec": {
                    "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": 1}}}]}}}]}}

    def admitted(name: str) -> bool:
        return bool(((sim.store.get(api, "Workload", name, "default") or {}).get("status") or {}).get("admission"))
    sim = SimCluster(gpus=None, cpus=None)
    sim.add_queue("q", "default", gpus=4, cpus=None)
    sim.store.create(workload("a", 4))
    sim.start()
    try:
        wait_for(lambda: admitted("a"), timeout=20)
        sim.store.create(workload("b", 3))
        time.sleep(1.0)
        assert not admitted("b")
        sim.store.mutate(api, "Workload", "a", "default",
                         lambda o: o["status"].__setitem__("reclaimablePods", [{"name": "main", "count": 3}]))
        wait_for(lambda: admitted("b"), timeout=20)
    finally:
        sim.stop()


def test_a_runtime_class_gives_its_overhead_to_a_pod_without_one():
    classes = [{"metadata": {"name": "kata"}, "overhead": {"podFixed": {"cpu": "250m"}}}]
    pod = {"spec": {"runtimeClassName": "kata", "containers": [{"resources": {"requests": {"cpu": "1"}}}]}}
    assert rules.pod_requests(rules.with_runtime_class_overhead(pod, classes)) == {"cpu": Decimal("1.25")}
    assert "overhead" not in pod["spec"]  # not changed
    own = {"spec": {**pod["spec"], "overhead": {"cpu": "100m"}}}
    assert rules.pod_requests(rules.with_runtime_class_overhead(own, classes)) == {"cpu": Decimal("1.1")}
