"""gpujobs' kubernetes backend against the real apiserver and real Kueue v0.17.0: submit, the
Workload Kueue makes, admission (QuotaReserved, Admitted, suspend flipped), queue positions from
the real visibility API, preemption of a lower priority job, and cancel (the real garbage
collector). No job operator runs here, so no pods start: these stories end at "admitted"."""
from __future__ import annotations

import pytest

from gpujobs.backends.kubernetes import naming
from gpujobs.backends.kubernetes.kinds import KUEUE_KINDS

from .conftest import QUEUE
from .kube import cond, custom, is_true, job_obj, spec_of, suspended, wait_for, workload_of, workloads_owned_by
from .conftest import NS


@pytest.fixture
def jobs(backend):
    """Submit through the backend; everything submitted is cancelled (and gone) afterwards."""
    made: list[str] = []

    def submit(spec) -> str:
        job_id = backend.submit(spec)
        made.append(job_id)
        return job_id
    yield submit
    for job_id in made:
        try:
            backend.cancel(job_id)
        except Exception:  # noqa: BLE001 - a test may have cancelled it already
            pass
    api = backend.api_client
    for job_id in made:
        _, name = naming.parse_job_id(job_id)
        wait_for(lambda: all(job_obj(api, k, name) is None for k in KUEUE_KINDS) and not workloads_owned_by(api, name),
                 60, f"{job_id} and its Workload deleted")  # a Workload left pending is ahead of the next test's jobs


@pytest.mark.parametrize("kind", sorted(KUEUE_KINDS))
def test_real_kueue_admits_each_kind_and_gpujobs_reports_it(controlplane, backend, jobs, kind):
    controlplane.require_kueue()
    job_id = jobs(spec_of(kind))
    _, name = naming.parse_job_id(job_id)
    api = backend.api_client
    wl = wait_for(lambda: (w := workload_of(api, kind, name)) and is_true(w, "Admitted") and w,
                  60, f"{kind} {name}'s Workload Admitted")
    assert is_true(wl, "QuotaReserved")
    assert wl["spec"]["queueName"] == QUEUE
    assert wl["status"]["admission"]["clusterQueue"] == "cq-a"
    # Kueue unsuspends the job it admitted
    wait_for(lambda: not suspended(kind, job_obj(api, kind, name)), 30, f"{kind} unsuspended")
    st = wait_for(lambda: (s := backend.status(job_id)).phase != "queued" and s, 30,
                  "gpujobs to see the admission")
    assert st.phase in ("admitted", "starting"), st
    assert st.queue == QUEUE


def test_cancel_deletes_the_job_and_its_workload_through_the_real_gc(controlplane, backend, jobs):
    controlplane.require_kueue()
    job_id = jobs(spec_of("PyTorchJob"))
    _, name = naming.parse_job_id(job_id)
    api = backend.api_client
    wl = wait_for(lambda: workload_of(api, "PyTorchJob", name), 60, "the Workload")
    backend.cancel(job_id)
    wait_for(lambda: job_obj(api, "PyTorchJob", name) is None, 60, "the PyTorchJob gone")
    wait_for(lambda: not custom(api).list_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta2", NS, "workloads",
        field_selector=f"metadata.name={wl['metadata']['name']}")["items"], 60,
        "the Workload gone")
    assert backend.status(job_id).phase == "cancelled"


