"""What the forecast does with less than cluster-wide read access (docs/forecast.md, Kubernetes):
the simulated API server refuses the requests (403, as RBAC), not only SelfSubjectAccessReview."""
from __future__ import annotations

import time
import warnings

import pytest
from tests.k8s_forecast.k8s_objects import queue, theirs
from tests.support import MPI_IMAGE, wait_for

import gpujobs
from gpujobs.backends.kubernetes.status import forecasting, live
from gpujobs.handle import Job


def nap(seconds):
    import time as _t
    _t.sleep(seconds)


def submit(be, name, q, gpus, limit=None):
    b = gpujobs.job(nap, 120).mpi(ranks=1, gpus_per_rank=gpus).image(MPI_IMAGE).queue(q).name(name)
    if limit:
        b = b.max_runtime(limit)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # preflight: cluster-scoped reads skipped (403)
        return Job(be.submit(b.spec()), be)


def setup_two_teams(sim):
    queue(sim, "q", "cq-q", 2, preemption="Never")
    queue(sim, "q2", "cq-q", 2, namespace="other")
    theirs(sim, "other", "r", "q2", 2, cq="cq-q", admitted_at=time.time() - 60, max_s=600)


def test_without_cluster_scoped_reads_the_reason_is_kueues_own(make_cluster):
    sim, be = make_cluster(setup_two_teams)
    for res in ("clusterqueues", "workloads", "localqueues", "cohorts", "resourceflavors",
                "workloadpriorityclasses"):
        sim.server.deny("*", "kueue.x-k8s.io", res, namespace="", enforce=True)
    mine = submit(be, "mine", "q", 2, limit=60)
    st = wait_for(lambda: (s := mine.status()).queue_position == 1 and s.extra.get("kueue_reason") and s)
    assert st.reason == "waiting for quota: couldn't assign flavors to pod sets: insufficient unused quota"
    assert st.expected_start is None and st.blocked_by == ()
    assert st.expected_start_basis == forecasting.NO_READ
    assert st.extra["kueue_reason"] == "WaitingForQuota"
    from gpujobs.errors import BackendUnavailable
    with pytest.raises(BackendUnavailable, match="may not read ClusterQueues.*gpujobs-forecast-reader"):
        be.plan(gpujobs.job(nap, 1).mpi(ranks=1, gpus_per_rank=1).image(MPI_IMAGE).queue("q").spec())
    assert sim.server.counts[("list", "clusterqueues")] >= 1  # it asked, and was refused


def test_without_other_namespaces_workloads_their_quota_counts_with_an_unknown_end(make_cluster):
    def setup(sim):
        setup_two_teams(sim)
        # what Kueue's ClusterQueue controller writes: the quota reserved in the queue
        sim.store.mutate("kueue.x-k8s.io/v1beta2", "ClusterQueue", "cq-q", None, lambda o: o.setdefault(
            "status", {}).__setitem__("flavorsReservation", [{"name": "default-flavor", "resources": [
                {"name": "nvidia.com/gpu", "total": "2", "borrowed": "0"}]}]))
        theirs(sim, "other", "first", "q2", 2, priority="high")  # pending, ahead of ours
    sim, be = make_cluster(setup)
    for res in ("workloads", "localqueues"):
        sim.server.deny("list", "kueue.x-k8s.io", res, namespace="", enforce=True)
    mine = submit(be, "mine", "q", 2, limit=60)
    st = wait_for(lambda: (s := mine.status()).extra.get("kueue_reason") and "other namespaces" in s.reason and s)
    assert st.expected_start is None and st.extra.get("not_before") is not None, st
    assert "workloads of other namespaces in cq-q (running" in st.reason and "end unknown" in st.reason, st.reason
    assert "1 more pending in other namespaces' LocalQueues ahead" in st.reason
    assert st.blocked_by == ()  # nothing it could name
    assert st.expected_start_basis.startswith("unknown:") and forecasting.NOT_ALL in st.expected_start_basis
    c = live.forecasts_for(be, "default").cluster()
    assert c.scope == "namespace" and all(w["metadata"]["namespace"] == "default" for w in c.workloads)


def test_forecast_and_plan_only_read_what_rbac_yaml_grants(make_cluster):
    """Every request a queued job's status and a plan make is a read that docs/rbac.yaml's Role or
    its read-only ClusterRole gpujobs-forecast-reader covers (or open to every user)."""
    from gpujobs.backends.kubernetes.submit.rbac import cluster_read_verbs, verbs_by_resource
    sim, be = make_cluster(setup_two_teams)
    mine = submit(be, "mine", "q", 2, limit=60)
    sim.server.reset_counts()  # from here on: status (its watches start here) and plan
    st = wait_for(lambda: (s := mine.status()).queue_position == 1 and s)
    be.plan(gpujobs.job(nap, 1).mpi(ranks=1, gpus_per_rank=1).image(MPI_IMAGE).queue("q").spec())
    assert st.expected_start is not None
    allowed = verbs_by_resource()
    for key, verbs in cluster_read_verbs().items():
        allowed.setdefault(key, set()).update(verbs)
    groups = {"clusterqueues": "kueue.x-k8s.io", "cohorts": "kueue.x-k8s.io", "resourceflavors": "kueue.x-k8s.io",
              "workloadpriorityclasses": "kueue.x-k8s.io", "localqueues": "kueue.x-k8s.io",
              "workloads": "kueue.x-k8s.io", "mpijobs": "kubeflow.org", "pods": "", "podgroups": "scheduling.volcano.sh",
              "limitranges": "", "runtimeclasses": "node.k8s.io"}
    used = {k for k in sim.server.counts if isinstance(k, tuple)}
    assert ("list", "clusterqueues") in used and ("list", "workloads") in used
    for verb, plural in used:
        if (verb, plural) == ("create", "selfsubjectaccessreviews"):
            continue
        if (verb, plural) == ("get", "deployments"):
            continue  # Kueue's version from its manager's image (submit/kueue_version.py): optional, unknown on 403
        assert verb in ("get", "list", "watch"), (verb, plural)
        assert verb in allowed[(groups[plural], plural)], (verb, plural)


def test_one_forecast_serves_many_status_calls(make_cluster):
    """The forecast is computed once per refresh, not once per status, and a refresh reads the
    cluster-wide watches' caches, not the API server (docs/forecast.md, Kubernetes: cost)."""
    sim, be = make_cluster(setup_two_teams)
    a = submit(be, "a", "q", 2, limit=60)
    b = submit(be, "b", "q", 2, limit=60)
    wait_for(lambda: a.status().queue_position == 1 and b.status().queue_position == 2)
    f = live.forecasts_for(be, "default")
    f.refresh()  # fresh now, with both in it
    sim.server.reset_counts()
    for _ in range(10):
        assert a.status().expected_start is not None and b.status().expected_start is not None
    assert sim.server.counts[("list", "clusterqueues")] == 0  # the watch keeps them
    assert sim.server.counts[("list", "workloads")] == 0
    f._at = -1e9  # stale: the next status recomputes, from the watches' caches
    assert a.status().expected_start is not None
    assert sim.server.counts["list"] == 0
