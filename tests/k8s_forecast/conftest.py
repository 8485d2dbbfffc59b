"""The simulated cluster of the forecast tests: queues and other teams' Workloads are set up
(tests/k8s_forecast/k8s_objects.py) before it starts."""
from __future__ import annotations

from typing import Any, Callable

import psutil
import pytest

from gpujobs_sim import SimCluster
from k8s_objects import PRIORITIES


@pytest.fixture
def make_cluster():
    """``make(setup)``: a SimCluster with no queue, ``setup(sim)`` run before it starts (queues,
    other teams' Workloads), and a KubernetesBackend on namespace ``default``. Stopped afterwards;
    no pod process may survive."""
    started: list[SimCluster] = []
    backends: list = []

    def make(setup: Callable[[SimCluster], Any], **kw: Any):
        from gpujobs.backends.kubernetes.backend import KubernetesBackend
        sim = SimCluster(gpus=None, cpus=None, priorities=PRIORITIES, **kw)
        setup(sim)
        sim.start()
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
