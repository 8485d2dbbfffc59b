"""A private JupyterLab on 127.0.0.1 for browser tests, stopped (with its kernels) by pid."""
from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import psutil

from tests.support import free_port


@dataclass
class Lab:
    root: Path
    port: int
    token: str
    proc: subprocess.Popen
    log: Path
    seen: set[int] = field(default_factory=set)

    def url(self, path: str) -> str:
        sep = "&" if "?" in path else "?"
        return f"http://127.0.0.1:{self.port}/{path}{sep}token={self.token}"

    def remember_children(self) -> None:
        """Note every descendant (kernels, their rank processes) so teardown can check them."""
        try:
            self.seen.update(p.pid for p in psutil.Process(self.proc.pid).children(recursive=True))
        except psutil.NoSuchProcess:
            pass

    def stop(self, timeout: float = 15.0) -> list[int]:
        """SIGTERM the server (it shuts its kernels down), then kill what is left; returns
        the pids that were still alive afterwards (should be none)."""
        self.remember_children()
        self.seen.add(self.proc.pid)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        procs = []
        for pid in self.seen:
            try:
                procs.append(psutil.Process(pid))
            except psutil.NoSuchProcess:
                pass
        for p in procs:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(procs, timeout=5)
        return [p.pid for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


ROOT = Path(__file__).resolve().parents[2]
PANEL_BUILD = ROOT / "gpujobs" / "lab" / "labextension"


def install_panel(config_dir: Path, data_dir: Path) -> None:
    """Enable the ``gpujobs`` server extension and link this checkout's built lab extension
    (``make labextension``) into private Jupyter dirs, as the wheel's data files would."""
    if not (PANEL_BUILD / "package.json").exists():
        raise RuntimeError(f"the lab extension is not built ({PANEL_BUILD}): run `make labextension`")
    conf = config_dir / "jupyter_server_config.d"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "gpujobs.json").write_text(
        (ROOT / "jupyter-config" / "jupyter_server_config.d" / "gpujobs.json").read_text())
    (data_dir / "labextensions").mkdir(parents=True, exist_ok=True)
    link = data_dir / "labextensions" / "gpujobs"
    if not link.exists():
        link.symlink_to(PANEL_BUILD, target_is_directory=True)


def start_lab(workdir: Path, env_extra: dict[str, str], timeout: float = 60.0, panel: bool = False,
              app: str = "lab") -> Lab:
    """``jupyter lab`` (or ``app="server"``) with private dirs; ``panel``: with the GPU jobs panel.
    JupyterLab exposes ``window.jupyterapp`` so a test can read which kernel the page uses."""
    dirs = {name: workdir / name for name in ("config", "data", "runtime", "settings", "workspaces",
                                               "ipython", "root")}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    if panel:
        install_panel(dirs["config"], dirs["data"])
    note = dirs["settings"] / "@jupyterlab" / "apputils-extension"
    note.mkdir(parents=True, exist_ok=True)
    (note / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    env = dict(os.environ)
    env.update({
        "JUPYTER_CONFIG_DIR": str(dirs["config"]), "JUPYTER_DATA_DIR": str(dirs["data"]),
        "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]), "JUPYTERLAB_SETTINGS_DIR": str(dirs["settings"]),
        "JUPYTERLAB_WORKSPACES_DIR": str(dirs["workspaces"]), "IPYTHONDIR": str(dirs["ipython"]),
    })
    env.update(env_extra)
    port, token = free_port(), secrets.token_hex(16)
    log = workdir / "lab.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", app, "--no-browser", "--allow-root", "--ip=127.0.0.1",
         f"--port={port}", f"--ServerApp.token={token}", f"--ServerApp.root_dir={dirs['root']}",
         "--ServerApp.open_browser=False"] + (["--LabApp.expose_app_in_browser=True"] if app == "lab" else []),
        env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=dirs["root"])
    lab = Lab(dirs["root"], port, token, proc, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"jupyter lab exited: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(lab.url("api/status"), timeout=2) as r:
                if r.status == 200:
                    return lab
        except OSError:
            time.sleep(0.3)
    lab.stop()
    raise RuntimeError(f"jupyter lab did not answer in {timeout} s: {log.read_text()[-2000:]}")


@contextmanager
def panel_server(monkeypatch, workdir: Path, home: Path, app: str = "lab",
                 refresh_s: float = 0.3) -> Iterator[Lab]:
    """``jupyter lab`` (or ``server``) with the GPU jobs panel over the local backend in ``home``
    (2 GPU slots, here and in the server); on exit stops it and the agent and checks that no
    process of theirs survived."""
    from gpujobs.backends.local import stop_agent
    monkeypatch.setenv("GPUJOBS_LOCAL_GPUS", "2")
    monkeypatch.setenv("GPUJOBS_AGENT_IDLE_S", "60")
    lab = start_lab(workdir, {"GPUJOBS_HOME": str(home), "GPUJOBS_BACKEND": "local", "GPUJOBS_LOCAL_GPUS": "2",
                              "GPUJOBS_LAB_REFRESH_S": str(refresh_s)}, panel=True, app=app)
    try:
        yield lab
    finally:
        survivors = lab.stop()
        stop_agent(home=home)
        assert survivors == [], f"processes survived the server's teardown: {survivors}"