def test_queue_positions_come_from_the_real_visibility_api(controlplane, backend, jobs):
    controlplane.require_kueue()
    api = backend.api_client
    first = jobs(spec_of("PyTorchJob", gpus=4))      # 2 x 4 = all 8 GPUs
    wait_for(lambda: is_true(workload_of(api, "PyTorchJob", naming.parse_job_id(first)[1]),
                             "Admitted"), 60, "the first job admitted")
    second = jobs(spec_of("PyTorchJob", gpus=4))
    third = jobs(spec_of("PyTorchJob", gpus=4))
    for j in (second, third):
        wait_for(lambda j=j: workload_of(api, "PyTorchJob", naming.parse_job_id(j)[1]), 60,
                 "the Workload of a queued job")
    # a Workload is listed as pending once Kueue's queue manager has taken it in, a moment after
    # it exists: ask until both are there
    raw = wait_for(lambda: (r := api.call_api(
        f"/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/{NS}/localqueues/{QUEUE}/pendingworkloads",
        "GET", response_type="object", auth_settings=["BearerToken"],
        _return_http_data_only=True)) and len(r["items"]) == 2 and r, 60, "both jobs pending in Kueue")
    assert sorted(it["positionInLocalQueue"] for it in raw["items"]) == [0, 1]
    # Kueue orders equal priorities by creation time, at one-second resolution: two jobs created
    # within the same second may come in either order, so the real API's answer is the judge
    real = {it["metadata"]["name"]: it["positionInLocalQueue"] + 1 for it in raw["items"]}
    for j in (second, third):
        wl = workload_of(api, "PyTorchJob", naming.parse_job_id(j)[1])["metadata"]["name"]
        st = wait_for(lambda j=j: (s := backend.status(j)).queue_position and s, 30,
                      "a queue position for a queued job")
        assert (st.phase, st.queue_position) == ("queued", real[wl])
        assert st.position_available


def test_a_higher_priority_job_preempts_a_lower_one(controlplane, backend, jobs):
    controlplane.require_kueue()
    api = backend.api_client
    low = jobs(spec_of("PyTorchJob", gpus=4, priority="low"))
    low_name = naming.parse_job_id(low)[1]
    wait_for(lambda: is_true(workload_of(api, "PyTorchJob", low_name), "Admitted"), 60,
             "the low priority job admitted")
    wait_for(lambda: not suspended("PyTorchJob", job_obj(api, "PyTorchJob", low_name)), 30,
             "the low priority job unsuspended")
    high = jobs(spec_of("PyTorchJob", gpus=4, priority="high"))
    high_name = naming.parse_job_id(high)[1]
    wl_low = wait_for(lambda: (w := workload_of(api, "PyTorchJob", low_name))
                      and is_true(w, "Evicted") and w, 60, "the low priority job evicted")
    assert cond(wl_low, "Evicted")["reason"] == "Preempted"
    assert is_true(wl_low, "Preempted")
    wait_for(lambda: suspended("PyTorchJob", job_obj(api, "PyTorchJob", low_name)), 30,
             "the preempted job suspended again")
    wait_for(lambda: is_true(workload_of(api, "PyTorchJob", high_name), "Admitted"), 60,
             "the high priority job admitted")
    st = wait_for(lambda: (s := backend.status(low)).phase in ("preempted", "queued") and s, 30,
                  "gpujobs to see the preemption")
    assert st.phase in ("preempted", "queued"), st
    assert "preempt" in (st.reason + st.message).lower(), st


@pytest.mark.parametrize("kind", sorted(KUEUE_KINDS))
def test_the_simulators_workload_is_the_one_real_kueue_makes(controlplane, backend, jobs, kind):
    """gpujobs_sim.kueue.workload_for(job) against the Workload Kueue v0.17.0 made for the same
    job: its name, queue, priority and podSets (names, counts, requests)."""
    from gpujobs_sim.kueue import workload_for
    controlplane.require_kueue()
    job_id = jobs(spec_of(kind, priority="high"))
    name = naming.parse_job_id(job_id)[1]
    api = backend.api_client
    real = wait_for(lambda: workload_of(api, kind, name), 60, f"{kind} {name}'s Workload")
    sim = workload_for(job_obj(api, kind, name), priority=1000)
    assert sim["metadata"]["name"] == real["metadata"]["name"]
    for key in ("queueName", "priority", "priorityClassRef"):
        assert sim["spec"].get(key) == real["spec"].get(key), key

    def sets(wl):
        return [(p["name"], p["count"],
                 [((c.get("resources") or {}).get("requests") or {})
                  for c in p["template"]["spec"].get("containers", [])])
                for p in wl["spec"]["podSets"]]
    assert sets(sim) == sets(real)


