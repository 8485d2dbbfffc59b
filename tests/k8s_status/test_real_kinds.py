"""Stories of each kind as the real controllers run it (issue [real-kinds]): the simulated
operators follow upstream (KubeRay's submitter Job, ...), and gpujobs must cope."""
from __future__ import annotations

import pytest
from tests.support import wait_for

import gpujobs
from gpujobs.handle import Job

pytestmark = pytest.mark.slow


def _driver(x):
    print("hello from the driver", flush=True)
    return x * 2


def test_rayjob_output_and_result_come_from_the_submitter_job(make_cluster):
    """KubeRay (K8sJobMode) runs the entrypoint from a separate submitter Job whose pod carries
    only the labels of spec.submitterPodTemplate plus KubeRay's own: gpujobs must label it and read
    it, or every Ray job ends in JobLostError with no user output."""
    sim, be = make_cluster(gpus=2)
    job = Job(be.submit(gpujobs.job(_driver, 21).ray(workers=1, gpus_per_worker=1).queue("q").spec()), be)
    assert job.result(timeout=90) == 42
    pods = sim.store.list("v1", "Pod", "default")
    sub = [p for p in pods if (p["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name")]
    assert len(sub) == 1 and sub[0]["metadata"]["labels"]["ray.io/originated-from-crd"] == "RayJob"
    assert sub[0]["metadata"]["labels"].get("gpujobs.dev/job") == job.id.split("/")[-1]
    out = "".join(job.logs())
    assert "[rank 0] hello from the driver" in out
    assert "hello from" not in out.replace("hello from the driver", "")  # no head/worker pod chatter
    assert job.status().phase == "succeeded"


def test_rayjob_result_waits_for_kuberays_complete_not_the_ray_jobs_status(make_cluster):
    """In K8sJobMode KubeRay keeps jobDeploymentStatus Running after jobStatus is SUCCEEDED until
    the submitter's `ray job logs --follow` has finished (kuberay@v1.7.0 rayjob_controller.go,
    #1919): reading the result at SUCCEEDED found no result line yet and cached that (JobLostError)."""
    sim, be = make_cluster(gpus=2)
    sim.controllers.kubelet.ray_logs_lag_s = 3.0  # the follower prints the driver's lines late
    job = Job(be.submit(gpujobs.job(_driver, 21).ray(workers=1, gpus_per_worker=1).queue("q").spec()), be)
    name = job.id.split("/")[-1]

    def ray_status():
        return ((sim.store.get("ray.io/v1", "RayJob", name, "default") or {}).get("status") or {})
    # Ray's start takes long on a loaded machine; the window after the driver ended is 3 s
    wait_for(lambda: ray_status().get("jobStatus") in ("SUCCEEDED", "FAILED"), timeout=240, every=0.05)
    lagging = job.status()
    assert ray_status()["jobStatus"] == "SUCCEEDED" and ray_status()["jobDeploymentStatus"] == "Running"
    assert lagging.phase == "running"  # KubeRay has not said Complete
    assert job.result(timeout=60) == 42
    st = sim.store.get("ray.io/v1", "RayJob", name, "default")["status"]
    assert st["jobDeploymentStatus"] == "Complete" and job.status().phase == "succeeded"
    assert "[rank 0] hello from the driver" in "".join(job.logs())


def test_rayjob_validation_failed_is_a_failure_with_kuberays_message(make_cluster):
    """KubeRay validates in its controller and writes jobDeploymentStatus ValidationFailed (not
    Failed): gpujobs must report it as failed with the message, not wait forever."""
    sim, be = make_cluster(gpus=2)
    b = gpujobs.job(_driver, 1).ray(workers=1, gpus_per_worker=1).queue("q").env(RAY_REDIS_ADDRESS="redis:6379")
    job = Job(be.submit(b.spec()), be)
    wait_for(lambda: job.status().phase == "failed", timeout=30)
    st = job.status()
    assert "RAY_REDIS_ADDRESS" in st.message and "GcsFaultToleranceOptions" in st.message


def test_rayjob_subsecond_max_runtime_is_not_refused_by_kuberay(make_cluster):
    """max_runtime(0.5) rendered activeDeadlineSeconds 0, which KubeRay refuses (must be positive)."""
    sim, be = make_cluster(gpus=2)
    b = gpujobs.job(_driver, 2).ray(workers=1, gpus_per_worker=1).queue("q").max_runtime(0.5)
    job = Job(be.submit(b.spec()), be)
    rj = sim.store.get("ray.io/v1", "RayJob", job.id.split("/")[-1], "default")
    assert rj["spec"]["activeDeadlineSeconds"] >= 1
    wait_for(lambda: job.status().phase not in ("pending", "queued"), timeout=30)
    assert "ValidationFailed" not in (job.status().reason or "")


# ------------------------------------------------------------------ Kubeflow Trainer versions
def _crd(name):
    import gzip
    from pathlib import Path

    import yaml
    # upstream manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml at that tag (tests/data/crds/README.md)
    return yaml.safe_load(gzip.decompress((Path(__file__).parent.parent / "data" / "crds" / name).read_bytes()))


def _ddp_rank():
    import gpujobs as g
    return g.context().rank


def test_trainjob_on_trainer_v21_is_refused_with_the_version_needed(make_cluster):
    """Trainer v2.1's TrainJob CRD has podTemplateOverrides, no runtimePatches: the API server
    prunes gpujobs' patch and the TrainJob can never run; gpujobs must refuse before creating it."""
    from gpujobs.errors import PreflightError
    sim, be = make_cluster(gpus=2, crd_manifests=[_crd("trainer-v2.1.0-trainjobs.yaml.gz")])
    with pytest.raises(PreflightError, match=r"Trainer v2\.1.*v2\.2 or newer"):
        be.submit(gpujobs.job(_ddp_rank).ddp(nodes=1, gpus_per_node=1).queue("q").spec())
    assert sim.store.list("trainer.kubeflow.org/v1alpha1", "TrainJob", "default") == []


def test_trainjob_on_trainer_v22_has_nothing_pruned_and_runs(make_cluster):
    """Trainer v2.2 has runtimePatches but no terminationGracePeriodSeconds in the patch (v2.3+):
    rendered for it, nothing of the TrainJob is silently dropped by the API server."""
    sim, be = make_cluster(gpus=2, crd_manifests=[_crd("trainer-v2.2.0-trainjobs.yaml.gz")])
    job = Job(be.submit(gpujobs.job(_ddp_rank).ddp(nodes=1, gpus_per_node=1).queue("q").spec()), be)
    assert job.result(timeout=90) == 0
    assert [p for p in sim.server.pruned if p[0] == "TrainJob"] == []


def test_sim_prunes_what_the_installed_crd_does_not_declare(make_cluster):
    """The simulated API server prunes by the installed CRD's schema, as a real one does."""
    sim, be = make_cluster(gpus=2, crd_manifests=[_crd("trainer-v2.1.0-trainjobs.yaml.gz")])
    sim.store.create({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                      "metadata": {"name": "t", "namespace": "default"},
                      "spec": {"runtimeRef": {"name": "torch-distributed"}, "runtimePatches": [{"manager": "x"}]}})
    tj = sim.store.get("trainer.kubeflow.org/v1alpha1", "TrainJob", "t", "default")
    assert "runtimePatches" not in tj["spec"] and tj["spec"]["runtimeRef"]["name"] == "torch-distributed"
    assert ("TrainJob", "t", ["spec.runtimePatches"]) in sim.server.pruned


# ------------------------------------------------------------------ Kueue integration off
def test_pytorchjob_with_kueue_integration_off_says_how_to_enable_it(make_cluster, monkeypatch):
    """Kueue v0.19's default configuration leaves kubeflow.org/pytorchjob out of
    integrations.frameworks: the job stays suspended with no Workload, and status must say why."""
    from gpujobs.backends.kubernetes.status import hints
    from gpujobs.errors import DeprecatedPathWarning
    monkeypatch.setattr(hints, "NO_WORKLOAD_HINT_S", 1.0)
    sim, be = make_cluster(gpus=2, disabled_integrations=("kubeflow.org/pytorchjob",))
    with pytest.warns(DeprecatedPathWarning):
        b = gpujobs.job(_ddp_rank).ddp(nodes=1, gpus_per_node=1).kubernetes(kind="PyTorchJob").queue("q")
        job = Job(be.submit(b.spec()), be)
    st = wait_for(lambda: (s := job.status()).phase == "queued" and "integrations.frameworks" in s.message and s,
                  timeout=30)
    assert '"kubeflow.org/pytorchjob"' in st.message and st.reason == "NoWorkload"
    assert sim.store.list("kueue.x-k8s.io/v1beta2", "Workload", "default") == []
    job.cancel()


# ------------------------------------------------------------------ durable results
def _small(x):
    print("working", flush=True)
    return {"answer": x}


def _ddp_job(be, fn, *args, kind="PyTorchJob"):
    import warnings

    from gpujobs.errors import DeprecatedPathWarning
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecatedPathWarning)
        return Job(be.submit(gpujobs.job(fn, *args).ddp(nodes=1, gpus_per_node=1).kubernetes(kind=kind)
                             .queue("q").spec()), be)


