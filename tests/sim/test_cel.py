"""The CRDs' CEL rules (x-kubernetes-validations) evaluated with cel-python, and enforced by the
simulated API server on create and update. Bad objects are built from the CRD rules' own text
(shared/crds), each rule named beside its case."""
from __future__ import annotations

import glob
import json

import kubernetes
import pytest
import yaml

import gpujobs
from gpujobs.errors import SpecError
from gpujobs_sim import FakeApiServer, cel, crds

pytestmark = pytest.mark.skipif(not crds.crds_available(), reason="CRD folder (GPUJOBS_CRDS_DIR) missing")


def _all_rules():
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    for path in sorted(glob.glob(str(crds.crds_dir() / "*" / "*.yaml"))):
        for doc in yaml.load_all(open(path), Loader=loader):
            if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                continue
            stack = [v["schema"]["openAPIV3Schema"] for v in doc["spec"]["versions"] if v.get("schema")]
            while stack:
                n = stack.pop()
                if isinstance(n, dict):
                    yield from ((doc["spec"]["names"]["kind"], r) for r in n.get("x-kubernetes-validations") or [])
                    stack.extend(n.values())
                elif isinstance(n, list):
                    stack.extend(n)


def test_every_function_a_crd_rule_calls_is_standard_cel_or_implemented():
    rules = list(_all_rules())
    assert len(rules) > 100
    unknown = {(kind, f) for kind, r in rules for f in cel.functions_used(r["rule"])
               if f not in cel.STANDARD_FUNCTIONS and f not in cel.K8S_FUNCTIONS}
    assert unknown == set()
    for _, r in rules:  # and every rule compiles
        cel.compile_schema({"x-kubernetes-validations": [r]})


@pytest.mark.parametrize("rule,value,ok", [
    ("self.lowerAscii() == 'gpu'", "GPU", True), ("self.upperAscii() == 'GPU'", "gpu", True),
    ("self.trim() == 'a'", "  a ", True), ("self.split(',').size() == 3", "a,b,c", True),
    ("self.split('/').join('-') == 'a-b'", "a/b", True), ("self.indexOf('b') == 1", "abc", True),
    ("isQuantity(self)", "500m", True), ("isQuantity(self)", "1Gi", True), ("isQuantity(self)", "1e3", True),
    ("isQuantity(self)", "one", False), ("isQuantity(self)", "1.5.5", False),
])
def test_kubernetes_extension_functions(rule, value, ok):
    # cel-go ext/strings.go and k8s.io/apiserver/pkg/cel/library/quantity.go (isQuantity examples)
    node = cel.compile_schema({"x-kubernetes-validations": [{"rule": rule, "message": "m"}]})
    errs: list = []
    cel._walk(node, value, None, False, "", errs)
    assert (errs == []) is ok, errs


def trainjob(**spec):
    base = {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 1, "numProcPerNode": 2}}
    base.update(spec)
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "exp", "namespace": "default"}, "spec": base}


def test_trainjob_rules_catch_bad_objects():
    assert crds.cel_errors(trainjob()) == []
    # trainjob_types.go: +kubebuilder:validation:XValidation:rule="self >= 1" on numProcPerNode
    assert crds.cel_errors(trainjob(trainer={"numProcPerNode": 0})) == [
        'spec.trainer.numProcPerNode: Invalid value: "integer": numProcPerNode must be greater than or equal to 1']
    bad = trainjob()
    bad["metadata"]["name"] = "1exp"  # root rule: metadata.name matches RFC 1035
    assert crds.cel_errors(bad) == ['<nil>: Invalid value: "object": metadata.name must match RFC 1035 DNS label format']
    # a transition rule: spec.trainer is immutable (self == oldSelf), checked only on update
    changed = trainjob(trainer={"numNodes": 2, "numProcPerNode": 2})
    assert crds.cel_errors(changed) == []
    assert crds.cel_errors(changed, old=trainjob()) == [
        'spec.trainer: Invalid value: "object": field is immutable']


def test_rayjob_rules_catch_bad_objects():
    job = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "r"},
           "spec": {"entrypoint": "python x.py", "managedBy": "someone-else"}}
    assert crds.cel_errors(job) == [
        "spec.managedBy: Invalid value: \"string\": the managedBy field value must be either "
        "'ray.io/kuberay-operator' or 'kueue.x-k8s.io/multikueue'"]
    job["spec"] = {"entrypoint": "python x.py", "deletionStrategy": {"onSuccess": {"policy": "DeleteCluster"}}}
    assert crds.cel_errors(job) == [
        'spec.deletionStrategy: Invalid value: "object": deletionStrategy requires either BOTH onSuccess and '
        'onFailure, OR the deletionRules field (cannot be empty)']