def test_a_queued_jobs_first_forecast_is_scored_at_its_real_admission(controlplane, backend, jobs):
    """The start ranges' calibration on Kubernetes (admission/forecast/calibration.py,
    FirstForecasts): a queued job's first forecast is scored at the admission time real Kueue
    writes (the Workload's Admitted condition), once."""
    import gpujobs
    from gpujobs.backends.kubernetes.status import live
    from gpujobs.backends.kubernetes.status.objects import parse_time

    from .kube import double
    controlplane.require_kueue()
    api = backend.api_client

    def pytorchjob(limit_s=None):
        b = gpujobs.job(double, 21).ddp(nodes=2, gpus_per_node=4).options(kind="PyTorchJob").queue(QUEUE)
        return (b.max_runtime(limit_s) if limit_s else b).spec()
    first = jobs(pytorchjob(limit_s=600))  # all 8 GPUs, for at most 10 minutes
    first_name = naming.parse_job_id(first)[1]
    wait_for(lambda: is_true(workload_of(api, "PyTorchJob", first_name), "Admitted"), 60,
             "the first job admitted")
    second = jobs(pytorchjob())
    second_name = naming.parse_job_id(second)[1]
    st = wait_for(lambda: (s := backend.status(second)).phase == "queued" and s.expected_start and s, 60,
                  "a forecast for the queued job")
    kf = live.forecasts_for(backend, NS)
    (wid, made), = kf.firsts.waiting()
    assert wid == second and st.expected_start > made + 500  # behind the first job's 10 minutes
    backend.cancel(first)
    wl = wait_for(lambda: (w := workload_of(api, "PyTorchJob", second_name)) and is_true(w, "Admitted") and w,
                  90, "the second job admitted once the first is gone")
    admitted = parse_time(cond(wl, "Admitted")["lastTransitionTime"])
    wait_for(lambda: (kf.refresh(), len(kf.start_errors) == 1)[1], 30, "the first forecast scored")
    assert kf.firsts.waiting() == []
    forecast_wait, actual_wait = kf.start_errors._pairs[()][-1]
    assert forecast_wait == pytest.approx(st.expected_start - made, abs=1.0)
    assert actual_wait == pytest.approx(max(0.0, admitted - made), abs=1e-6)  # Kueue's own time


