"""A LocalQueue that does not exist in the namespace is refused, naming the ones that exist (one
list call), from gpujobs.queue(...) and `gpujobs queue -q` (exit 2), as the local backend refuses
an unknown queue. Was: an empty table and exit 0."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import gpujobs
from gpujobs.errors import SpecError

from .conftest import NS

GPUJOBS = Path(sys.executable).parent / "gpujobs"


def test_backend_refuses_an_unknown_local_queue_naming_the_known_ones(backend):
    backend.check_queue("team-a")  # exists: accepted
    with pytest.raises(SpecError) as err:
        backend.check_queue("team-b")
    assert err.value.field == "queue"
    assert f"no LocalQueue 'team-b' in namespace {NS!r}" in err.value.problem
    assert "did you mean 'team-a'?" in err.value.problem and "LocalQueues there: team-a" in err.value.problem
    assert f"kubectl get localqueues -n {NS}" in err.value.fix
    # was "use one of them (gpujobs queue -q NAME)": the CLI's command shown to Python users
    assert "use one of them (gpujobs.queue('NAME'))" in err.value.fix


def test_gpujobs_queue_refuses_an_unknown_local_queue(backend, monkeypatch):
    monkeypatch.setattr("gpujobs.backends.get_backend", lambda name=None: backend)
    with pytest.raises(SpecError, match="LocalQueues there: team-a"):
        gpujobs.queue("tema-a", backend="kubernetes")
    assert gpujobs.queue("team-a", backend="kubernetes").name == "team-a"


def test_cli_queue_typo_is_exit_2_naming_the_local_queues(server, tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "sim",
        "clusters": [{"name": "sim", "cluster": {"server": server.configuration().host}}],
        "users": [{"name": "u", "user": {"token": "sim"}}],
        "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": "u", "namespace": NS}}]}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUJOBS_", "KUBECONFIG"))}
    env.update(KUBECONFIG=str(kubeconfig), GPUJOBS_HOME=str(tmp_path / "home"),
               GPUJOBS_CONFIG=str(tmp_path / "none.toml"))

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(GPUJOBS), *args], env=env, capture_output=True, text=True,
                              timeout=120, cwd=tmp_path)
    bad = cli("queue", "--backend", "kubernetes", "-q", "typo")
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert "no LocalQueue 'typo'" in bad.stderr and "LocalQueues there: team-a" in bad.stderr
    assert bad.stdout.strip() == ""  # no (empty) table
    good = cli("queue", "--backend", "kubernetes", "-q", "team-a")
    assert good.returncode == 0, good.stdout + good.stderr