def test_small_result_survives_the_loss_of_the_pod_log(make_cluster):
    """Log rotation, or a node's logs gone with the node: a small result is also in the container's
    termination message (pod status), and is read from there."""
    sim, be = make_cluster(gpus=2)
    job = _ddp_job(be, _small, 7)
    wait_for(lambda: job.status().phase == "succeeded", timeout=60)
    pods = sim.store.list("v1", "Pod", "default")
    assert pods
    for p in pods:
        sim.server.logs.forget("default", p["metadata"]["name"])  # the log is gone, the pod object stays
    from gpujobs.backends.kubernetes.status.results import outcomes
    # what any client (another process, no local archive of this job) reads from the cluster
    assert list(outcomes(sim.api_client(), "default", job.id.split("/")[-1])) == [0]
    assert job.result(timeout=30) == {"answer": 7}


def test_logs_and_result_with_an_injected_sidecar(make_cluster):
    """With a sidecar (Istio's istio-proxy) an unqualified pods/log request is 400: gpujobs must
    name its container."""
    sim, be = make_cluster(gpus=2)
    admit = sim.store.admission

    def inject(res, new, old):  # a mutating webhook adding a sidecar to every new pod
        if res.kind == "Pod" and not res.group and old is None:
            new["spec"].setdefault("containers", []).append({"name": "istio-proxy", "image": "istio/proxyv2"})
        if admit is not None:
            admit(res, new, old)
    sim.store.admission = inject
    job = _ddp_job(be, _small, 3)
    assert job.result(timeout=60) == {"answer": 3}
    assert "[rank 0] working" in "".join(job.logs())


