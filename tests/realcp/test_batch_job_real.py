"""kind='BatchJob' against the real kube-apiserver, kube-controller-manager (the real Job controller)
and Kueue v0.17.0 (its batch/job integration): the Indexed Job and its headless Service are
accepted as rendered, Kueue admits the Job and unsuspends it, and the real Job controller makes one
pod per index with the index annotation, hostname ``<job>-<index>`` and the Service as subdomain.
No node is registered in this test (test_node_real.py runs pods), so the pods stay Pending and the
story ends at "admitted" or "starting"."""
from __future__ import annotations

from gpujobs.backends.kubernetes import naming

from .conftest import NS
from .kube import is_true, job_obj, spec_of, wait_for, workload_of

INDEX = "batch.kubernetes.io/job-completion-index"


def test_real_kueue_admits_a_batch_job_and_the_real_job_controller_makes_its_indexed_pods(controlplane, backend):
    controlplane.require_kueue()
    from kubernetes import client
    api = backend.api_client
    core = client.CoreV1Api(api)
    job_id = backend.submit(spec_of("BatchJob"))
    _, name = naming.parse_job_id(job_id)
    try:
        job = job_obj(api, "BatchJob", name)
        assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["completions"] == 2
        assert [r["action"] for r in job["spec"]["podFailurePolicy"]["rules"]] == ["Ignore", "FailJob"]  # not pruned
        svc = api.sanitize_for_serialization(core.read_namespaced_service(name, NS))
        assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
        assert svc["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
        wl = wait_for(lambda: (w := workload_of(api, "BatchJob", name)) and is_true(w, "Admitted") and w,
                      60, f"BatchJob {name}'s Workload Admitted")
        assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("main", 2)]
        wait_for(lambda: not job_obj(api, "BatchJob", name)["spec"].get("suspend"), 30, "the Job unsuspended")

        def pods():
            items = core.list_namespaced_pod(NS, label_selector=f"batch.kubernetes.io/job-name={name}").items
            return [api.sanitize_for_serialization(p) for p in items]
        made = wait_for(lambda: (ps := pods()) and len(ps) == 2 and ps, 60, "the Job controller's two pods")
        assert sorted(p["metadata"]["annotations"][INDEX] for p in made) == ["0", "1"]
        assert {p["spec"]["hostname"] for p in made} == {f"{name}-0", f"{name}-1"}
        assert {p["spec"]["subdomain"] for p in made} == {name}
        env = {e["name"]: e for e in made[0]["spec"]["containers"][0]["env"]}
        assert env["JOB_COMPLETION_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"].endswith(INDEX + "']")
        assert env["MASTER_ADDR"]["value"] == f"{name}-0.{name}"
        st = wait_for(lambda: (s := backend.status(job_id)).phase in ("admitted", "starting") and s, 30,
                      "gpujobs to see the admission")
        assert st.gang_size == 2
    finally:
        backend.cancel(job_id)
        wait_for(lambda: job_obj(api, "BatchJob", name) is None, 60, f"{job_id} deleted")
