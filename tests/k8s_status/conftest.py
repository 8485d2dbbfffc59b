from __future__ import annotations

import pytest

from gpujobs_sim import SimCluster
from tests.support import cluster_maker


@pytest.fixture
def make_cluster():
    """Start SimClusters; stop them after the test and check no pod process survives."""
    yield from cluster_maker(lambda **kw: SimCluster(**kw).start())