def _busy_then_sleeping(seconds):
    import time as _t
    end = _t.time() + seconds
    while _t.time() < end:
        sum(range(1000))
    _t.sleep(120)


def test_metrics_and_stacks_with_an_injected_sidecar(make_cluster):
    """The metrics and stacks reads of the pod logs name gpujobs' container too: were
    unqualified (stacks.py, pod_metrics.py), so with a sidecar the 400 read as an empty log."""
    sim, be = make_cluster(gpus=2)
    admit = sim.store.admission

    def inject(res, new, old):
        if res.kind == "Pod" and not res.group and old is None:
            new["spec"].setdefault("containers", []).append({"name": "istio-proxy", "image": "istio/proxyv2"})
        if admit is not None:
            admit(res, new, old)
    sim.store.admission = inject
    spec = gpujobs.job(_busy_then_sleeping, 2.0).ddp(nodes=1, gpus_per_node=0, procs_per_node=1) \
        .kubernetes(kind="PyTorchJob").queue("q").env(GPUJOBS_METRICS_INTERVAL="0.3").spec()
    job = Job(be.submit(spec), be)
    try:
        st = wait_for(lambda: (s := job.status()).metrics and s, timeout=60, every=0.2)
        assert {m.rank for m in st.metrics} == {0}
        stacks = wait_for(lambda: (s := job.stacks(timeout=5)) and "_busy_then_sleeping" in s.get(0, "") and s,
                          timeout=90, every=0.3)  # the rank answers once torch is imported
        assert list(stacks) == [0]
    finally:
        job.cancel()


