"""kind='BatchJob': what a plain batch/v1 Indexed Job renders (its structure, the headless Service
beside it, Kueue's labels and suspend), that it is chosen only by name, and how the status
mapping reads the Job's own conditions and counts (k8s.io/api@v0.37.2 batch/v1 types.go)."""
from __future__ import annotations

import json

import pytest

import gpujobs
from gpujobs.backends.kubernetes.kinds import KINDS, pod_sets, resolve_kind
from gpujobs.backends.kubernetes.naming import ANN_GANG, LABEL_JOB
from gpujobs.backends.kubernetes.render.job import RenderOptions, render_job
from gpujobs.backends.kubernetes.status import mapping as sm
from gpujobs.errors import SpecError

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"


def train(x=1):
    return x


def _render(nodes=2, **opts):
    b = gpujobs.job(train).ddp(nodes=nodes, gpus_per_node=2).kubernetes(kind="BatchJob").queue("q")
    if opts:
        b = b.options(**opts)
    return render_job(b.spec(), opts=RenderOptions(namespace="ns"), submission_id="s1", key=b"k" * 32)


def test_a_two_node_batch_job_is_an_indexed_gang_with_a_headless_service():
    r = _render(nodes=2, max_runtime_s=90.5)
    job, name = r.job, r.name
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "Job")
    spec = job["spec"]
    assert {k: spec[k] for k in ("completionMode", "completions", "parallelism", "backoffLimit", "suspend",
                                 "activeDeadlineSeconds")} == {
        "completionMode": "Indexed", "completions": 2, "parallelism": 2, "backoffLimit": 0, "suspend": True,
        "activeDeadlineSeconds": 91}
    assert spec["podFailurePolicy"] == {"rules": [  # a rank stopped by its SIGTERM (143) is not a failure
        {"action": "Ignore", "onExitCodes": {"containerName": "node", "operator": "In", "values": [143]}},
        {"action": "FailJob", "onExitCodes": {"containerName": "node", "operator": "NotIn", "values": [0]}}]}
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["subdomain"] == name  # podFailurePolicy needs Never
    [c] = pod["containers"]
    assert c["name"] == "node" and c["resources"]["limits"]["nvidia.com/gpu"] == "2"
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["MASTER_ADDR"] == f"{name}-0.{name}" and env["MASTER_PORT"] == "23456"
    labels = job["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == "q" and job["metadata"]["annotations"][ANN_GANG] == "2"
    boot = json.loads(r.files.bootstrap_json)
    assert (boot["node_rank_env"], boot["master_addr_env"]) == (["JOB_COMPLETION_INDEX"], ["MASTER_ADDR"])
    [svc] = r.companions
    assert svc["apiVersion"] == "v1" and svc["kind"] == "Service" and svc["metadata"]["name"] == name
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["selector"] == {LABEL_JOB: name}
    assert spec["template"]["metadata"]["labels"][LABEL_JOB] == name  # the selector finds the pods
    assert svc["metadata"]["labels"]["gpujobs.dev/submission-id"] == "s1"  # a retry adopts it, a rollback removes it
    assert r.objects[-1] is svc and [p.name for p in pod_sets(job)] == ["main"] and pod_sets(job)[0].count == 2


def test_a_one_node_batch_job_needs_no_service_and_no_master_address():
    r = _render(nodes=1)
    pod = r.job["spec"]["template"]["spec"]
    assert r.companions == [] and "subdomain" not in pod
    assert "MASTER_ADDR" not in {e["name"] for e in pod["containers"][0]["env"]}
    assert r.job["spec"]["completions"] == r.job["spec"]["parallelism"] == 1


def test_the_bootstrap_reads_the_job_controllers_index_as_the_node_rank():
    assert KINDS["BatchJob"].rank_env == (["JOB_COMPLETION_INDEX"], ["MASTER_ADDR"], ["MASTER_PORT"])


def test_batch_job_is_chosen_only_by_name():
    spec = gpujobs.job(train).ddp(nodes=2, gpus_per_node=1).spec()
    assert resolve_kind(spec) != "BatchJob" and KINDS["BatchJob"].default_for == ()
    assert resolve_kind(spec, "BatchJob") == "BatchJob"
    with pytest.raises(SpecError, match="cannot render as BatchJob|renders as RayJob, not BatchJob"):
        gpujobs.job(train).ray().options(kind="BatchJob").spec()


def test_batch_job_refuses_volcano_gang_placement():
    with pytest.raises(SpecError, match="no Volcano gang placement") as exc:
        _render(nodes=2, volcano="gang")
    assert exc.value.field == "volcano"


# ------------------------------------------------------------------ status from the Job's own status
def _job(spec=None, status=None):
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "ns", "annotations": {ANN_GANG: "2"}},
            "spec": {"parallelism": 2, "completions": 2, **(spec or {})}, "status": status or {}}


def _c(t, reason="", message="", when=T1):
    return {"type": t, "status": "True", "reason": reason, "message": message, "lastTransitionTime": when}


def test_status_maps_the_job_controllers_conditions():
    kind = KINDS["BatchJob"]
    done = kind.state(_job(status={"startTime": T0, "completionTime": T1, "succeeded": 2, "conditions": [
        _c("SuccessCriteriaMet", "CompletionsReached"), _c("Complete", "CompletionsReached")]}))
    assert (done.phase, done.reason, done.finished_at - done.started_at) == ("succeeded", "CompletionsReached", 300)
    msg = "Container node for pod ns/j-1-abcde failed with exit code 1 matching FailJob rule at index 0"
    target = kind.state(_job(status={"active": 1, "conditions": [_c("FailureTarget", "PodFailurePolicy", msg)]}))
    assert (target.phase, target.reason, target.message) == ("failed", "PodFailurePolicy", msg)
    both = kind.state(_job(status={"conditions": [_c("FailureTarget", "DeadlineExceeded", "x"),
                                                  _c("Failed", "DeadlineExceeded", "Job was active longer")]}))
    assert (both.phase, both.message) == ("failed", "Job was active longer")
    resumed = {"type": "Suspended", "status": "False", "reason": "JobResumed", "lastTransitionTime": T0}
    assert kind.state(_job(status={"active": 2, "ready": 1, "conditions": [resumed]})).phase == "starting"
    assert kind.state(_job(status={"active": 2, "ready": 2, "conditions": [resumed]})).ready == 2
    assert kind.state(_job(status={"active": 2, "ready": 2})).phase == "running"
    assert kind.state(_job({"suspend": True}, {"conditions": [_c("Suspended", "JobSuspended")]})).phase == "suspended"
    assert kind.state(_job()).phase is None


def test_the_status_mapping_reports_a_failed_gang_with_the_controllers_reason():
    msg = "Container node for pod ns/j-1-abcde failed with exit code 1 matching FailJob rule at index 0"
    st = sm.job_status("ns/j", _job(status={"failed": 1, "conditions": [
        _c("FailureTarget", "PodFailurePolicy", msg), _c("Failed", "PodFailurePolicy", msg)]}))
    assert st.phase == "failed" and st.gang_size == 2 and msg in (st.message or st.reason or "")
