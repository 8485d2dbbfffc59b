from __future__ import annotations

import psutil
import pytest

from gpujobs_sim import SimCluster


@pytest.fixture
def make_cluster():
    """Start SimClusters; stop them after the test and check no pod process survives."""
    started: list[SimCluster] = []
    backends: list = []

    def make(**kw):
        from gpujobs.backends.kubernetes.backend import KubernetesBackend
        sim = SimCluster(**kw).start()
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
