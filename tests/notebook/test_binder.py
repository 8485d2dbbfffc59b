"""binder/: the files repo2docker reads, the start script, and the kernel config postBuild writes."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
BINDER = ROOT / "binder"
VENV_BIN = Path(sys.executable).parent


def test_binder_layout():
    for name in ("requirements.txt", "postBuild", "start"):
        assert (BINDER / name).is_file(), name
    for name in ("postBuild", "start"):
        assert os.access(BINDER / name, os.X_OK)
        subprocess.run(["bash", "-n", str(BINDER / name)], check=True)
    post = (BINDER / "postBuild").read_text()
    assert "set -euo pipefail" in post
    assert "download.pytorch.org/whl/cpu" in post and '".[notebook,torch]"' in post
    assert not (ROOT / ".binder").exists()  # both would be an error for repo2docker


def test_start_exports_the_local_backend_and_execs(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUJOBS_")}
    env["HOME"] = str(tmp_path)
    out = subprocess.run(["bash", str(BINDER / "start"), "sh", "-c",
                          'echo "$GPUJOBS_BACKEND $GPUJOBS_HOME $$"'],
                         env=env, capture_output=True, text=True, check=True).stdout.split()
    assert out[:2] == ["local", f"{tmp_path}/.gpujobs"]


def _run_postbuild(tmp_path: Path) -> dict[str, str]:
    """postBuild with pip calls recorded instead of run (the package is already installed here)."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "python").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/pip-calls\n')
    (shim / "python").chmod(0o755)
    (shim / "ipython").symlink_to(VENV_BIN / "ipython")
    env = {"PATH": f"{shim}:/usr/bin:/bin", "HOME": str(tmp_path / "home"),
           "IPYTHONDIR": str(tmp_path / "ipython")}
    subprocess.run(["bash", str(BINDER / "postBuild")], cwd=ROOT, env=env, check=True,
                   capture_output=True, text=True, timeout=120)
    return env


def test_postbuild_installs_cpu_torch_and_writes_the_settings(tmp_path):
    env = _run_postbuild(tmp_path)
    calls = (tmp_path / "pip-calls").read_text().splitlines()
    assert "torch==2.13.0" in calls[0] and "whl/cpu" in calls[0]
    assert calls[1].endswith(".[notebook,torch]")
    cfg = Path(env["IPYTHONDIR"]) / "profile_default" / "ipython_kernel_config.py"
    assert 'extensions = ["gpujobs_magic"]' in cfg.read_text()
    toast = (Path(env["HOME"]) / ".jupyter/lab/user-settings/@jupyterlab/apputils-extension/"
             "notification.jupyterlab-settings")
    assert '"checkForUpdates": false' in toast.read_text()


@pytest.mark.slow
def test_kernel_config_from_postbuild_enables_the_magic(tmp_path, nb_env, monkeypatch):
    env = _run_postbuild(tmp_path)
    monkeypatch.setenv("IPYTHONDIR", env["IPYTHONDIR"])
    from nbclient import NotebookClient
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("%gpujobs backend")]  # no %load_ext
    NotebookClient(nb, timeout=60, kernel_name="python3").execute()
    assert "submits to backend 'local'" in nb.cells[0].outputs[0]["text"]
