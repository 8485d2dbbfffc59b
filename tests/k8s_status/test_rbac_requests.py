"""RBAC exactly what the code calls: the simulated API server records every request the stories
below make (gpujobs_sim.apiserver ``requests``: verb, apiGroup, resource, namespace, as an
authorizer sees them); each must be allowed by docs/rbac.yaml (submit/rbac.py RULES, kept equal by
tests/k8s_render/test_rbac.py), the optional cluster-wide reads or what Kubernetes opens to every
user; and each verb the Role grants must be used by some story (no grant nobody calls)."""
from __future__ import annotations

import re
import warnings

import pytest
from tests.support import MPI_IMAGE, wait_for

import gpujobs
from gpujobs.backends.kubernetes.kinds import KINDS
from gpujobs.backends.kubernetes.submit.rbac import cluster_read_verbs, verbs_by_resource
from gpujobs.errors import SubmitError
from gpujobs.handle import Job

pytestmark = pytest.mark.slow

# cluster-scoped reads the preflight makes and skips with a warning on 403 (submit/rbac.py doc)
OPTIONAL_CLUSTER_GETS = {("kueue.x-k8s.io", "clusterqueues"), ("kueue.x-k8s.io", "workloadpriorityclasses"),
                         ("trainer.kubeflow.org", "clustertrainingruntimes"), ("scheduling.volcano.sh", "queues"),
                         ("apiextensions.k8s.io", "customresourcedefinitions")}
# open to every authenticated user (system:discovery, system:basic-user)
OPEN_PATHS = re.compile(r"^/(api|apis)(/[^/]+)?(/[^/]+)?$|^/apis/authorization\.k8s\.io/v1/selfsubjectaccessreviews$")
VISIBILITY = re.compile(r"^/apis/visibility\.kueue\.x-k8s\.io/v1beta2/(?:namespaces/[^/]+/)?(localqueues|clusterqueues)/"
                        r"[^/]+/pendingworkloads$")


def _hello(x):
    print("hello", flush=True)
    return x


def _checkpoints():
    import gpujobs as g
    g.context().checkpoint_dir.mkdir(parents=True, exist_ok=True)
    return 1


def _sleepy():
    import time
    time.sleep(60)


def _talk_then_sleep():
    import time
    print("talking", flush=True)
    time.sleep(60)


def _stories(sim, be):
    """What a user does with each kind: submit, status, logs, result, queue, stacks, cancel."""
    # first, in a fresh namespace: a submit whose job create fails; the all-or-nothing rollback
    # reads and deletes what it created (the shared ConfigMap and Secret)
    from gpujobs.backends.kubernetes.retry import ATTEMPTS
    sim.server.inject(500, count=ATTEMPTS, verb="create", path="trainjobs")  # every retry of it
    with pytest.raises(SubmitError, match="nothing was left behind"):
        be.submit(gpujobs.job(_hello, 8).ddp(nodes=1, gpus_per_node=1).queue("q").name("rolled-back").spec())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        builders = [gpujobs.job(_hello, 1).ddp(nodes=1, gpus_per_node=1),
                    gpujobs.job(_hello, 2).ddp(nodes=1, gpus_per_node=1).kubernetes(kind="PyTorchJob"),
                    gpujobs.job(_hello, 3).ddp(nodes=1, gpus_per_node=1).options(volcano="job"),
                    gpujobs.job(_hello, 4).ddp(nodes=1, gpus_per_node=1).options(volcano="appwrapper"),
                    gpujobs.job(_hello, 5).mpi(ranks=1, gpus_per_rank=0).image(MPI_IMAGE),
                    gpujobs.job(_hello, 9).ddp(nodes=2, gpus_per_node=1).kubernetes(kind="BatchJob")]
        for b in builders:
            job = Job(be.submit(b.queue("q").spec()), be)
            assert job.result(timeout=120) in (1, 2, 3, 4, 5, [5], 9)
            assert "hello" in "".join(job.logs())
            job.status()
            job.cancel()
        # a checkpointing job where the namespace has a default StorageClass: its own claim
        ckpt = Job(be.submit(gpujobs.job(_checkpoints).ddp(nodes=1, gpus_per_node=1).queue("q").spec()), be)
        assert ckpt.result(timeout=120) == 1
        ray = Job(be.submit(gpujobs.job(_hello, 6).ray(workers=1, gpus_per_worker=0).queue("q").spec()), be)
        ray.status()
        ray.cancel()
        long = Job(be.submit(gpujobs.job(_sleepy).ddp(nodes=1, gpus_per_node=2).queue("q").spec()), be)
        queued = Job(be.submit(gpujobs.job(_hello, 7).ddp(nodes=1, gpus_per_node=2).queue("q").spec()), be)
        wait_for(lambda: long.status().phase == "running", timeout=90)
        long.stacks(timeout=20)
        queued.status()
        be.jobs()
        queued.cancel()
        long.cancel()
        # a preempted job whose pods are deleted gracefully: the watcher follows and keeps their
        # logs (status/log_keeper.py: pods/log, and a list of the job's pods, no get)
        sim.controllers.kubelet.graceful_deletion = True
        low = Job(be.submit(gpujobs.job(_talk_then_sleep).ddp(nodes=1, gpus_per_node=2).queue("q")
                            .priority("low").spec()), be)
        wait_for(lambda: "talking" in "".join(low.logs()), timeout=90)
        high = Job(be.submit(gpujobs.job(_sleepy).ddp(nodes=1, gpus_per_node=2).queue("q").priority("high").spec()), be)
        wait_for(lambda: be.state.log_keeper is not None and be.state.log_keeper.kept, timeout=60)
        high.cancel()
        low.cancel()


