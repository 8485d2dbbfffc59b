"""Parity with the local backend, tried as a new user would on the simulated cluster: the CLI
shows queue positions; an ended job keeps its status, exception and logs after its object or pods
are gone (the client's local archive); a failed job's status says its exception; attach("ns/name")
works from Python; the fix a Kubernetes error names can be run as written."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support import MPI_IMAGE, wait_for

import gpujobs
from gpujobs.backends.kubernetes import KubernetesBackend
from gpujobs.backends.kubernetes.status import archive
from gpujobs.errors import PreflightError
from gpujobs.handle import Job

pytestmark = pytest.mark.slow
GPUJOBS = Path(sys.executable).parent / "gpujobs"


def sleepy(seconds, value):
    import time as _t
    print(f"working on {value}", flush=True)
    _t.sleep(seconds)
    return value


def boom():
    print("about to fail", flush=True)
    raise ValueError("bad input in rank")


@pytest.fixture
def cluster(make_cluster, tmp_path):
    def make(**kw):
        sim, be = make_cluster(**kw)
        kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBECONFIG")}
        env.update(KUBECONFIG=kubeconfig, GPUJOBS_CONFIG=str(tmp_path / "none.toml"))

        def cli(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run([str(GPUJOBS), *args], env=env, capture_output=True, text=True, timeout=120,
                                  cwd=tmp_path)
        return sim, be, cli
    return make


def submit(be, fn, *args, name=None):
    b = gpujobs.job(fn, *args).mpi(ranks=1, gpus_per_rank=1).image(MPI_IMAGE).queue("q")
    if name:
        b = b.name(name)
    return Job(be.submit(b.spec()), be)


def test_cli_status_and_queue_show_the_queue_position(cluster):
    """Were missing: a short CLI call exited before the watch's first visibility fetch."""
    sim, be, cli = cluster(gpus=1)
    a = submit(be, sleepy, 30, "a", name="first")
    wait_for(lambda: a.status().phase == "running")
    b = submit(be, sleepy, 0.1, "b", name="second")
    wait_for(lambda: b.status().queue_position == 1)  # the simulated Kueue has it queued
    out = cli("status", b.id)
    assert out.returncode == 0, out.stderr
    assert "1st in q" in out.stdout, out.stdout
    out = cli("queue", "--backend", "kubernetes", "-n", "default")
    assert out.returncode == 0, out.stderr
    row = next(line for line in out.stdout.splitlines() if "second" in line)
    assert " 1 " in f" {row} ".replace("|", " "), out.stdout
    a.cancel()


def test_status_logs_and_queue_a_after_cancel(cluster):
    """Were: 'not found', no logs, missing from `queue -a` once cancel deleted the job."""
    sim, be, cli = cluster(gpus=1)
    job = submit(be, sleepy, 60, "x", name="long")
    wait_for(lambda: "working on x" in job.logs())
    job.cancel()
    wait_for(lambda: sim.store.get("kubeflow.org/v2beta1", "MPIJob", "long", "default") is None)
    wait_for(lambda: not sim.store.list("v1", "Pod", "default"))
    fresh = KubernetesBackend(api_client=sim.api_client(), namespace="default")  # another process
    st = fresh.status(job.id)
    assert st.phase == "cancelled" and st.extra.get("archived")
    assert "working on x" in "".join(fresh.logs(job.id))
    out = cli("status", job.id)
    assert out.returncode == 0 and "cancelled" in out.stdout, out.stdout + out.stderr
    out = cli("logs", job.id)
    assert out.returncode == 0 and "[rank 0] working on x" in out.stdout, out.stdout + out.stderr
    out = cli("queue", "-a", "--backend", "kubernetes", "-n", "default")
    assert "long" in out.stdout and "cancelled" in out.stdout, out.stdout
    assert archive.path_of(be.home, "default", "long").stat().st_mode & 0o777 == 0o600


def test_status_exception_and_logs_after_the_pods_and_the_job_are_gone(cluster):
    sim, be, cli = cluster(gpus=1)
    job = submit(be, boom, name="bad")
    with pytest.raises(ValueError, match="bad input in rank"):
        job.result(timeout=60)
    st = job.status()
    # the remote exception's summary leads the message (was only "... a pod failed")
    assert st.phase == "failed" and st.message.startswith("ValueError: bad input in rank (rank 0)"), st.message
    for p in sim.store.list("v1", "Pod", "default"):  # pods garbage-collected / evicted
        sim.store.delete("v1", "Pod", p["metadata"]["name"], "default")
    wait_for(lambda: not sim.store.list("v1", "Pod", "default"))
    assert "about to fail" in job.logs()
    sim.store.delete("kubeflow.org/v2beta1", "MPIJob", "bad", "default")  # e.g. a TTL after finishing
    fresh = KubernetesBackend(api_client=sim.api_client(), namespace="default")
    again = Job(job.id, fresh)
    assert again.status().phase == "failed" and again.status().message.startswith("ValueError: bad input")
    with pytest.raises(ValueError, match="bad input in rank"):
        again.result(timeout=5)
    assert "about to fail" in again.logs()
    out = cli("status", job.id)
    assert "ValueError: bad input in rank (rank 0)" in out.stdout, out.stdout + out.stderr


def test_attach_a_namespace_name_id_from_python(cluster, monkeypatch, tmp_path):
    """Was: gpujobs.attach("ns/name") went to the default (local) backend."""
    sim, be, cli = cluster(gpus=1)
    job = submit(be, sleepy, 0.1, 7, name="seven")
    assert job.result(timeout=60) == 7
    monkeypatch.setenv("KUBECONFIG", sim.write_kubeconfig(tmp_path / "kc2"))
    monkeypatch.setenv("GPUJOBS_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.delenv("GPUJOBS_BACKEND", raising=False)
    attached = gpujobs.attach("default/seven")
    assert attached.backend.name == "kubernetes"
    assert attached.result(timeout=30) == 7 and attached.status().phase == "succeeded"


def test_the_missing_trainjob_runtime_fix_runs_as_written(make_cluster, monkeypatch, tmp_path):
    """Was Python-only (KubernetesBackend(trainjob_runtime=...)): now a config key, set as written."""
    sim, _ = make_cluster(runtimes=False)
    sim.store.create({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
                      "metadata": {"name": "site-torch"}, "spec": {"mlPolicy": {"torch": {}}}})
    monkeypatch.setenv("KUBECONFIG", sim.write_kubeconfig(tmp_path / "kc"))
    cfg = tmp_path / "config.toml"
    monkeypatch.setenv("GPUJOBS_CONFIG", str(cfg))

    def world():
        import gpujobs as g
        return g.context().world_size
    spec = gpujobs.job(world).ddp(gpus=1).queue("q").spec()
    with pytest.raises(PreflightError) as info:
        KubernetesBackend().submit(spec)
    msg = str(info.value)
    assert f'trainjob_runtime = "NAME" under [kubernetes] in {cfg}' in msg, msg
    cfg.write_text('[kubernetes]\ntrainjob_runtime = "site-torch"\n')  # the fix, as written
    be = KubernetesBackend()
    job = Job(be.submit(spec), be)
    assert job.result(timeout=120) == 1
