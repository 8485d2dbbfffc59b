"""Helpers shared by test modules: `from tests.support import ...` (tests is a package)."""
from __future__ import annotations

import importlib
import importlib.util
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

MPI_IMAGE = "gpujobs-mpi:py%d%d" % sys.version_info[:2]
"""The image docker/mpi/Dockerfile builds for this Python (sshd, ssh, Open MPI, mpi4py): what MPI
jobs on a cluster name with .image(...) (the default pytorch image has none of these)."""


@contextmanager
def ipython_shell(monkeypatch: Any, ipython_dir: Path) -> Iterator[Any]:
    """A fresh IPython InteractiveShell with the gpujobs magic loaded; its history off (no sqlite
    file, no history thread left running), its profile in ``ipython_dir``; cleared afterwards."""
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config
    monkeypatch.setenv("IPYTHONDIR", str(ipython_dir))
    InteractiveShell.clear_instance()
    cfg = Config()
    cfg.HistoryManager.enabled = False
    sh = InteractiveShell.instance(config=cfg, colors="nocolor")
    sh.run_line_magic("load_ext", "gpujobs_magic")
    try:
        yield sh
    finally:
        sh.run_line_magic("unload_ext", "gpujobs_magic")
        InteractiveShell.clear_instance()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (servers the tests start bind to loopback only)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred: Callable[[], Any], timeout: float = 30.0, every: float = 0.05) -> Any:
    """Poll ``pred`` until it returns something truthy (returned); AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"condition not reached within {timeout} s")


@contextmanager
def tmpfs_home(monkeypatch: Any, size: str, prefix: str, **env: str) -> Iterator[Path]:
    """``GPUJOBS_HOME`` on a fresh tmpfs of ``size`` (``"8m"``), with ``env`` set too, for the
    full-disk tests: root can mount one; the test is skipped where mount is refused. Afterwards
    the local agent there is stopped and the tmpfs unmounted."""
    import pytest

    from gpujobs.backends import get_backend
    from gpujobs.backends.local import stop_agent
    mnt = Path(tempfile.mkdtemp(prefix=prefix))
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        mnt.rmdir()
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}); a full disk needs root")
    monkeypatch.setenv("GPUJOBS_HOME", str(mnt))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    get_backend.cache_clear()
    try:
        yield mnt
    finally:
        stop_agent(home=mnt)
        get_backend.cache_clear()
        subprocess.run(["umount", "-l", str(mnt)], check=False)
        mnt.rmdir()


def fill(path: Path) -> Path:
    """Fill the file system of folder ``path`` (a ``filler`` file there, returned)."""
    filler = path / "filler"
    with open(filler, "ab", buffering=0) as fh:  # unbuffered: nothing left to flush at close
        try:
            while True:
                fh.write(b"\0" * 4096)
        except OSError:
            pass
    return filler


def unpack_pod(r: Any, template: dict, root: Any) -> dict[str, str]:
    """A rendered job's pod volumes written as the kubelet would; mount path -> local folder."""
    from gpujobs_sim.volumes import materialize

    objs = {(o["kind"], o["metadata"]["name"]): o for o in r.objects}
    return {k: str(v) for k, v in materialize(template, lambda kind, n: objs.get((kind, n)),
                                               root).items()}


def quiet_phase(seconds: float) -> None:
    """Where a stalled rank sits (the stall message names this function, from its stack)."""
    import time as t
    t.sleep(seconds)


def goes_quiet_then_moves(quiet_s: float, moving_s: float) -> int:
    """A job function for the stall tests: reports progress, goes quiet (no progress, no output,
    no CPU: a stall) for ``quiet_s``, then moves again for ``moving_s``; returns its last step."""
    import time as t

    import gpujobs
    ctx = gpujobs.context()
    for i in range(3):
        ctx.progress(i, total=20)
        t.sleep(0.3)
    quiet_phase(quiet_s)
    end, i = t.time() + moving_s, 3
    while t.time() < end:
        ctx.progress(i, total=20)
        print("step", i, flush=True)
        i += 1
        t.sleep(0.2)
    return i