def test_the_requests_of_the_stories_are_exactly_what_the_role_grants(make_cluster):
    sim, be = make_cluster(gpus=2, priorities={"low": 100, "high": 1000})
    sim.store.create({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "default"},
                      "spec": {"weight": 1}})  # Volcano's install makes it
    sim.store.create({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "provisioner": "nfs.csi.k8s.io",
                      "metadata": {"name": "standard", "annotations": {
                          "storageclass.kubernetes.io/is-default-class": "true"}}})
    sim.server.reset_counts()
    _stories(sim, be)
    role, cluster = verbs_by_resource(), cluster_read_verbs()
    used: dict[tuple[str, str], set[str]] = {}
    for verb, group, resource, ns in list(sim.server.requests):
        if resource.startswith("/"):  # a non-resource path
            m = VISIBILITY.match(resource)
            if m:
                key = ("visibility.kueue.x-k8s.io", f"{m.group(1)}/pendingworkloads")
                assert verb == "get" and (key in role or key in cluster), resource
                used.setdefault(key, set()).add(verb)
            else:
                assert OPEN_PATHS.match(resource), (verb, resource)
            continue
        if ns is None and (group, resource) in OPTIONAL_CLUSTER_GETS and verb == "get":
            continue
        if (verb, group, resource, ns) == ("get", "apps", "deployments", "kueue-system"):
            continue  # Kueue's version from its manager's image (submit/kueue_version.py), optional too
        allowed = role.get((group, resource), set()) if ns is not None else cluster.get((group, resource), set())
        assert verb in allowed, f"{verb} {resource}.{group} (namespace {ns}) is not granted by docs/rbac.yaml"
        used.setdefault((group, resource), set()).add(verb)
    # one code path serves every job kind (submit/create.py, status/hub.py by kinds.KINDS): a verb
    # called on one kind (the rollback's read, here of a TrainJob) is called on each
    family = set().union(*(used.get((k.group, k.plural), set()) for k in KINDS.values()))
    for k in KINDS.values():
        used[(k.group, k.plural)] = family
    # the rollback deletes a payload Secret whose create answered an error after the write (a lost
    # answer); the simulator's injected faults answer before writing, so no story reaches it
    used.setdefault(("", "secrets"), set()).add("delete")
    used.setdefault(("", "persistentvolumeclaims"), set()).update({"get", "delete"})  # the same for the claim
    used.setdefault(("", "services"), set()).update({"get", "delete"})  # and for a kind's companion Service
    unused = {k: sorted(v - used.get(k, set())) for k, v in role.items() if v - used.get(k, set())}
    assert unused == {}, f"docs/rbac.yaml grants what no story calls: {unused}"
