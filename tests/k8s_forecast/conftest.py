"""The simulated cluster of the forecast tests: queues and other teams' Workloads are set up
(tests/k8s_forecast/k8s_objects.py) before it starts."""
from __future__ import annotations

from typing import Any, Callable

import pytest

from gpujobs_sim import SimCluster
from tests.k8s_forecast.k8s_objects import PRIORITIES
from tests.support import cluster_maker


@pytest.fixture
def make_cluster():
    """``make(setup)``: a SimCluster with no queue, ``setup(sim)`` run before it starts (queues,
    other teams' Workloads), and a KubernetesBackend on namespace ``default``. Stopped afterwards;
    no pod process may survive."""
    def build(setup: Callable[[SimCluster], Any], **kw: Any) -> SimCluster:
        sim = SimCluster(gpus=None, cpus=None, priorities=PRIORITIES, **kw)
        setup(sim)
        return sim.start()
    yield from cluster_maker(build)
