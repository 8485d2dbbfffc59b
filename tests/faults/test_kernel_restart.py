"""Kernel-restart stories: submit from a real Jupyter kernel (%%gpujob), kill the kernel,
attach from a fresh kernel and read the result; local agent and Kubernetes (simulated)."""
from __future__ import annotations

import os
import re
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support import MPI_IMAGE

pytestmark = pytest.mark.slow
jupyter_client = pytest.importorskip("jupyter_client")


class Kernel:
    """A real ipykernel started by jupyter_client, with its own environment."""

    def __init__(self, env: dict[str, str]):
        from jupyter_client import KernelManager
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(env=env)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=90)

    def run(self, code: str, timeout: float = 120) -> str:
        out: list[str] = []

        def hook(msg):
            c = msg["content"]
            if msg["msg_type"] == "stream":
                out.append(c["text"])
            elif msg["msg_type"] == "error":
                out.append("ERROR " + c["ename"] + ": " + c["evalue"])
        reply = self.kc.execute_interactive(textwrap.dedent(code), timeout=timeout, output_hook=hook)
        text = "".join(out)
        assert reply["content"]["status"] == "ok", text
        return text

    @property
    def pid(self) -> int:
        return self.km.provisioner.pid

    def kill(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)  # SIGKILL, as a crashed or restarted kernel


def kernel_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUJOBS_", "KUBECONFIG"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(GPUJOBS_HOME=str(home), GPUJOBS_CONFIG=str(home / "none.toml"), **extra)
    return env


SUBMIT_CELL = """
%load_ext gpujobs_magic
"""
JOB_CELL = """
%%gpujob --gpus 1 {flags} -o job
import time
time.sleep(3)
answer = 21 * 2
answer
"""


def _story(env: dict[str, str], flags: str, check_job_id=None) -> None:
    k1 = Kernel(env)
    try:
        k1.run(SUBMIT_CELL)
        k1.run(JOB_CELL.format(flags=flags))
        text = k1.run('import sys; print("JOBID", job.id, sys.executable)')
        job_id = re.search(r"JOBID (\S+) (\S+)", text).group(1)
        assert re.search(r"JOBID \S+ (\S+)", text).group(1) == sys.executable
    finally:
        k1.kill()
    if check_job_id:
        check_job_id(job_id)
    k2 = Kernel(env)  # "restart": a new kernel, nothing in memory
    try:
        out = k2.run(f"""
            import gpujobs
            j = gpujobs.attach({job_id!r})
            print("RESULT", j.result(timeout=120), j.status().phase)
        """, timeout=180)
    finally:
        k2.kill()
    assert "RESULT 42 succeeded" in out, out


def test_local_submit_kill_kernel_attach(gpujobs_home):
    _story(kernel_env(gpujobs_home), "",
           check_job_id=lambda jid: (gpujobs_home / "jobs" / jid).is_dir())


def test_kubernetes_submit_kill_kernel_attach(gpujobs_home, tmp_path):
    from gpujobs_sim import SimCluster
    sim = SimCluster(gpus=2).start()
    try:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(textwrap.dedent(f"""
            apiVersion: v1
            kind: Config
            clusters: [{{name: sim, cluster: {{server: "{sim.server.url}"}}}}]
            users: [{{name: me, user: {{token: fake-token}}}}]
            contexts: [{{name: sim, context: {{cluster: sim, user: me, namespace: default}}}}]
            current-context: sim
        """))
        cfg = tmp_path / "gpujobs.toml"
        cfg.write_text('[kubernetes]\nqueue = "q"\n')
        env = kernel_env(gpujobs_home, KUBECONFIG=str(kubeconfig), GPUJOBS_BACKEND="kubernetes")
        env["GPUJOBS_CONFIG"] = str(cfg)

        def in_cluster(jid: str) -> None:
            ns, name = jid.split("/")
            assert ns == "default"
            assert any(r.kind == "MPIJob" and o["metadata"]["name"] == name
                       for r, o in sim.store.all_objects())
        _story(env, f"--framework mpi --image {MPI_IMAGE}", check_job_id=in_cluster)
    finally:
        pids = sim.stop()
    import psutil
    assert not [p for p in pids if psutil.pid_exists(p)
                and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
