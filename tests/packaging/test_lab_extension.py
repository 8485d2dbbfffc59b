"""The wheel ships the GPU jobs panel: the prebuilt lab extension and the server extension's
enable file as data files; installed there, Jupyter lists both as ``gpujobs``, enabled and OK."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ANSI = re.compile(r"\x1b\[[0-9;]*m")

pytestmark = pytest.mark.slow


def jupyter(*args: str, env: dict[str, str]) -> str:
    out = subprocess.run([sys.executable, "-m", "jupyter", *args], capture_output=True, text=True,
                         timeout=120, env=env)
    return ANSI.sub("", out.stdout + out.stderr)


def test_wheel_ships_the_panel_and_jupyter_lists_it_enabled(wheel, tmp_path):
    whl = zipfile.ZipFile(wheel)
    data = "gpujobs-0.1.0.data/data/"
    names = set(whl.namelist())
    assert data + "etc/jupyter/jupyter_server_config.d/gpujobs.json" in names
    assert data + "share/jupyter/labextensions/gpujobs/package.json" in names, \
        "the lab extension was not built: `make labextension` (make test does it first)"
    assert any(n.startswith(data + "share/jupyter/labextensions/gpujobs/static/remoteEntry.") for n in names)

    # "install" the data files into a prefix and ask Jupyter what it sees there
    prefix = tmp_path / "prefix"
    for n in names:
        if n.startswith(data) and not n.endswith("/"):
            dest = prefix / n[len(data):]
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(whl.read(n))
    user_config = tmp_path / "config"
    shutil.copytree(prefix / "etc" / "jupyter", user_config)
    env = dict(os.environ, JUPYTER_PATH=str(prefix / "share" / "jupyter"),
               JUPYTER_CONFIG_DIR=str(user_config), JUPYTER_DATA_DIR=str(tmp_path / "data"),
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    labext = jupyter("labextension", "list", env=env)
    assert re.search(r"^\s*gpujobs v0\.1\.0 enabled OK", labext, re.M), labext
    server = jupyter("server", "extension", "list", env=env)
    assert re.search(r"^\s*gpujobs enabled", server, re.M), server
    assert re.search(r"^\s*gpujobs(\.lab)?\s.*OK", server, re.M), server