def workload(**spec):
    base = {"queueName": "q", "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [
        {"name": "c", "image": "i"}]}}}]}
    base.update(spec)
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": "w"}, "spec": base}


def test_workload_rules_catch_bad_objects():
    assert crds.cel_errors(workload()) == []
    # workload_types.go: priority must be set with priorityClassRef; the kueue.x-k8s.io group only
    # allows the WorkloadPriorityClass kind
    errs = crds.cel_errors(workload(priorityClassRef={"group": "kueue.x-k8s.io", "kind": "PriorityClass",
                                                      "name": "high"}))
    assert 'spec: Invalid value: "object": priority should not be nil when priorityClassRef is set' in errs
    assert ('spec.priorityClassRef: Invalid value: "object": only the WorkloadPriorityClass kind is allowed '
            'for the kueue.x-k8s.io group') in errs
    # transition rule at the root: priorityClassRef cannot be added while quota is reserved
    reserved = workload()
    reserved["status"] = {"conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                                          "message": "", "lastTransitionTime": "2026-08-22T10:00:00Z"}]}
    new = workload(priority=5, priorityClassRef={"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass",
                                                 "name": "high"})
    new["status"] = reserved["status"]
    assert crds.cel_errors(new) == []
    assert crds.cel_errors(new, old=reserved) == [
        '<nil>: Invalid value: "object": priorityClassRef is immutable while workload quota reserved']


def test_cluster_queue_rule_uses_the_schema_defaults():
    # reclaimWithinCohort defaults to Never and borrowWithinCohort.policy to Never: the rule
    # "!(reclaimWithinCohort == 'Never' && has(borrowWithinCohort) && policy != 'Never')" holds
    cq = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq"},
          "spec": {"preemption": {"withinClusterQueue": "LowerPriority", "borrowWithinCohort": {}}}}
    assert crds.cel_errors(cq) == []
    cq["spec"]["preemption"]["borrowWithinCohort"] = {"policy": "LowerPriority"}
    assert crds.cel_errors(cq) == ['spec.preemption: Invalid value: "object": reclaimWithinCohort=Never and '
                                   'borrowWithinCohort.Policy!=Never']


@pytest.fixture
def api():
    srv = FakeApiServer().start()
    client = kubernetes.client.ApiClient(srv.configuration())
    yield srv, kubernetes.client.CustomObjectsApi(client)
    client.close()
    srv.stop()


def test_the_simulated_api_server_refuses_a_create_and_an_update_that_break_a_rule(api):
    srv, co = api
    args = ("trainer.kubeflow.org", "v1alpha1", "default", "trainjobs")
    with pytest.raises(kubernetes.client.ApiException) as info:
        co.create_namespaced_custom_object(*args, trainjob(trainer={"numProcPerNode": 0}))
    assert info.value.status == 422
    body = json.loads(info.value.body)
    assert body["reason"] == "Invalid" and body["message"] == (
        'TrainJob.trainer.kubeflow.org "exp" is invalid: spec.trainer.numProcPerNode: Invalid value: '
        '"integer": numProcPerNode must be greater than or equal to 1')
    assert body["details"]["causes"] == [{"reason": "FieldValueInvalid", "field": "spec.trainer.numProcPerNode",
                                          "message": 'Invalid value: "integer": numProcPerNode must be greater '
                                                     'than or equal to 1'}]
    assert srv.store.get("trainer.kubeflow.org/v1alpha1", "TrainJob", "exp", "default") is None
    co.create_namespaced_custom_object(*args, trainjob())
    # update: suspend may change (Kueue does it), the trainer may not (transition rule)
    co.patch_namespaced_custom_object(*args, "exp", {"spec": {"suspend": False}})
    with pytest.raises(kubernetes.client.ApiException) as info:
        co.patch_namespaced_custom_object(*args, "exp", {"spec": {"trainer": {"numNodes": 4}}})
    assert info.value.status == 422 and json.loads(info.value.body)["message"] == (
        'TrainJob.trainer.kubeflow.org "exp" is invalid: spec.trainer: Invalid value: "object": field is immutable')
    assert srv.store.get("trainer.kubeflow.org/v1alpha1", "TrainJob", "exp", "default")["spec"]["trainer"][
        "numNodes"] == 1


def test_a_job_name_starting_with_a_digit_is_refused_before_anything_is_created():
    """Found by the CEL rules in the render matrix: TrainJob names must be RFC 1035 labels."""
    def f():
        pass
    with pytest.raises(SpecError, match="start with a letter") as info:
        gpujobs.job(f).ddp(gpus=1).name("1exp").render()
    assert "--name j-1exp" in str(info.value) and ".name('j-1exp')" in str(info.value)