# ------------------------------------------------------------------ AppWrapper
def _fails_once(path):
    with open(path, "a") as fh:
        fh.write("run\n")
    raise ValueError("boom in the wrapped job")


def test_appwrapper_failure_runs_once_and_keeps_the_traceback(make_cluster, tmp_path):
    """The AppWrapper controller retries any failure 3 times (re-running user code) and deletes a
    Failed AppWrapper's components at once (tracebacks lost): gpujobs disables the retries and
    holds the components (appwrapper v1.1.2 annotations)."""
    sim, be = make_cluster(gpus=2)
    runs = tmp_path / "runs"
    b = gpujobs.job(_fails_once, str(runs)).ddp(nodes=1, gpus_per_node=1).kubernetes(volcano="appwrapper").queue("q")
    job = Job(be.submit(b.spec()), be)
    with pytest.raises(ValueError, match="boom in the wrapped job"):
        job.result(timeout=90)
    assert runs.read_text() == "run\n"
    assert job.status().phase == "failed"


# ------------------------------------------------------------------ TrainJob: a failing rank fails the job
def _fails_counting(path):
    with open(path, "a") as f:
        f.write("x")
    with open(path) as f:
        n = len(f.read())
    print(f"attempt {n}", flush=True)
    raise ValueError(f"boom on attempt {n}")


def test_a_trainjob_rank_that_raises_fails_the_job_at_once_without_running_again(make_cluster, tmp_path):
    """Trainer's stock runtime sets no restartPolicy/backoffLimit: JobSet's webhook makes the pods
    OnFailure (jobset@v0.12.0 jobset_webhook.go Default), the node Job gets backoffLimit 6, and the
    kubelet restarts the rank: the user's function ran up to 7 times. gpujobs' runtime (Never, 0)
    fails the TrainJob on the first exception."""
    sim, be = make_cluster(gpus=2)
    runs = tmp_path / "runs"
    job = Job(be.submit(gpujobs.job(_fails_counting, str(runs)).ddp(nodes=1, gpus_per_node=1).queue("q").spec()), be)
    tj = sim.store.get("trainer.kubeflow.org/v1alpha1", "TrainJob", job.id.split("/")[-1], "default")
    assert tj["spec"]["runtimeRef"]["name"] == "gpujobs-torch"
    with pytest.raises(ValueError, match="boom on attempt 1"):
        job.result(timeout=120)
    assert job.status().phase == "failed"
    assert runs.read_text() == "x"  # the function ran once


def test_trainjob_with_only_the_stock_runtime_is_refused_naming_the_admin_command(make_cluster):
    from gpujobs.errors import PreflightError
    sim, be = make_cluster(gpus=2, admin_runtimes=False)  # Trainer's install: torch-distributed only
    with pytest.raises(PreflightError) as ei:
        be.submit(gpujobs.job(_ddp_rank).ddp(nodes=1, gpus_per_node=1).queue("q").spec())
    msg = str(ei.value)
    assert ei.value.obj == "ClusterTrainingRuntime gpujobs-torch"
    assert "gpujobs admin trainer-runtimes | kubectl apply -f -" in msg and "up to 6 times" in msg
    assert sim.store.list("trainer.kubeflow.org/v1alpha1", "TrainJob", "default") == []


def test_on_the_stock_runtime_gpujobs_warns_and_logs_include_the_restarted_instance(make_cluster, tmp_path):
    """Chosen anyway (trainjob_runtime = "torch-distributed"): a RankRerunWarning at submit, and
    logs() reads a restarted container's previous instance (pods/log?previous=true)."""
    from gpujobs.backends.kubernetes.backend import KubernetesBackend
    from gpujobs.errors import RankRerunWarning
    sim, _ = make_cluster(gpus=2)
    be = KubernetesBackend(api_client=sim.api_client(), namespace="default", default_queue="q",
                           trainjob_runtime="torch-distributed")
    runs = tmp_path / "runs"
    with pytest.warns(RankRerunWarning, match="torch-distributed.*restartPolicy unset.*backoffLimit 6"):
        job = Job(be.submit(gpujobs.job(_fails_counting, str(runs)).ddp(nodes=1, gpus_per_node=1).queue("q").spec()),
                  be)
    try:
        wait_for(lambda: len(runs.read_text()) >= 2 if runs.exists() else False, timeout=90)
        out = wait_for(lambda: "attempt 1" in (t := "".join(job.logs())) and t, timeout=30)
        assert "[rank 0] attempt 1" in out
        wait_for(lambda: job.status().phase == "failed", timeout=120)
        assert len(runs.read_text()) > 1  # what gpujobs' own runtime prevents
    finally:
        be.state.stop_watches()
        job.cancel()


