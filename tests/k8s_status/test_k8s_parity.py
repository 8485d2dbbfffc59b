"""[k8s-parity] stories on the simulated cluster: the promises the local backend keeps, kept on
Kubernetes too (start times per kind, checkpoints across preemption, preemption visible on the
victim, stall evidence from the pods' clocks, a usable render)."""
from __future__ import annotations

import warnings

import pytest
from tests.support import MPI_IMAGE, wait_for

import gpujobs
from gpujobs.errors import DeprecatedPathWarning
from gpujobs.handle import Job

pytestmark = pytest.mark.slow


def sleepy(seconds, value):
    import time as _t
    print(f"working on {value}", flush=True)
    _t.sleep(seconds)
    return value


def _builder(kind, fn, *args):
    b = gpujobs.job(fn, *args)
    if kind == "MPIJob":
        return b.mpi(ranks=1, gpus_per_rank=1).image(MPI_IMAGE).queue("q")
    if kind == "RayJob":
        return b.ray(workers=1, gpus_per_worker=1).queue("q")
    return b.ddp(nodes=1, gpus_per_node=1).kubernetes(kind=kind).queue("q")


def _submit(be, b):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecatedPathWarning)
        return Job(be.submit(b.spec()), be)


# ------------------------------------------------------------------ 6. start and run times
@pytest.mark.parametrize("kind", ["TrainJob", "PyTorchJob", "MPIJob", "RayJob", "AppWrapper"])
def test_a_finished_job_keeps_its_start_time_and_admitted_event(make_cluster, kind):
    sim, be = make_cluster(gpus=2)
    job = _submit(be, _builder(kind, sleepy, 0.3, kind))
    job.wait(timeout=180)  # (a loaded machine can fail Ray's start-up: times are kept either way)
    st = wait_for(lambda: (s := job.status()).terminal and s.finished_at and s)
    assert st.phase in ("succeeded", "failed")
    assert st.started_at is not None and st.submitted_at <= st.started_at <= st.finished_at
    assert [e.kind for e in st.events][:2] == ["submitted", "admitted"]


# ------------------------------------------------------------------ 1. durable checkpoints
def counting(n_steps, step_s):
    """A resumable loop saving every 5 steps; returns (sum, resumed)."""
    import time as _t

    import gpujobs.checkpoint as ck
    loop = ck.resumable(n_steps, state={"total": 0}, every=5)
    for step in loop:
        loop.state["total"] += step * step
        if step % 10 == 0:
            print(f"step {step}", flush=True)
        _t.sleep(step_s)
    return loop.state["total"], loop.resumed


def _claim(sim, name, ns="default"):
    """An admin's claim, bound to a volume made for it (statically provisioned)."""
    sim.store.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                      "metadata": {"name": name, "namespace": ns},
                      "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}},
                               "storageClassName": "", "volumeName": f"pv-{name}"},
                      "status": {"phase": "Bound"}})


def _storage_class(sim, name, default):
    ann = {"storageclass.kubernetes.io/is-default-class": "true"} if default else {}
    sim.store.create({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                      "metadata": {"name": name, "annotations": ann}, "provisioner": "nfs.csi.k8s.io",
                      "volumeBindingMode": "WaitForFirstConsumer", "reclaimPolicy": "Delete"})


@pytest.mark.parametrize("volume", [True, False])
def test_a_preempted_job_resumes_from_its_checkpoint_only_on_a_claim(make_cluster, volume):
    from gpujobs.errors import CheckpointWarning
    sim, be = make_cluster(gpus=1, priorities={"low": 100, "high": 1000})
    _claim(sim, "ckpt")
    n = 400
    b = _builder("MPIJob", counting, n, 0.02).priority("low").options(grace_period_s=5)
    if volume:
        low = _submit(be, b.volume("ckpt", "/mnt/ckpt"))
    else:
        with pytest.warns(CheckpointWarning, match="--volume CLAIM"):
            low = Job(be.submit(b.spec()), be)
    wait_for(lambda: "step 20" in low.logs(), timeout=120)  # checkpoints saved (every 5 steps)
    high = _submit(be, _builder("MPIJob", sleepy, 0.2, "high").priority("high"))
    assert high.result(timeout=120) == "high"
    total, resumed = low.result(timeout=180)
    assert total == sum(i * i for i in range(n))  # the same result as an uninterrupted run
    assert resumed is volume
    assert low.status().restarts >= 1


