"""The simulated MPI Operator and mpirun, on hand-written objects (not gpujobs' renderer): each
behaviour is one mpi-operator@v0.8.0 / Open MPI fact (sources in gpujobs_sim/mpi_operator.py and
gpujobs_sim/mpirun_shim.py)."""
from __future__ import annotations

import json
import time

import pytest
from tests.support import wait_for

from gpujobs_sim import SimCluster
from gpujobs_sim import mpirun_shim

API = "kubeflow.org/v2beta1"


def mpijob(name: str, *, policy: str | None, image: str, workers: int = 2, slots: int = 1) -> dict:
    """An MPIJob as mpi-operator's examples/v2beta1/pi/pi.yaml writes one (no Kueue label)."""
    spec: dict = {"slotsPerWorker": slots, "runPolicy": {"cleanPodPolicy": "Running"},
                  "mpiReplicaSpecs": {
                      "Launcher": {"replicas": 1, "template": {"spec": {"containers": [
                          {"name": "mpi-launcher", "image": image, "command": ["mpirun"], "args": ["-n", "2", "/pi"]}]}}},
                      "Worker": {"replicas": workers, "template": {"spec": {"containers": [
                          {"name": "mpi-worker", "image": image}]}}}}}  # no command: sshd -De
    if policy:
        spec["launcherCreationPolicy"] = policy
    return {"apiVersion": API, "kind": "MPIJob", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def roles(sim: SimCluster, name: str) -> list[str]:
    return sorted(p["metadata"]["labels"]["training.kubeflow.org/job-role"] for p in
                  sim.store.list("v1", "Pod", "default", f"training.kubeflow.org/job-name={name}"))


def test_wait_for_workers_ready_creates_no_launcher_while_a_worker_has_no_sshd_and_the_job_stays_created():
    with SimCluster(gpus=None, cpus=None, images={"example/no-sshd*": {"sshd": False}}) as sim:
        sim.store.create(mpijob("pi", policy="WaitForWorkersReady", image="example/no-sshd:1"))
        wait_for(lambda: all(p["status"].get("phase") == "Failed" for p in
                             sim.store.list("v1", "Pod", "default", "training.kubeflow.org/job-role=worker"))
                 and len(roles(sim, "pi")) == 2)
        pod = sim.store.get("v1", "Pod", "pi-worker-0", "default")
        assert pod["spec"]["containers"][0]["command"] == ["/usr/sbin/sshd", "-De"]  # the operator's default
        assert pod["spec"]["hostname"] == "pi-worker-0" and pod["spec"]["subdomain"] == "pi"
        assert roles(sim, "pi") == ["worker", "worker"]  # never a launcher, workers not recreated
        job = sim.store.get(API, "MPIJob", "pi", "default")
        conds = {c["type"]: c["status"] for c in job["status"]["conditions"]}
        assert conds == {"Created": "True"}  # a failed worker fails nothing
        assert sim.store.get("batch/v1", "Job", "pi-launcher", "default") is None


def test_at_startup_the_launcher_job_comes_with_the_workers_and_gets_the_orte_variables():
    with SimCluster(gpus=None, cpus=None, run_seconds=30) as sim:
        sim.store.create(mpijob("pi", policy=None, image="example/mpi:1", slots=2))
        wait_for(lambda: roles(sim, "pi") == ["launcher", "worker", "worker"])
        cm = sim.store.get("v1", "ConfigMap", "pi-config", "default")
        assert cm["data"]["hostfile"] == "pi-worker-0.pi.default.svc slots=2\npi-worker-1.pi.default.svc slots=2\n"
        (launcher,) = sim.store.list("v1", "Pod", "default", "training.kubeflow.org/job-role=launcher")
        assert launcher["metadata"]["name"].startswith("pi-launcher-")
        assert launcher["metadata"]["ownerReferences"][0]["kind"] == "Job"
        env = {e["name"]: e["value"] for e in launcher["spec"]["containers"][0]["env"]}
        assert env["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
        assert env["OMPI_MCA_plm_rsh_args"] == "-o ConnectionAttempts=10" and env["K_MPI_JOB_ROLE"] == "launcher"
        mounts = {m["mountPath"] for m in launcher["spec"]["containers"][0]["volumeMounts"]}
        assert {"/etc/mpi", "/root/.ssh"} <= mounts
        assert not sim.store.list("scheduling.volcano.sh/v1beta1", "PodGroup", "default")  # no --gang-scheduling


def test_with_gang_scheduling_volcano_the_operator_makes_a_podgroup_named_after_the_job():
    with SimCluster(gpus=None, cpus=None, run_seconds=30, mpi_gang_scheduling="volcano") as sim:
        sim.store.create(mpijob("pi", policy=None, image="example/mpi:1"))
        pg = wait_for(lambda: sim.store.get("scheduling.volcano.sh/v1beta1", "PodGroup", "pi", "default"))
        assert pg["spec"]["minMember"] == 3
        wait_for(lambda: len(roles(sim, "pi")) == 3)
        for p in sim.store.list("v1", "Pod", "default", "training.kubeflow.org/job-name=pi"):
            assert p["spec"]["schedulerName"] == "volcano"
            assert p["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "pi"


def _worker_phase_and_log(sim, name):
    pod = wait_for(lambda: (p := sim.store.get("v1", "Pod", name, "default")) and
                   p["status"].get("phase") in ("Running", "Failed") and p)
    return pod, sim.server.logs.read("default", name)[0].decode()


def test_stock_sshd_without_its_privilege_separation_directory_exits_and_with_it_runs():
    """OpenSSH's sshd exits 255 without /run/sshd; Debian's openssh-server makes it only when its
    service starts (a stock image has none), mpi-operator's Dockerfile makes /var/run/sshd."""
    with SimCluster(gpus=None, cpus=None, run_seconds=30) as sim:
        sim.store.create(mpijob("stock", policy="WaitForWorkersReady", image="example/stock-sshd:1", workers=1))
        pod = wait_for(lambda: (p := sim.store.get("v1", "Pod", "stock-worker-0", "default")) and
                       p["status"].get("phase") == "Failed" and p)
        assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 255
        assert "Missing privilege separation directory: /run/sshd" in \
            sim.server.logs.read("default", "stock-worker-0")[0].decode()
        job = mpijob("made", policy="WaitForWorkersReady", image="example/stock-sshd:1", workers=1)
        job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"] = [
            "/bin/sh", "-c", "mkdir -p /run/sshd && exec /usr/sbin/sshd -De"]
        sim.store.create(job)
        wait_for(lambda: roles(sim, "made") == ["launcher", "worker"])
        sim.store.create(mpijob("theirs", policy="WaitForWorkersReady", image="mpioperator/openmpi:v0.8.0", workers=1))
        wait_for(lambda: roles(sim, "theirs") == ["launcher", "worker"])


def test_a_readiness_probe_on_another_port_than_sshd_s_keeps_the_worker_unready_and_no_launcher():
    with SimCluster(gpus=None, cpus=None, run_seconds=30) as sim:
        job = mpijob("probe", policy="WaitForWorkersReady", image="mpioperator/openmpi:v0.8.0", workers=1)
        c = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        c["readinessProbe"] = {"tcpSocket": {"port": 22}}  # their sshd listens on 2222 (sshd_config)
        sim.store.create(job)
        pod = wait_for(lambda: (p := sim.store.get("v1", "Pod", "probe-worker-0", "default")) and
                       p["status"].get("phase") == "Running" and
                       any(x["type"] == "Ready" and x["status"] == "False" for x in p["status"]["conditions"]) and p)
        assert pod and roles(sim, "probe") == ["worker"]


# ------------------------------------------------------------------ the simulated mpirun
def _hostfile(tmp_path):
    path = tmp_path / "hostfile"
    path.write_text("w-0.j.ns.svc slots=2\nw-1.j.ns.svc slots=2\n")
    return str(path)


@pytest.mark.parametrize("version, where", [(4, "workers"), (5, "launcher")])
def test_the_orte_default_hostfile_variable_is_read_by_open_mpi_4_only(tmp_path, version, where):
    env = {"OMPI_MCA_orte_default_hostfile": _hostfile(tmp_path)}
    hosts = mpirun_shim.hosts_of(mpirun_shim.parse(["-np", "4", "prog"]), env, version, "j-launcher", 8)
    assert hosts == ([("w-0.j.ns.svc", 2), ("w-1.j.ns.svc", 2)] if where == "workers" else [("j-launcher", 8)])


def test_hostfile_and_host_options_mean_the_same_in_4_and_5(tmp_path):
    for version in (4, 5):
        opts = mpirun_shim.parse(["-np", "4", "--hostfile", _hostfile(tmp_path), "prog"])
        assert mpirun_shim.hosts_of(opts, {}, version, "l", 8) == [("w-0.j.ns.svc", 2), ("w-1.j.ns.svc", 2)]
        opts = mpirun_shim.parse(["--host", "a:2,b", "prog"])
        assert mpirun_shim.hosts_of(opts, {}, version, "l", 8) == [("a", 2), ("b", 1)]


@pytest.mark.parametrize("version, env_name, ok", [
    (4, "OMPI_MCA_plm_rsh_args", True), (5, "OMPI_MCA_plm_rsh_args", False),
    (5, "PRTE_MCA_plm_ssh_args", True), (4, "PRTE_MCA_plm_ssh_args", False)])
def test_ssh_options_count_only_under_the_version_s_own_name(tmp_path, monkeypatch, capsys, version, env_name, ok):
    monkeypatch.setenv("GPUJOBS_SIM_OPENMPI", str(version))
    monkeypatch.setenv("GPUJOBS_SIM_SSHD", json.dumps({"w-0.j.ns.svc": 2222, "w-1.j.ns.svc": 2222}))
    monkeypatch.setenv(env_name, "-p 2222 -o StrictHostKeyChecking=no")
    monkeypatch.setenv("GPUJOBS_SIM_REAL_MPIRUN", "/bin/true")
    ran = []
    monkeypatch.setattr(mpirun_shim.os, "execve", lambda path, argv, env: ran.append(env["GPUJOBS_SIM_RANK_HOSTS"]))
    argv = ["-np", "4", "--hostfile", _hostfile(tmp_path), "prog"]
    if ok:
        mpirun_shim.main(argv)
        assert ran == ["w-0.j.ns.svc,w-0.j.ns.svc,w-1.j.ns.svc,w-1.j.ns.svc"]
    else:
        with pytest.raises(SystemExit):
            mpirun_shim.main(argv)
        assert "port 22: Connection refused" in capsys.readouterr().err and not ran


@pytest.mark.parametrize("clean, left", [("None", ["worker", "worker"]), ("Running", []), ("All", [])])
def test_after_the_launcher_ends_the_workers_go_only_with_clean_pod_policy_all_or_running(clean, left):
    """mpi-operator@v0.8.0 syncHandler: a finished MPIJob's workers are deleted only for
    cleanPodPolicy All / Running; with None their sshd runs on (and holds the GPUs)."""
    with SimCluster(gpus=None, cpus=None, run_seconds=0.2) as sim:
        job = mpijob("pi", policy="WaitForWorkersReady", image="mpioperator/mpi-pi:openmpi")  # workers first
        job["spec"]["runPolicy"]["cleanPodPolicy"] = clean
        sim.store.create(job)
        wait_for(lambda: any(c["type"] == "Succeeded" for c in (sim.store.get(API, "MPIJob", "pi", "default")
                                                                  .get("status") or {}).get("conditions") or []))
        wait_for(lambda: [r for r in roles(sim, "pi") if r == "worker"] == left)
        time.sleep(0.5)  # a few reconciles later, the kept workers still run sshd
        workers = sim.store.list("v1", "Pod", "default", "training.kubeflow.org/job-role=worker")
        assert len(workers) == len(left) and all(p["status"].get("phase") == "Running" for p in workers)