# ------------------------------------------------------------------ Kueue's version and the TrainJob grace period
def _kueue_manager(sim, tag):
    sim.store.create({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {
        "name": "kueue-controller-manager", "namespace": "kueue-system"}, "spec": {"template": {"spec": {
            "containers": [{"name": "manager", "image": f"registry.k8s.io/kueue/kueue:{tag}"}]}}}})


@pytest.mark.parametrize("tag, warned", [("v0.19.2", True), ("v0.20.0", False), (None, False)])
def test_kueue_before_v020_is_said_to_drop_the_trainjob_grace_period(make_cluster, tag, warned):
    """Kueue v0.19 vendors Trainer v2.2.1 and writes the TrainJob back without the patch's
    terminationGracePeriodSeconds (kueue@v0.19.2 trainjob_controller.go RunWithPodSetsInfo)."""
    import warnings

    from gpujobs.backends.kubernetes.submit.kueue_version import kueue_version
    from gpujobs.errors import GracePeriodWarning
    sim, be = make_cluster(gpus=2)
    if tag:
        _kueue_manager(sim, tag)
    assert kueue_version(sim.api_client()) == tag
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        job = Job(be.submit(gpujobs.job(_ddp_rank).ddp(nodes=1, gpus_per_node=1).queue("q")
                            .options(grace_period_s=120).spec()), be)  # time to save a checkpoint
    said = [w for w in caught if issubclass(w.category, GracePeriodWarning)]
    assert bool(said) == warned
    if warned:
        assert "Kueue v0.19.2" in str(said[0].message) and "v0.20" in str(said[0].message)
    job.cancel()


def test_forecasts_and_preflight_share_one_reading_of_kueues_version_and_see_an_upgrade(make_cluster,
                                                                                          monkeypatch):
    """The forecast's engine (admission_version) and the preflight's grace-period warning read
    Kueue's manager image through one backend reading, taken again once preflight_ttl has passed.
    They read it apart before: two reads for one submit, and the forecast's never again, so a
    Kueue upgrade did not reach the forecasts for the rest of the process."""
    import warnings

    from gpujobs.backends.kubernetes.submit import kueue_version as kv
    from gpujobs.errors import GracePeriodWarning
    sim, be = make_cluster(gpus=2)
    _kueue_manager(sim, "v0.19.2")
    reads: list[str | None] = []
    real = kv.kueue_version

    def counted(*args, **kwargs):
        reads.append(real(*args, **kwargs))
        return reads[-1]
    monkeypatch.setattr(kv, "kueue_version", counted)
    spec = gpujobs.job(_ddp_rank).ddp(nodes=1, gpus_per_node=1).queue("q").options(grace_period_s=120).spec()

    def submit_and_warnings() -> list:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            Job(be.submit(spec), be).cancel()
        return [w for w in caught if issubclass(w.category, GracePeriodWarning)]

    assert be.admission_version() == ("v0.19.2", "the cluster runs Kueue v0.19.2")
    assert submit_and_warnings()
    assert reads == ["v0.19.2"]  # one reading served both
    sim.store.mutate("apps/v1", "Deployment", "kueue-controller-manager", "kueue-system",
                     lambda d: d["spec"]["template"]["spec"]["containers"][0].update(
                         image="registry.k8s.io/kueue/kueue:v0.20.0"))
    be.preflight_ttl = 0.0  # the time to read the cluster again has come
    assert be.admission_version()[1] == "the cluster runs Kueue v0.20.0"
    assert submit_and_warnings() == []