@pytest.mark.parametrize("default_class", [True, False])
def test_a_default_configured_preempted_job_resumes_from_a_claim_of_the_default_class(make_cluster,
                                                                                    default_class):
    """No --volume, no checkpoint_volume: where the namespace has a default StorageClass, submit
    makes a claim per job (owned by it, deleted with it); where it has none, it warns."""
    from gpujobs.errors import CheckpointWarning
    sim, be = make_cluster(gpus=1, priorities={"low": 100, "high": 1000})
    _storage_class(sim, "slow", default=False)
    _storage_class(sim, "standard", default=default_class)
    n = 400
    b = _builder("MPIJob", counting, n, 0.02).priority("low").options(grace_period_s=5)
    if default_class:
        with warnings.catch_warnings():
            warnings.simplefilter("error", CheckpointWarning)
            low = _submit(be, b)
    else:
        with pytest.warns(CheckpointWarning, match="namespace 'default' has no default StorageClass.*--volume CLAIM"):
            low = Job(be.submit(b.spec()), be)
    name = low.id.split("/")[1]
    wait_for(lambda: "step 20" in low.logs(), timeout=120)
    high = _submit(be, _builder("MPIJob", sleepy, 0.2, "high").priority("high"))
    assert high.result(timeout=120) == "high"
    total, resumed = low.result(timeout=180)
    assert total == sum(i * i for i in range(n)) and low.status().restarts >= 1
    assert resumed is default_class
    claim = sim.store.get("v1", "PersistentVolumeClaim", f"{name}-ckpt", "default")
    if not default_class:
        assert claim is None
        return
    job = sim.store.get("kubeflow.org/v2beta1", "MPIJob", name, "default")
    assert claim["spec"]["storageClassName"] == "standard" and claim["status"]["phase"] == "Bound"
    assert [o["uid"] for o in claim["metadata"]["ownerReferences"]] == [job["metadata"]["uid"]]
    sim.store.delete("kubeflow.org/v2beta1", "MPIJob", name, "default")  # `kubectl delete mpijob`
    wait_for(lambda: sim.store.get("v1", "PersistentVolumeClaim", f"{name}-ckpt", "default") is None, timeout=30)


# ------------------------------------------------------------------ 3. a usable render
def _apply(sim, objs):
    """What `kubectl apply -f -` does with new objects."""
    for o in objs:
        sim.store.create(o)


def _run_as_written(sim, command):
    """`kubectl create secret generic NAME -n NS --from-file=key=PATH && kubectl label secret NAME
    -n NS K=V ...`, done through the API as kubectl would (the command is checked word by word)."""
    import base64
    import shlex
    from pathlib import Path
    create, label = (shlex.split(part) for part in command.split(" && "))
    assert create[:4] == ["kubectl", "create", "secret", "generic"] and create[5] == "-n"
    name, ns, src = create[4], create[6], create[7]
    assert src.startswith("--from-file=key=") and len(create) == 8
    assert label[:3] == ["kubectl", "label", "secret"] and label[3:6] == [name, "-n", ns]
    labels = dict(kv.split("=", 1) for kv in label[6:])
    data = Path(src.split("=", 2)[2]).read_bytes()
    sim.store.create({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                      "metadata": {"name": name, "namespace": ns, "labels": labels},
                      "data": {"key": base64.b64encode(data).decode()}})