def fails_on_rank_one() -> float:
    """A DDP job function: rank 1 raises after the first all_reduce; its peers then lose it in the
    second (their collateral error is noise that the client folds into one line)."""
    import torch
    import torch.distributed as dist

    import gpujobs
    ctx = gpujobs.context()
    t = torch.ones(1)
    dist.all_reduce(t)  # everyone is connected
    if ctx.rank == 1:
        raise KeyError("label column missing")
    dist.all_reduce(t)  # rank 0 and 2 lose their peer here
    return t.item()


def train(n: int, pause: float) -> int:
    """A job function that reports progress every step (rank 0): n steps, ``pause`` s each."""
    import time as t

    import gpujobs
    ctx = gpujobs.context()
    for i in range(n):
        ctx.progress(i + 1, total=n, loss=1.0 / (i + 1))
        t.sleep(pause)
    return n


TRAIN_PY = '''\
import gpujobs


def load(i):
    return i * 2


def step(i):
    value = load(i)
    if i == 3:
        raise ValueError(f"loss is NaN at step {i}")
    return value


def fit(n):
    for i in range(n):
        step(i)
    return n
'''
"""A user's own training module for the traceback tests: ``step`` raises at line 11 (step 3),
called from ``fit`` at line 17."""


@contextmanager
def user_module(folder: Path, monkeypatch: Any, name: str, source: str = TRAIN_PY) -> Iterator[tuple[Any, Path]]:
    """``source`` written as ``folder/<name>.py`` and imported, as a module beside the user's
    script (cloudpickle ships it by value); yields (module, its file); unloaded afterwards."""
    src = folder / f"{name}.py"
    src.write_text(source)
    monkeypatch.syspath_prepend(str(folder))
    sys.modules.pop(name, None)
    try:
        yield importlib.import_module(name), src
    finally:
        sys.modules.pop(name, None)


def cluster_maker(build: Callable[..., Any]) -> Iterator[Callable[..., tuple[Any, Any]]]:
    """The body of a ``make_cluster`` fixture: ``make(*a, **kw)`` starts ``build(*a, **kw)`` (a
    started SimCluster) with a KubernetesBackend on namespace ``default``; afterwards the
    backends' watches and the clusters are stopped, and no pod process may survive."""
    import psutil

    from gpujobs.backends.kubernetes.backend import KubernetesBackend
    started: list[Any] = []
    backends: list[Any] = []

    def make(*a: Any, **kw: Any) -> tuple[Any, Any]:
        sim = build(*a, **kw)
        started.append(sim)
        be = KubernetesBackend(api_client=sim.api_client(), namespace="default", default_queue="q")
        backends.append(be)
        return sim, be

    yield make
    for be in backends:
        be.state.stop_watches()
    for sim in started:
        pids = sim.stop()
        assert not sim.controllers.errors, sim.controllers.errors
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        assert not alive, f"pod processes survived: {alive}"


def interrupted_at_every_line(body: Callable[[], Any], handler: Callable[[], Any],
                              timeout: float = 5.0) -> bool:
    """Run ``body`` in a thread, calling ``handler`` at every line it executes (its callees'
    too), as a signal handler could run between any two lines; True if it finished within
    ``timeout``. A handler that takes a lock ``body`` holds (``threading.Event.set`` inside
    ``Event.set`` or ``Event.clear``) deadlocks here, as it would on a real signal."""
    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if event == "line":
            handler()
        return tracer

    def run() -> None:
        sys.settrace(tracer)
        try:
            body()
        finally:
            sys.settrace(None)

    worker = threading.Thread(target=run, daemon=True)  # a deadlocked one is left behind
    worker.start()
    worker.join(timeout)
    return not worker.is_alive()


def benchmark_module(name: str) -> Any:
    """``benchmarks/<name>.py`` loaded as a module (benchmarks/ is not a package)."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
