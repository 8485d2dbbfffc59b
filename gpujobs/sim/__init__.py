"""A simulated Kubernetes cluster for tests and benchmarks (no real cluster needed).

- :mod:`gpujobs.sim.store`: objects, resourceVersions, watch events, garbage collection
  (with :mod:`~gpujobs.sim.resources`, :mod:`~gpujobs.sim.selectors`, :mod:`~gpujobs.sim.patches`).
- :mod:`gpujobs.sim.apiserver`: :class:`FakeApiServer`, real HTTP the official client talks to
  (with :mod:`~gpujobs.sim.streams`, :mod:`~gpujobs.sim.nonresource`, :mod:`~gpujobs.sim.podlogs`).
- :mod:`gpujobs.sim.controllers`: simulated Kueue, Volcano, operators and kubelet, driven by store events
  (:mod:`~gpujobs.sim.changes` says what to look at again).
- :mod:`gpujobs.sim.cluster`: :class:`SimCluster`, the one-call fixture.
"""
from .apiserver import FakeApiServer
from .cluster import SimCluster

__all__ = ["FakeApiServer", "SimCluster"]