def _render_cli(sim, be, tmp_path):
    """``gpujobs render ...`` as a user runs it (a new process, the kubeconfig of the cluster, the
    same gpujobs home as ``be``): (exit code, the printed objects, stdout, stderr)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import yaml
    (tmp_path / "train.py").write_text("def main(value):\n    print('working on', value, flush=True)\n"
                                       "    return value\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBECONFIG")}
    env.update(KUBECONFIG=sim.write_kubeconfig(tmp_path / "kubeconfig"), GPUJOBS_CONFIG=str(tmp_path / "none.toml"),
               GPUJOBS_HOME=str(be.home), PYTHONPATH=os.pathsep.join(sys.path))

    def render(*args: str, value: str):
        out = subprocess.run([str(Path(sys.executable).parent / "gpujobs"), "render", *args, "--framework", "mpi",
                              "--image", MPI_IMAGE, "--queue", "q", "train.py:main", value],
                             env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
        return out.returncode, [o for o in yaml.safe_load_all(out.stdout) if o], out.stdout, out.stderr
    return render


def _mounted_secrets(job: dict) -> set[str]:
    spec = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    return {v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v}


def test_render_job_only_applies_where_gpujobs_already_ran(make_cluster, tmp_path):
    sim, be = make_cluster(gpus=1)
    first = _submit(be, _builder("MPIJob", sleepy, 0.1, "first"))
    assert first.result(timeout=120) == "first"
    rc, objs, _, err = _render_cli(sim, be, tmp_path)("--job-only", value="applied")
    assert rc == 0, err
    assert [o["kind"] for o in objs] == ["MPIJob"]
    there = {s["metadata"]["name"] for s in sim.store.list("v1", "Secret", "default")}
    assert _mounted_secrets(objs[0]) <= there  # the key Secret submit made: the pods can start
    _apply(sim, objs)
    job = Job(f"default/{objs[0]['metadata']['name']}", be)
    assert job.result(timeout=120) == "applied"


def test_render_prints_no_key_and_the_key_secret_command_runs(make_cluster, tmp_path):
    import base64
    sim, be = make_cluster(gpus=1)
    render = _render_cli(sim, be, tmp_path)
    rc, objs, text, err = render(value="rendered")
    assert rc == 0, err
    rc2, again, _, _ = render(value="rendered")
    assert [o["kind"] for o in objs] == ["ConfigMap", "MPIJob"]  # no key Secret printed
    assert _mounted_secrets(objs[1]) == _mounted_secrets(again[1])  # the same key Secret every render
    command = next(line for line in err.splitlines() if "kubectl create secret" in line).split("or run: ", 1)[1]
    _run_as_written(sim, command)
    (secret,) = _mounted_secrets(objs[1])
    key = sim.store.get("v1", "Secret", secret, "default")["data"]["key"]  # what the command made
    assert key not in text and base64.b64decode(key).hex() not in text
    _apply(sim, objs)
    job = Job(f"default/{objs[1]['metadata']['name']}", be)
    assert job.result(timeout=120) == "rendered"


# ------------------------------------------------------------------ 5. preemption on the victim
def test_preemption_stays_visible_on_the_victim_once_it_runs_again(make_cluster):
    from gpujobs.backends.kubernetes.status import pod_metrics
    from gpujobs.cli.output import status_lines
    from gpujobs.views.html import header_html
    sim, be = make_cluster(gpus=1, priorities={"low": 100, "high": 1000})
    low = _submit(be, _builder("MPIJob", counting, 300, 0.02).priority("low"))
    wait_for(lambda: "step 10" in low.logs(), timeout=120)
    # a watcher's status read (every refresh_s while it runs) of the first run's pods' logs
    pod_metrics.for_backend(be).refresh(low.id, force=True)
    high = _submit(be, _builder("MPIJob", sleepy, 0.2, "high").priority("high"))
    assert high.result(timeout=120) == "high"
    wait_for(lambda: low.status().phase == "running", timeout=120)  # admitted again
    low.result(timeout=180)
    st = low.status()
    kinds = [e.kind for e in st.events]
    assert kinds[0] == "submitted" and kinds[-1] == "finished"
    assert "preempted" in kinds and kinds.index("preempted") < kinds.index("requeued")
    assert st.restarts == 1
    assert "Restarts:    restarted 1 time (preempted)" in status_lines(st)
    assert "restarted 1 time (preempted)" in header_html(st)
    text = low.logs()  # the first run's logs kept, marked, before the second run's
    head, _, now = text.partition("--- gpujobs: the job ran again ---\n")
    assert head.startswith("--- gpujobs: an earlier run of this job") and "[rank 0] step 0\n" in head
    assert "[rank 0] step 0\n" in now


def test_a_preempted_run_the_log_keeper_could_not_read_is_kept_from_the_last_status_read(make_cluster):
    """The race behind the flaky story above, made certain: the log keeper follows the first run's
    pods but its streams open only once they are gone (404: it keeps nothing); the status read's
    tail keeps that run, once, and the last run's worker (deleted as the job ends) is not an
    earlier run's."""
    import threading

    from gpujobs.backends.kubernetes.status import pod_metrics
    from gpujobs.backends.kubernetes.status.results import job_pods
    sim, be = make_cluster(gpus=1, priorities={"low": 100, "high": 1000})
    low = _submit(be, _builder("MPIJob", counting, 300, 0.02).priority("low"))
    wait_for(lambda: "step 10" in low.logs(), timeout=120)
    low.status()  # a watcher (its log keeper starts with its first status read)
    pod_metrics.for_backend(be).refresh(low.id, force=True)  # its status read of the pods' logs
    ns, name = low.id.split("/")
    first = job_pods(be.api_client, ns, name)
    names, uids = {p["metadata"]["name"] for p in first}, {p["metadata"]["uid"] for p in first}
    gone = threading.Event()
    call_api = be.api_client.call_api

    def late_follow(path, method, *a, **kw):
        if ("follow", "true") in list(kw.get("query_params") or ()) and path.split("/")[-2] in names:
            gone.wait(120)
        return call_api(path, method, *a, **kw)

    be.api_client.call_api = late_follow
    be.state.log_keeper.follow(low.id, first, first)  # as on the Workload's Preempted condition
    high = _submit(be, _builder("MPIJob", sleepy, 0.2, "high").priority("high"))
    wait_for(lambda: not uids & {p["metadata"]["uid"] for p in job_pods(be.api_client, ns, name)}, timeout=120)
    gone.set()
    assert high.result(timeout=120) == "high"
    wait_for(lambda: low.status().phase == "running", timeout=120)
    low.result(timeout=180)
    low.status()
    head, _, now = low.logs().partition("--- gpujobs: the job ran again ---\n")
    assert head.startswith("--- gpujobs: an earlier run of this job") and "[rank 0] step 0\n" in head
    assert head.count("[rank 1] hello from") == 1 and head.count("[rank 0] step 0\n") == 1, head
    assert "[rank 0] step 0\n" in now


