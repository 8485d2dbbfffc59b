"""Shared fixtures: every test gets its own GPUJOBS_HOME; local agents are stopped afterwards."""
from __future__ import annotations

import os
import time

import psutil
import pytest
from hypothesis import settings

# Property tests check behaviour, not speed (speed is measured in benchmarks/): no per-example
# deadline, which a busy 2-core CI machine misses on a first, import-heavy example.
settings.register_profile("gpujobs", deadline=None)
settings.load_profile("gpujobs")


@pytest.fixture(autouse=True)
def gpujobs_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("gpujobs-home")
    monkeypatch.setenv("GPUJOBS_HOME", str(home))
    monkeypatch.delenv("GPUJOBS_BACKEND", raising=False)
    monkeypatch.delenv("GPUJOBS_CONFIG", raising=False)
    from gpujobs.backends import get_backend
    get_backend.cache_clear()
    yield home
    get_backend.cache_clear()
    try:
        from gpujobs.backends.local import stop_agent
    except ImportError:
        return
    stop_agent(home=home)


def processes_of_job(job_id: str, pids: tuple[int, ...] = ()) -> list[psutil.Process]:
    """Live processes whose environment carries this job id, or whose pid the job recorded.

    Ranks forked from the agent's warm zygote keep the zygote's /proc environ, so the pids the
    job's status recorded (``extra["pids"]``) are checked too.
    """
    found = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.pid == os.getpid():
                continue
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            if p.pid in pids or p.environ().get("GPUJOBS_JOB_ID") == job_id:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


@pytest.fixture
def no_leftovers():
    """Call with a job id: asserts (within a few seconds) that none of its processes survive."""
    def check(job_id: str, within: float = 5.0) -> None:
        import gpujobs
        pids = tuple(gpujobs.attach(job_id).status().extra.get("pids", ()))
        deadline = time.monotonic() + within
        while True:
            alive = processes_of_job(job_id, pids)
            if not alive or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert not alive, f"processes of {job_id} survived: {[p.pid for p in alive]}"
    return check


#: folders whose tests share one expensive session fixture (the real control plane, the wheel), a
#: machine-wide resource (Chromium with JupyterLab) or a file they rewrite (the fault report):
#: under ``pytest -n`` (xdist, ``--dist loadgroup``) each runs on one worker
SHARED_SESSION = ("realcp", "browser", "packaging", "faults")


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(__file__)
    for item in items:
        folder = os.path.relpath(str(item.fspath), here).split(os.sep)[0]
        if folder in SHARED_SESSION:
            item.add_marker(pytest.mark.xdist_group(folder))


def pytest_sessionfinish(session, exitstatus):
    """Stop the watches of every Kubernetes backend a test made and left running (a backend made
    outside the make_cluster fixtures: the CLI in-process, a second reader): their informer and
    status-hub threads otherwise outlive the clusters they watch into the interpreter's shutdown."""
    import gc
    try:
        from gpujobs.backends.kubernetes.cluster import ClusterState
    except ImportError:
        return
    for obj in gc.get_objects():
        if isinstance(obj, ClusterState):
            try:
                obj.stop_watches()
            except Exception as exc:  # noqa: BLE001 - a test's half-made backend must not fail the run
                import sys
                sys.stderr.write(f"\ncould not stop a backend's watches: {exc!r}\n")


def _process_pool_prefixes() -> tuple[str, ...]:
    """The thread names of the package's module-level pools: idle workers that live as long as
    the process by design (submit's preflight reads and creates), no test's leftover."""
    import sys
    prefixes = []
    for module in ("gpujobs.backends.kubernetes.submit.preflight", "gpujobs.backends.kubernetes.submit.create"):
        pool = getattr(sys.modules.get(module), "_POOL", None)
        if pool is not None:
            prefixes.append(pool._thread_name_prefix)
    return tuple(prefixes)


def pytest_unconfigure(config):
    """The run has ended; the interpreter's shutdown is still to come. Name the threads still
    alive (each a test's leftover: its owner should stop it) and keep a fatal-error handler on
    through the shutdown, which pytest's own faulthandler plugin no longer covers, so that a crash
    there prints every thread's stack instead of only make's "Segmentation fault"."""
    import faulthandler
    import sys
    import threading
    pools = _process_pool_prefixes()
    alive = [t for t in threading.enumerate()
             if t is not threading.main_thread() and not t.name.startswith(pools)]
    if alive:
        names = ", ".join(sorted(f"{t.name}{' (daemon)' if t.daemon else ''}" for t in alive))
        sys.stderr.write(f"\nthreads alive after the tests: {names}\n")
    faulthandler.enable(file=sys.__stderr__, all_threads=True)
