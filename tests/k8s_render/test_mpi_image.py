"""MPI's image requirement (sshd, ssh, Open MPI, mpi4py, python3) and the Python check, before
submit where the image is known (the tag, or the known-images table with its sources), and the
MPI pods' sshd set-up as rendered."""
from __future__ import annotations

import sys

import pytest
from tests.support import MPI_IMAGE

import gpujobs
from gpujobs.backends.kubernetes.render import images
from gpujobs.backends.kubernetes.render.bootstrap_script import MPI_SSH_PORT
from gpujobs.backends.kubernetes.render.job import render_job
from gpujobs.errors import SpecError

HERE = "%d%d" % sys.version_info[:2]


def _fn():
    return 1


@pytest.mark.parametrize("volcano", ["none", "job"])
def test_mpi_with_the_default_image_is_refused_naming_image_and_a_runnable_fix(volcano):
    spec = gpujobs.job(_fn).mpi(ranks=2, ranks_per_node=1).options(volcano=volcano).spec()
    with pytest.raises(SpecError) as ei:
        render_job(spec)
    e = ei.value
    assert e.field == "image" and "pytorch/pytorch" in e.problem and "sshd" in e.problem
    assert (f"gpujobs admin mpi-image | docker build -t gpujobs-mpi:py{HERE} --build-arg PYTHON=%d.%d - "
            % sys.version_info[:2]) in e.fix  # [k8s-parity] 7: runs without a checkout
    assert f".image('gpujobs-mpi:py{HERE}')" in e.fix


@pytest.mark.parametrize("image, missing", [
    ("pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime", ["sshd", "ssh client", "mpirun", "mpi4py"]),
    ("mpioperator/openmpi:v0.8.0", ["mpi4py", "python3"]),
    ("mpioperator/mpi-pi:openmpi", ["mpi4py", "python3"]),
    ("mpioperator/mpich:v0.8.0", ["Open MPI's mpirun (it has mpich)", "python3"]),
])
def test_mpi_on_a_known_image_lacking_the_tools_is_refused_with_what_is_missing(image, missing):
    with pytest.raises(SpecError) as ei:
        render_job(gpujobs.job(_fn).mpi(ranks=2).image(image).spec())
    assert ei.value.field == "image"
    for m in missing:
        assert m in ei.value.problem, (m, ei.value.problem)
    assert "Dockerfile" in ei.value.problem  # the fact's source


def test_the_mpi_image_of_another_python_is_refused_by_its_tag():
    other = "310" if HERE != "310" else "311"
    with pytest.raises(SpecError) as ei:
        render_job(gpujobs.job(_fn).mpi(ranks=2).image(f"registry.example/gpujobs-mpi:py{other}").spec())
    assert ei.value.field == "image" and f".image('registry.example/gpujobs-mpi:py{HERE}')" in ei.value.fix


def test_an_unknown_image_renders_and_is_checked_at_run_time():
    assert render_job(gpujobs.job(_fn).mpi(ranks=2).image("registry.example/my-mpi:1").spec()).kind == "MPIJob"
    assert images.facts("registry.example/my-mpi:1") is None and images.python_of("registry.example/my-mpi:1") is None


def test_every_known_image_names_its_source():
    assert all(f.source and ("Dockerfile" in f.source) for f in images.KNOWN)
    assert images.python_of(MPI_IMAGE) == ("%d.%d" % sys.version_info[:2], "its tag")


def test_mpi_workers_run_sshd_on_the_launcher_s_port_with_a_readiness_probe_and_the_caps_sshd_needs():
    job = render_job(gpujobs.job(_fn).mpi(ranks=4, ranks_per_node=2).image(MPI_IMAGE).spec()).job
    spec = job["spec"]
    assert spec["launcherCreationPolicy"] == "WaitForWorkersReady" and spec["slotsPerWorker"] == 2
    w = spec["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    script = w["command"][-1]
    assert w["command"][:2] == ["/bin/sh", "-c"]
    for part in ("mkdir -p /run/sshd", "ssh-keygen -A", f"-p {MPI_SSH_PORT}", "StrictModes=no", "UsePAM=no",
                 "no sshd (openssh-server)", "exit 3"):
        assert part in script, part
    assert w["readinessProbe"]["tcpSocket"]["port"] == MPI_SSH_PORT
    sc = w["securityContext"]
    assert sc["capabilities"]["drop"] == ["ALL"] and "NET_BIND_SERVICE" in sc["capabilities"]["add"]
    assert sc["allowPrivilegeEscalation"] is False


def test_volcano_mpi_plugin_opens_the_sshd_port():
    job = render_job(gpujobs.job(_fn).mpi(ranks=2, ranks_per_node=1).image(MPI_IMAGE)
                     .options(volcano="job").spec()).job
    assert f"--port={MPI_SSH_PORT}" in job["spec"]["plugins"]["mpi"]
    worker = next(t for t in job["spec"]["tasks"] if t["name"] == "worker")
    assert f"-p {MPI_SSH_PORT}" in worker["template"]["spec"]["containers"][0]["command"][-1]


def test_gpujobs_mpi_dockerfile_installs_what_the_table_says():
    """The known-images entry for gpujobs-mpi is a claim about docker/mpi/Dockerfile: keep them together."""
    from pathlib import Path
    text = (Path(__file__).resolve().parents[2] / "docker" / "mpi" / "Dockerfile").read_text()
    f = images.facts(MPI_IMAGE)
    assert f is not None and f.source == "docker/mpi/Dockerfile"
    assert f.sshd and "openssh-server" in text and f.ssh and "openssh-client" in text
    assert f.mpirun == "openmpi-4" and "openmpi-bin" in text and "bookworm" in text  # Debian 12: Open MPI 4.1
    assert f.mpi4py and "mpi4py" in text and "cloudpickle" in text
    assert "FROM python:${PYTHON}" in text and 'dev.gpujobs.python="${PYTHON}"' in text
    # `gpujobs admin mpi-image` prints the same instructions (a pip install has no docker/ folder)
    assert [ln for ln in text.splitlines() if ln and not ln.startswith("#")] == \
        images.MPI_DOCKERFILE.splitlines()
