"""A simulated Kubernetes cluster for tests and benchmarks (no real cluster needed).

- :mod:`gpujobs.sim.store`: objects, resourceVersions, watch events, garbage collection.
- :mod:`gpujobs.sim.apiserver`: :class:`FakeApiServer`, real HTTP the official client talks to.
- :mod:`gpujobs.sim.controllers`: simulated Kueue, Volcano, operators and kubelet.
- :mod:`gpujobs.sim.cluster`: :class:`SimCluster`, the one-call fixture.
"""
from .apiserver import FakeApiServer
from .cluster import SimCluster

__all__ = ["FakeApiServer", "SimCluster"]