def test_an_earlier_runs_logs_are_shown_though_no_process_watched_it(make_cluster, tmp_path):
    """On a checkpoint claim (here the default one), the ranks keep their output there and the
    next run's pods carry it: a reader that never saw the first run's pods (a new process, its own
    home, no archive) shows it first, marked."""
    from pathlib import Path

    from gpujobs.backends.kubernetes import KubernetesBackend
    sim, be = make_cluster(gpus=1, priorities={"low": 100, "high": 1000})
    _storage_class(sim, "standard", default=True)
    low = _submit(be, _builder("MPIJob", counting, 300, 0.02).priority("low"))
    name = low.id.split("/")[1]
    kept = Path(sim.controllers.kubelet._tmp.name, "_claims", "default", f"{name}-ckpt")
    wait_for(lambda: any(kept.rglob("*.pt")), timeout=120)  # a checkpoint saved (after 'step 0')
    high = _submit(be, _builder("MPIJob", sleepy, 0.2, "high").priority("high"))
    assert high.result(timeout=120) == "high"
    low.result(timeout=180)
    fresh = KubernetesBackend(api_client=sim.api_client(), namespace="default", home=tmp_path / "elsewhere")
    try:
        text, of_rank_0 = "".join(fresh.logs(low.id)), "".join(fresh.logs(low.id, rank=0))
    finally:
        fresh.state.stop_watches()
    head, _, now = text.partition("--- gpujobs: the job ran again ---\n")
    assert head.startswith("--- gpujobs: an earlier run of this job") and "[rank 0] step 0\n" in head
    assert "[rank 0] step 0\n" not in now and "GPUJOBS-" not in text  # resumed from its checkpoint
    assert of_rank_0 == text  # one rank: the same lines


