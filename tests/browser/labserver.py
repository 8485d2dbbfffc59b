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
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from support import free_port


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


def start_lab(workdir: Path, env_extra: dict[str, str], timeout: float = 60.0) -> Lab:
    dirs = {name: workdir / name for name in ("config", "data", "runtime", "settings", "workspaces",
                                               "ipython", "root")}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
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
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root", "--ip=127.0.0.1",
         f"--port={port}", f"--ServerApp.token={token}", f"--ServerApp.root_dir={dirs['root']}",
         "--ServerApp.open_browser=False"],
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