def _admitted_usage(api, ns: str, name: str, podset: dict, covered: set[str]):
    """Create a Workload of one pod set on QUEUE in ``ns``, wait for real Kueue to admit it, and
    read its per-pod usage from the admission's resourceUsage (kueue_model.podsets)."""
    from gpujobs.backends.kubernetes.status import kueue_model
    api.create_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", ns, "workloads", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": name, "namespace": ns},
        "spec": {"queueName": QUEUE, "podSets": [podset]}})
    got = wait_for(lambda: (w := api.get_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta2", ns, "workloads", name)).get("status", {}).get("admission") and w,
        60, f"Workload {name} admitted")
    (asg,) = got["status"]["admission"]["podSetAssignments"]
    (real,) = kueue_model.podsets([podset], covered, {asg["name"]: asg["resourceUsage"]})
    return real


def test_a_pods_requests_with_a_sidecar_are_counted_as_real_kueue_counts_them(controlplane, admin_api):
    """A Workload whose pods have a regular init container, a sidecar (an init container with
    restartPolicy Always), another init container, pod overhead and limits standing for requests:
    gpujobs' reading of the template (kueue_model.pod_requests, which the forecasts use for
    Workloads not admitted yet) and the simulator's (gpujobs_sim.rules) against the usage real
    Kueue v0.17.0 writes at admission (status.admission.podSetAssignments[].resourceUsage). No
    GPUs, so the other tests' jobs on the queue's 8 are not in its way."""
    from gpujobs.backends.kubernetes.status import kueue_model
    from gpujobs_sim import rules
    controlplane.require_kueue()
    tmpl = {"spec": {
        "initContainers": [{"name": "init1", "image": "busybox", "resources": {"requests": {"cpu": "3"}}},
                           {"name": "proxy", "image": "busybox", "restartPolicy": "Always",
                            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                           {"name": "init2", "image": "busybox",
                            "resources": {"requests": {"cpu": "2500m", "memory": "3Gi"}}}],
        "containers": [{"name": "main", "image": "busybox",
                        "resources": {"limits": {"cpu": "1", "memory": "512Mi"}}}],
        "overhead": {"cpu": "100m"}, "restartPolicy": "Never"}}
    podset = {"name": "main", "count": 2, "template": tmpl}
    api = custom(admin_api)
    try:
        covered = {"cpu", "memory"}
        real = _admitted_usage(api, NS, "sidecar-requests", podset, covered)
        (ours,) = kueue_model.podsets([podset], covered)
        assert real.requests == pytest.approx({"cpu": 3.6, "memory": 4 * 2 ** 30})  # init2 beside the sidecar
        assert ours.requests == pytest.approx(real.requests)
        assert {k: float(v) for k, v in rules.pod_requests(tmpl).items()} == pytest.approx(real.requests)
    finally:
        api.delete_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", NS, "workloads", "sidecar-requests")


def test_a_namespaces_limit_range_defaults_are_counted_as_real_kueue_counts_them(controlplane, admin_api):
    """A namespace with a LimitRange (container defaults) and a Workload whose containers leave
    requests out: gpujobs' forecast input (read_cluster reads the LimitRanges; kueue_model fills the
    defaults) and the simulator's (rules.with_limit_range_defaults) against the usage real Kueue
    v0.17.0 writes at admission. Its own namespace, so no other test's pods get the defaults."""
    from kubernetes import client

    from gpujobs.backends.kubernetes.status import kueue_model
    from gpujobs.backends.kubernetes.status.kueue_read import read_cluster
    from gpujobs_sim import rules
    controlplane.require_kueue()
    ns = "lr-defaults"
    core, api = client.CoreV1Api(admin_api), custom(admin_api)
    core.create_namespace({"metadata": {"name": ns}})
    try:
        core.create_namespaced_limit_range(ns, {"metadata": {"name": "defaults"}, "spec": {"limits": [
            {"type": "Container", "default": {"cpu": "2", "memory": "1Gi"},
             "defaultRequest": {"cpu": "500m", "memory": "256Mi"}}]}})
        api.create_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", ns, "localqueues", {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": QUEUE, "namespace": ns}, "spec": {"clusterQueue": "cq-a"}})
        # one container with nothing, one with a cpu limit only (no request)
        tmpl = {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "a", "image": "busybox"},
            {"name": "b", "image": "busybox", "resources": {"limits": {"cpu": "1"}}}]}}
        podset = {"name": "main", "count": 3, "template": tmpl}
        covered = {"cpu", "memory"}
        real = _admitted_usage(api, ns, "defaulted", podset, covered)
        c = read_cluster(admin_api, ns)
        assert [lr["metadata"]["name"] for lr in c.limit_ranges if lr["metadata"]["namespace"] == ns] == ["defaults"]
        (ours,) = kueue_model.podsets([podset], covered, defaults=kueue_model.container_defaults(c.limit_ranges, ns))
        (bare,) = kueue_model.podsets([podset], covered)
        assert ours.requests == pytest.approx(real.requests)
        assert bare.requests != pytest.approx(real.requests)  # the defaults matter here
        sim = rules.pod_requests(rules.with_limit_range_defaults(
            tmpl, [lr for lr in c.limit_ranges if lr["metadata"]["namespace"] == ns]))
        assert {k: float(v) for k, v in sim.items()} == pytest.approx(real.requests)
    finally:
        try:  # its quota back at once (without kube-controller-manager the namespace lingers)
            api.delete_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", ns, "workloads", "defaulted")
        except client.exceptions.ApiException:
            pass
        core.delete_namespace(ns)