# ------------------------------------------------------------------ 4. stalls, from the pods' clocks
def test_a_one_shot_status_sees_the_stall_and_names_the_users_function(make_cluster, monkeypatch):
    """A new process (a `gpujobs status` call) asking once: the quiet time counts from the pods'
    last output / progress / busy sample, not from when this process first looked."""
    from tests.support import goes_quiet_then_moves

    from gpujobs.backends.kubernetes import KubernetesBackend
    monkeypatch.setenv("GPUJOBS_STALL_FLOOR_S", "2")
    monkeypatch.setenv("GPUJOBS_STALL_FACTOR", "1")
    sim, be = make_cluster(bootstrap=True)
    b = gpujobs.job(goes_quiet_then_moves, 60.0, 0.5).ddp(nodes=1, gpus_per_node=0, procs_per_node=1) \
        .kubernetes(kind="TrainJob").queue("q").env(GPUJOBS_METRICS_INTERVAL="0.3", GPUJOBS_PROGRESS_INTERVAL="0.2")
    job = Job(be.submit(b.spec()), be)
    wait_for(lambda: (p := job.status().progress) is not None and p.step >= 2, timeout=120)
    wait_for(lambda: job.status().stalled_since is not None, timeout=60)  # quiet past the floor
    fresh = KubernetesBackend(api_client=sim.api_client(), namespace="default", default_queue="q",
                              home=be.home)
    try:
        st = fresh.status(job.id)
    finally:
        fresh.state.stop_watches()
    assert st.phase == "running" and st.stalled_since is not None
    assert st.message.startswith("stalled? rank 0 quiet since ") and "rank 0 in quiet_phase (support.py:" in st.message
    assert st.message == st.extra["stall"] or st.extra["stall"] in st.message
    job.cancel()


# ------------------------------------------------------------------ 7. texts
def test_with_the_visibility_api_forbidden_the_position_is_unavailable(make_cluster):
    sim, be = make_cluster(gpus=1)
    sim.server.deny("*", "visibility.kueue.x-k8s.io", "localqueues/pendingworkloads", enforce=True)
    a = _submit(be, _builder("MPIJob", sleepy, 3.0, "a"))
    wait_for(lambda: a.status().phase == "running", timeout=120)
    b = _submit(be, _builder("MPIJob", sleepy, 0.1, "b"))
    st = wait_for(lambda: (s := b.status()).phase == "queued" and s, timeout=60)
    assert st.position_text() == "position unavailable" and "queued in q" not in st.summary()
    assert b.result(timeout=120) == "b"


def test_queue_a_shows_the_user_and_no_position_for_a_cancelled_job(make_cluster):
    import getpass

    from gpujobs.cli.output import job_rows
    sim, be = make_cluster(gpus=1)
    a = _submit(be, _builder("MPIJob", sleepy, 3.0, "a"))
    wait_for(lambda: a.status().phase == "running", timeout=120)
    b = _submit(be, _builder("MPIJob", sleepy, 0.1, "b"))
    wait_for(lambda: b.status().queue_position == 1, timeout=60)
    b.cancel()
    wait_for(lambda: b.status().phase == "cancelled", timeout=60)
    headers, rows = job_rows([s for s in be.jobs() if s.job_id == b.id], wide=False)
    row = dict(zip(headers, rows[0]))
    assert row["PHASE"] == "cancelled" and row["POS"] == "-" and b.status().queue_position is None
    assert row["USER"] == getpass.getuser()
    a.cancel()


