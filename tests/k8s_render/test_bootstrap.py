"""The pod bootstrap, run for real from a rendered job's volumes unpacked into a temp dir.

The pods' env is the rendered container env (paths moved into the temp dir) plus what
the operator injects (Volcano's pytorch plugin: RANK = pod index, WORLD_SIZE = pods).
"""
from __future__ import annotations

import base64
import json
import os
import re
import socket
import subprocess
import tempfile
import sys
from pathlib import Path

import pytest

import gpujobs
from gpujobs.backends.kubernetes.render.payload_objects import JOB_DIR, RUNTIME_DIR
from gpujobs.backends.kubernetes.render.job import RenderOptions, render_job
from gpujobs.payload import open_envelope
from gpujobs.rank.wire import RESULT_MARKER
from tests.job_calls import where_am_i
from tests.support import MPI_IMAGE, unpack_pod


def unpack(r, root: Path) -> dict[str, str]:
    """Write the first task's pod volumes as the kubelet would; mount path -> local folder."""
    return unpack_pod(r, r.job["spec"]["tasks"][0]["template"], root)


def pod_env(r, task: int, repl: dict[str, str]) -> dict[str, str]:
    c = r.job["spec"]["tasks"][task]["template"]["spec"]["containers"][0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUJOBS_")}
    for e in c["env"]:
        if "value" in e:
            v = e["value"]
            for a, b in repl.items():
                v = v.replace(a, b)
            env[e["name"]] = v
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def results(stdout: str, key: bytes) -> dict[int, object]:
    out = {}
    for m in re.finditer(rf"^{RESULT_MARKER} (\d+) (\S+)$", stdout, re.M):
        outcome = open_envelope(base64.b64decode(m.group(2)), key)
        out[int(m.group(1))] = outcome
    return out


@pytest.mark.slow
def test_volcano_pytorch_plugin_pods_run_process_world(tmp_path):
    """2 pods x 2 processes: the plugin says WORLD_SIZE=2 (pods); the gang is 4 ranks."""
    spec = gpujobs.job(where_am_i).ddp(nodes=2, gpus_per_node=0, procs_per_node=2) \
        .options(volcano="job", return_all=True).spec()
    r = render_job(spec, opts=RenderOptions(namespace="ml"))
    repl = unpack(r, tmp_path)
    boot = Path(repl[RUNTIME_DIR]) / "bootstrap.py"
    port = free_port()
    procs = []
    for pod in range(2):  # master-0 (RANK 0), worker-0 (RANK 1), as the plugin injects
        env = pod_env(r, pod, repl)
        env.update(RANK=str(pod), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, str(boot), "rank"], env=env, cwd=tmp_path,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    got = {}
    for stdout, _ in outs:
        got.update(results(stdout, r.key))
    assert sorted(got) == [0, 1, 2, 3]
    for rank, outcome in got.items():
        assert outcome.ok, outcome.traceback
        v = outcome.value
        assert v["rank"] == rank and v["world"] == 4 and v["sum"] == 4.0
        assert v["node"] == rank // 2 and v["local"] == rank % 2


def test_python_version_mismatch_exits_with_clear_message(tmp_path):
    spec = gpujobs.job(where_am_i).ddp(nodes=1, gpus_per_node=0, procs_per_node=1) \
        .options(volcano="job").spec()
    r = render_job(spec, opts=RenderOptions(namespace="ml"))
    repl = unpack(r, tmp_path)
    cfg_path = Path(repl[JOB_DIR]) / "bootstrap.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["python"] = "3.99"
    cfg_path.write_text(json.dumps(cfg))
    p = subprocess.run([sys.executable, str(Path(repl[RUNTIME_DIR]) / "bootstrap.py")],
                       env=pod_env(r, 0, repl), capture_output=True, text=True, timeout=60)
    assert p.returncode == 3
    have = "%d.%d" % sys.version_info[:2]
    assert f"this image runs Python {have} but the function was pickled by Python 3.99" in p.stderr
    assert "Fix:" in p.stderr


def test_shipped_lib_is_self_contained(tmp_path):
    """Without site-packages, the runtime ConfigMap's lib.zip alone imports the runner and
    cloudpickle."""
    spec = gpujobs.job(where_am_i).ddp(nodes=1, gpus_per_node=1).options(volcano="job").spec()
    r = render_job(spec, opts=RenderOptions(namespace="ml"))
    repl = unpack(r, tmp_path)
    lib = Path(repl[RUNTIME_DIR]) / "lib.zip"
    code = ("import sys; sys.path.insert(0, %r); import gpujobs.rank.runner, gpujobs.rank.envelope, "
            "gpujobs.rank.runner.frameworks, gpujobs.fsdp, cloudpickle; assert callable(gpujobs.context); "
            "print(gpujobs.__file__); "
            "print(cloudpickle.__file__)" % str(lib))
    p = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert all(line.startswith(str(lib)) for line in p.stdout.split())


def _command_here(r, repl: dict[str, str]) -> list[str]:
    """The first task's container command with container paths moved to the unpacked folders."""
    c = r.job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    argv = list(c["command"])
    assert argv[:2] == ["python3", "-c"]
    script = argv[2]
    for mount, local in repl.items():
        script = script.replace(repr(mount + "/"), repr(local + "/"))
    return [sys.executable, "-c", script, *argv[3:]]


def test_a_changed_runtime_configmap_is_refused_by_the_pod(tmp_path):
    """The job object carries the runtime's digest: a lib.zip swapped in the shared ConfigMap
    (by anyone who may edit ConfigMaps there) is not run."""
    spec = gpujobs.job(where_am_i).ddp(nodes=1, gpus_per_node=0, procs_per_node=1) \
        .options(volcano="job").spec()
    r = render_job(spec, opts=RenderOptions(namespace="ml"))
    repl = unpack(r, tmp_path)
    cfg = json.loads((Path(repl[JOB_DIR]) / "bootstrap.json").read_text())
    cfg["python"] = "3.99"  # stop right after the check, at the version check
    (Path(repl[JOB_DIR]) / "bootstrap.json").write_text(json.dumps(cfg))
    argv = _command_here(r, repl)
    ok = subprocess.run(argv, env=pod_env(r, 0, repl), capture_output=True, text=True, timeout=60)
    assert ok.returncode == 3 and "pickled by Python 3.99" in ok.stderr  # the check passed
    lib = Path(repl[RUNTIME_DIR]) / "lib.zip"
    lib.write_bytes(lib.read_bytes() + b"\0")  # tampered
    bad = subprocess.run(argv, env=pod_env(r, 0, repl), capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1
    assert f"the runtime ConfigMap {r.runtime['metadata']['name']} does not hold" in bad.stderr
    assert "pickled by" not in bad.stderr  # bootstrap.py never ran


def test_mpi_launcher_has_its_ranks_check_the_runtime_too(tmp_path, monkeypatch):
    from gpujobs.backends.kubernetes.render import bootstrap_script as boot
    from gpujobs.backends.kubernetes.render.payload_objects import runtime_digest

    spec = gpujobs.job(where_am_i).mpi(ranks=2, ranks_per_node=1).image(MPI_IMAGE).options(volcano="job").spec()
    r = render_job(spec, opts=RenderOptions(namespace="ml"))
    cfg = json.loads(r.files.bootstrap_json)
    assert cfg["runtime_digest"] == runtime_digest()
    monkeypatch.setattr(boot.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the container's /tmp (its hostfile)
    monkeypatch.setenv("MPI_HOST", "w0,w1")  # Volcano's mpi plugin
    monkeypatch.setattr(boot, "wait_for_ssh", lambda hosts, timeout: None)
    monkeypatch.setattr(boot, "openmpi_version", lambda mpirun: "5.0.7")
    seen = []
    monkeypatch.setattr(boot.os, "execve", lambda path, argv, env: seen.append((argv, env)))
    boot.run_mpi_launcher(cfg)
    ((argv, env),) = seen
    script = argv[argv.index("-c") + 1]
    assert cfg["runtime_digest"] in script and argv[-1] == "mpi-rank"
    assert script == boot.verify_script(boot.HERE + os.sep, cfg["runtime_digest"],
                                        r.runtime["metadata"]["name"])


def test_mpi_launcher_passes_a_hostfile_of_the_workers_and_ssh_options_for_open_mpi_4_and_5(tmp_path, monkeypatch):
    """Open MPI 5 ignores the ORTE-era OMPI_MCA_orte_default_hostfile the MPI Operator sets
    (kubeflow/mpi-operator#842): without --hostfile every rank runs on the launcher and the job
    still succeeds. The launcher passes --hostfile (one line per worker, slots = ranks per node)
    and the ssh options under Open MPI 4's (plm_rsh_args) and 5's (plm_ssh_args) names."""
    from gpujobs.backends.kubernetes.render import bootstrap_script as boot

    spec = gpujobs.job(where_am_i).mpi(ranks=4, ranks_per_node=2).image(MPI_IMAGE).spec()
    r = render_job(spec, opts=RenderOptions(namespace="ml"))
    assert r.kind == "MPIJob"
    cfg = json.loads(r.files.bootstrap_json)
    hostfile = tmp_path / "hostfile"  # as mpi-operator@v0.8.0 newConfigMap writes it
    hostfile.write_text("j-worker-0.j.ml.svc slots=2\nj-worker-1.j.ml.svc slots=2\n")
    monkeypatch.setenv("OMPI_MCA_orte_default_hostfile", str(hostfile))
    monkeypatch.setenv("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10")  # the operator's
    monkeypatch.delenv("MPI_HOST", raising=False)
    monkeypatch.setenv("GPUJOBS_MPI_DNS_WAIT_S", "0")
    monkeypatch.setattr(boot.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the container's /tmp (its hostfile)
    monkeypatch.setattr(boot, "openmpi_version", lambda mpirun: "5.0.7")
    seen = []
    monkeypatch.setattr(boot.os, "execve", lambda path, argv, env: seen.append((argv, env)))
    boot.run_mpi_launcher(cfg)
    ((argv, env),) = seen
    assert argv[argv.index("-np") + 1] == "4"
    ours = argv[argv.index("--hostfile") + 1]
    assert Path(ours).read_text() == "j-worker-0.j.ml.svc slots=2\nj-worker-1.j.ml.svc slots=2\n"
    for name in ("OMPI_MCA_plm_rsh_args", "PRTE_MCA_plm_ssh_args"):
        opts = env[name]
        assert f"-p {boot.MPI_SSH_PORT}" in opts and "StrictHostKeyChecking=no" in opts
        assert "UserKnownHostsFile=/dev/null" in opts and "ConnectionAttempts=10" in opts
    assert env["PRTE_MCA_plm_ssh_no_tree_spawn"] == env["OMPI_MCA_plm_rsh_no_tree_spawn"] == "1"


@pytest.mark.parametrize("missing", ["mpirun", "ssh"])
def test_mpi_launcher_without_mpirun_or_ssh_fails_with_words(monkeypatch, capsys, missing):
    from gpujobs.backends.kubernetes.render import bootstrap_script as boot

    spec = gpujobs.job(where_am_i).mpi(ranks=2, ranks_per_node=1).image(MPI_IMAGE).spec()
    cfg = json.loads(render_job(spec).files.bootstrap_json)
    monkeypatch.setattr(boot.shutil, "which", lambda name: None if name == missing else f"/usr/bin/{name}")
    with pytest.raises(SystemExit) as ei:
        boot.run_mpi_launcher(cfg)
    assert ei.value.code == boot.EXIT_SETUP
    err = capsys.readouterr().err
    assert ("no mpirun" if missing == "mpirun" else "no ssh client") in err and ".image(" in err



def test_a_sealed_call_pasted_from_another_job_is_refused(tmp_path):
    """Jobs share the submitter's key Secret but each derives its own key from its id: someone
    who may edit job B (not read Secrets) cannot make B's ranks run job A's sealed call."""
    spec = gpujobs.job(where_am_i).ddp(nodes=1, gpus_per_node=0, procs_per_node=1) \
        .options(volcano="job").spec()
    signing = os.urandom(32)
    a = render_job(spec, opts=RenderOptions(namespace="ml"), key=signing)
    b = render_job(spec, opts=RenderOptions(namespace="ml"), key=signing)
    assert a.key_secret == b.key_secret and a.key != b.key
    repl = unpack(b, tmp_path)
    ann = "gpujobs.dev/payload"
    a_call = a.job["spec"]["tasks"][0]["template"]["metadata"]["annotations"][ann]
    (Path(repl[JOB_DIR]) / "payload.b64").write_text(a_call)  # A's call in B's pod
    env = pod_env(b, 0, repl)
    env.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    p = subprocess.run(_command_here(b, repl), env=env, capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    (outcome,) = results(p.stdout, b.key).values()
    assert not outcome.ok and outcome.exc_type.endswith("ResultAuthError")
    assert "sum" not in p.stdout  # A's function never ran


@pytest.mark.parametrize("output, version", [
    ("mpirun (Open MPI) 5.0.7\n\nReport bugs to https://www.open-mpi.org/community/help/\n", "5.0.7"),
    ("mpirun (Open MPI) 4.1.4\n", "4.1.4"),
    ("mpirun has detected an attempt to run as root.\n", ""),  # unknown: go on, mpirun will say
    ("HYDRA build details:\n    Version:                                 4.1.2\n", None),  # MPICH
])
def test_the_launcher_reads_the_open_mpi_version_and_refuses_another_mpi(tmp_path, capsys, output, version):
    from gpujobs.backends.kubernetes.render import bootstrap_script as boot
    fake = tmp_path / "mpirun"
    fake.write_text("#!/bin/sh\ncat <<'X'\n" + output + "X\n")
    fake.chmod(0o755)
    if version is None:
        with pytest.raises(SystemExit):
            boot.openmpi_version(str(fake))
        assert "is not Open MPI (HYDRA build details:)" in capsys.readouterr().err
    else:
        assert boot.openmpi_version(str(fake)) == version


def test_forward_drops_the_newline_before_a_marker_only(monkeypatch):
    """[k8s-parity] 7: no empty ``[rank 0] `` line before gpujobs' result line (the runner's
    newline that ends an unterminated line of the user's), a user's own empty lines kept."""
    import io
    import threading

    from gpujobs.backends.kubernetes.render import bootstrap_script as boot
    out = io.BytesIO()
    monkeypatch.setattr(boot.sys, "stdout", type("O", (), {"buffer": out})())
    src = b"hi\n\nthere\n\nGPUJOBS-RESULT 0 xx\nlast\n\n"
    boot.forward(io.BytesIO(src), threading.Lock(), 0)
    assert out.getvalue().decode().splitlines() == [
        "[rank 0] hi", "[rank 0] ", "[rank 0] there", "GPUJOBS-RESULT 0 xx", "[rank 0] last", "[rank 0] "]


def _ranks(*scripts):
    return [subprocess.Popen([sys.executable, "-c", s]) for s in scripts]


def test_a_stopped_pod_exits_143_and_kills_ranks_still_running_near_the_end_of_its_grace_period(capsys):
    """The bootstrap's exit code is the container's: ranks still running when the grace period's
    SIGKILL came made it 137, which a BatchJob's FailJob rule matched (a preempted job failed). Once
    stopped, it kills them a third of the grace period before the end (here 1.5 s of 2.25 s) and
    exits 143, and any rank's failure while stopping is 143 too."""
    import time
    from gpujobs.backends.kubernetes.render import bootstrap_script as boot
    procs = _ranks("import time; time.sleep(60)", "import sys; sys.exit(0)")
    t0 = time.monotonic()
    assert boot.supervise(procs, stopped=[t0], grace_s="2.25") == 143
    assert 1.5 <= time.monotonic() - t0 < 10 and all(p.poll() is not None for p in procs)
    assert "1 rank(s) still running near the end of the 2.25 s grace period: killed" in capsys.readouterr().err
    assert boot.supervise(_ranks("import sys; sys.exit(1)"), stopped=[time.monotonic()], grace_s="30") == 143
    assert boot.supervise(_ranks("import sys; sys.exit(1)")) == 1  # not stopped: the rank's own code
    assert boot.supervise(_ranks("import sys; sys.exit(0)"), stopped=[time.monotonic()], grace_s="30") == 0