def test_a_workloads_reclaimable_pods_give_their_quota_back_as_real_kueue_does(controlplane, admin_api):
    """status.reclaimablePods (a Job's finished pods; the job integration writes it, here the
    admin does): real Kueue v0.17.0 scales the admitted usage down to the pods left
    (podSetsCountsAfterReclaim) and its ClusterQueue's reservation shows it; gpujobs' forecast
    input (kueue_model.translate over read_cluster) holds the same. Its own ClusterQueue and
    namespace, so no other test's jobs count in the reservation."""
    from kubernetes import client

    from gpujobs.backends.kubernetes.status import kueue_model
    from gpujobs.backends.kubernetes.status.kueue_read import read_cluster
    from gpujobs.quantity import parse_quantity
    controlplane.require_kueue()
    ns, cq = "reclaim", "cq-reclaim"
    core, api = client.CoreV1Api(admin_api), custom(admin_api)
    core.create_namespace({"metadata": {"name": ns}})
    api.create_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": cq},
        "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                 "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
                     {"name": "a100", "resources": [{"name": "cpu", "nominalQuota": "10"}]}]}]}})
    try:
        api.create_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", ns, "localqueues", {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": QUEUE, "namespace": ns}, "spec": {"clusterQueue": cq}})
        podset = {"name": "main", "count": 4, "template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "a", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}}}
        _admitted_usage(api, ns, "four", podset, {"cpu"})

        def reserved() -> float:
            st = api.get_cluster_custom_object_status("kueue.x-k8s.io", "v1beta2", "clusterqueues", cq).get("status")
            return sum(float(parse_quantity(r.get("total", "0"), "total")) for f in (st or {}).get("flavorsReservation") or []
                       for r in f.get("resources") or [] if r["name"] == "cpu")

        def ours() -> float:
            tr = kueue_model.translate(read_cluster(admin_api, ns))
            return sum(j.workload.total().get("cpu", 0.0) for j in tr.snapshot.running if j.id.startswith(f"{ns}/"))
        wait_for(lambda: reserved() == 4.0, 30, "the ClusterQueue reserving 4 cpu")
        assert ours() == pytest.approx(4.0)
        api.patch_namespaced_custom_object_status("kueue.x-k8s.io", "v1beta2", ns, "workloads", "four",
                                                  {"status": {"reclaimablePods": [{"name": "main", "count": 3}]}})
        wait_for(lambda: reserved() == 1.0, 30, "real Kueue giving back the quota of 3 reclaimable pods")
        assert ours() == pytest.approx(1.0)
    finally:
        try:
            api.delete_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", ns, "workloads", "four")
        except client.exceptions.ApiException:
            pass
        api.delete_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", cq)
        core.delete_namespace(ns)


def test_pod_level_requests_are_counted_as_real_kueue_counts_them(controlplane, admin_api):
    """PodLevelResources: a template's spec.resources.requests stand for its containers' cpu
    and memory in Kueue's count (component-helpers PodRequests); gpujobs' and the simulator's
    readings against real Kueue v0.17.0's resourceUsage."""
    from gpujobs.backends.kubernetes.status import kueue_model
    from gpujobs_sim import rules
    controlplane.require_kueue()
    tmpl = {"spec": {"restartPolicy": "Never", "resources": {"requests": {"cpu": "5", "memory": "2Gi"}},
                     "containers": [{"name": "a", "image": "busybox", "resources": {"requests": {"cpu": "1"}}},
                                    {"name": "b", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}}
    podset = {"name": "main", "count": 1, "template": tmpl}
    api = custom(admin_api)
    try:
        real = _admitted_usage(api, NS, "pod-level", podset, {"cpu", "memory"})
        assert real.requests == pytest.approx({"cpu": 5.0, "memory": 2 * 2 ** 30})
        (ours,) = kueue_model.podsets([podset], {"cpu", "memory"})
        assert ours.requests == pytest.approx(real.requests)
        assert {k: float(v) for k, v in rules.pod_requests(tmpl).items()} == pytest.approx(real.requests)
    finally:
        api.delete_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", NS, "workloads", "pod-level")


def test_a_runtime_class_overhead_is_counted_as_real_kueue_counts_it(controlplane, admin_api):
    """A RuntimeClass with overhead.podFixed and a Workload whose pods name it and set no
    overhead: real Kueue v0.17.0 counts the overhead (handlePodOverhead); gpujobs (read_cluster
    reads the RuntimeClasses) and the simulator against it."""
    from kubernetes import client

    from gpujobs.backends.kubernetes.status import kueue_model
    from gpujobs.backends.kubernetes.status.kueue_read import read_cluster
    from gpujobs_sim import rules
    controlplane.require_kueue()
    node = client.NodeV1Api(admin_api)
    node.create_runtime_class({"metadata": {"name": "sandboxed"}, "handler": "kata",
                               "overhead": {"podFixed": {"cpu": "250m", "memory": "160Mi"}}})
    api = custom(admin_api)
    tmpl = {"spec": {"restartPolicy": "Never", "runtimeClassName": "sandboxed", "containers": [
        {"name": "a", "image": "busybox", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}
    podset = {"name": "main", "count": 2, "template": tmpl}
    try:
        real = _admitted_usage(api, NS, "sandboxed", podset, {"cpu", "memory"})
        assert real.requests == pytest.approx({"cpu": 1.25, "memory": (1024 + 160) * 2 ** 20})
        classes = read_cluster(admin_api, NS).runtime_classes
        (ours,) = kueue_model.podsets([podset], {"cpu", "memory"}, overheads=kueue_model.runtime_overheads(classes))
        assert ours.requests == pytest.approx(real.requests)
        sim = rules.pod_requests(rules.with_runtime_class_overhead(tmpl, classes))
        assert {k: float(v) for k, v in sim.items()} == pytest.approx(real.requests)
    finally:
        try:
            api.delete_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", NS, "workloads", "sandboxed")
        except client.exceptions.ApiException:
            pass
        node.delete_runtime_class("sandboxed")


def test_plan_finds_its_local_queue_beside_a_same_named_one_in_another_namespace(controlplane, backend):
    """A LocalQueue 'team-a' in a namespace listed after 'ml' (as test_a_workloads_reclaimable_pods'
    'reclaim' one is while its namespace is being deleted): plan() reads the LocalQueues of every
    namespace from a cluster-wide informer whose cache was keyed by name alone, so the list kept
    the other one and plan() said "no LocalQueue 'team-a' in namespace 'ml'; LocalQueues there:
    none" (once in a full realcp run, test_rbac_real's plan test). The other queue's MODIFIED and
    DELETED events must not hide ml's either (the same backend plans again after each)."""
    import warnings

    from kubernetes import client

    from gpujobs.backends.kubernetes.status import live
    controlplane.require_kueue()
    other = "same-name-queue"  # sorts after NS
    core, api = client.CoreV1Api(backend.api_client), custom(backend.api_client)
    core.create_namespace({"metadata": {"name": other}})

    def plan():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            p = backend.plan(spec_of("PyTorchJob", gpus=4))  # SpecError: ml's LocalQueue not found
        assert p.queue == QUEUE
        return p

    def theirs() -> list[dict]:  # the other namespace's LocalQueue as the forecasts' informer holds it
        inf = live.hub_for(backend, NS).cluster_informer(("kueue.x-k8s.io", "v1beta2", "localqueues"))
        return [o for o in inf.items() if o["metadata"]["namespace"] == other]
    try:
        api.create_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", other, "localqueues", {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": QUEUE, "namespace": other}, "spec": {"clusterQueue": "cq-a"}})
        plan()  # the informers' first list has both
        api.patch_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", other, "localqueues", QUEUE,
                                           {"metadata": {"labels": {"touched": "yes"}}})
        wait_for(lambda: any((o["metadata"].get("labels") or {}).get("touched") for o in theirs()), 30,
                 "the other LocalQueue's MODIFIED event")
        plan()
        api.delete_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", other, "localqueues", QUEUE)
        wait_for(lambda: not theirs(), 30, "the other LocalQueue's DELETED event")
        plan()
    finally:
        try:
            api.delete_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", other, "localqueues", QUEUE)
        except client.exceptions.ApiException:
            pass
        core.delete_namespace(other)