def test_unknown_queue_or_priority_at_submit_lists_those_that_exist(make_cluster):
    from gpujobs.errors import PreflightError
    sim, be = make_cluster(gpus=1, priorities={"low": 100, "high": 1000})
    with pytest.raises(PreflightError) as err:
        _submit(be, _builder("MPIJob", sleepy, 0.1, "x").queue("qq"))
    assert "no LocalQueue 'qq'" in str(err.value) and "(did you mean 'q'?); LocalQueues there: q" in str(err.value)
    with pytest.raises(PreflightError) as err:
        _submit(be, _builder("MPIJob", sleepy, 0.1, "x").priority("hihg"))
    assert "(did you mean 'high'?); WorkloadPriorityClasses: high, low" in str(err.value)
    assert be.jobs() == []  # nothing created


# ------------------------------------------------------------------ 2. a run that returned in its grace
def until_stopped(steps):
    """Marks each start in the checkpoint folder, then works as stops_when_asked does."""
    import uuid

    import gpujobs as g
    ctx = g.context()
    ctx.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    (ctx.checkpoint_dir / f"start-{uuid.uuid4().hex}").touch()
    return stops_when_asked(steps)


def test_a_run_that_returned_in_its_grace_keeps_its_result_and_is_not_run_again(make_cluster):
    from pathlib import Path
    sim, be = make_cluster(gpus=1, priorities={"low": 100, "high": 1000})
    _claim(sim, "ckpt")
    low = _submit(be, _builder("MPIJob", until_stopped, 400).priority("low").volume("ckpt")
                  .options(grace_period_s=10))
    wait_for(lambda: "step 20" in low.logs(), timeout=120)
    high = _submit(be, _builder("MPIJob", sleepy, 0.2, "high").priority("high"))
    assert high.result(timeout=120) == "high"
    said, step = low.result(timeout=180)
    assert said == "returned in grace" and 20 <= step < 400
    claim = Path(sim.controllers.kubelet._tmp.name, "_claims", "default", "ckpt")
    assert len(list(claim.rglob("start-*"))) == 1  # the function ran once
    assert "its result is kept and the function is not run again" in low.logs()
    assert low.status().phase == "succeeded" and low.status().restarts >= 1


def stops_when_asked(steps):
    """Asks should_stop() only (no checkpoints): returns at once when the stop is announced."""
    import time as _t

    import gpujobs as g
    ctx = g.context()
    for i in range(steps):
        if ctx.should_stop():
            return ("returned in grace", i)
        if i % 10 == 0:
            print(f"step {i}", flush=True)
        _t.sleep(0.05)
    return ("ran to the end", steps)


def test_with_a_default_storage_class_a_run_that_returned_in_its_grace_is_not_run_again(make_cluster):
    """No --volume, no config: the namespace's default StorageClass gives the job a claim of its
    own, where the outcome returned in the grace period waits for the requeued run."""
    sim, be = make_cluster(gpus=1, priorities={"low": 100, "high": 1000})
    _storage_class(sim, "standard", default=True)
    low = _submit(be, _builder("MPIJob", stops_when_asked, 400).priority("low").options(grace_period_s=10))
    wait_for(lambda: "step 20" in low.logs(), timeout=120)
    high = _submit(be, _builder("MPIJob", sleepy, 0.2, "high").priority("high"))
    assert high.result(timeout=120) == "high"
    said, step = low.result(timeout=180)
    assert said == "returned in grace" and 20 <= step < 400
    assert "its result is kept and the function is not run again" in low.logs()
    assert low.status().phase == "succeeded" and low.status().restarts >= 1


def test_a_rayjob_says_ray_is_starting_until_the_function_runs(make_cluster):
    sim, be = make_cluster(gpus=2)
    job = _submit(be, _builder("RayJob", sleepy, 0.5, "ray"))
    starting = ("connecting to Ray at ", "starting Ray head (")  # a cluster's Ray / the sim's own
    st = wait_for(lambda: (s := job.status()).terminal or s.message.startswith(starting) and s,
                  timeout=180, every=0.1)
    assert st.phase == "running" and st.message.startswith(starting)
    job.wait(timeout=180)
    assert "GPUJOBS-PHASE" not in job.logs()
