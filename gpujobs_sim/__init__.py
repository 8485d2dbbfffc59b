"""A simulated Kubernetes cluster for tests and benchmarks (no real cluster needed).

- :mod:`gpujobs_sim.store`: objects, resourceVersions, watch events, garbage collection
  (with :mod:`~gpujobs_sim.resources`, :mod:`~gpujobs_sim.selectors`, :mod:`~gpujobs_sim.patches`).
- :mod:`gpujobs_sim.apiserver`: :class:`FakeApiServer`, real HTTP the official client talks to
  (with :mod:`~gpujobs_sim.streams`, :mod:`~gpujobs_sim.nonresource`, :mod:`~gpujobs_sim.podlogs`).
- :mod:`gpujobs_sim.controllers`: the simulated controllers' reconcile thread, driven by store events
  (:mod:`~gpujobs_sim.changes` says what to look at again): Kueue (:mod:`~gpujobs_sim.kueue`),
  Volcano and the operators (:mod:`~gpujobs_sim.operators` dispatches to one module per operator:
  :mod:`~gpujobs_sim.mpi_operator`, :mod:`~gpujobs_sim.trainer`, :mod:`~gpujobs_sim.kuberay`,
  :mod:`~gpujobs_sim.volcano`, :mod:`~gpujobs_sim.appwrapper`, and the batch/v1 Job controller for users'
  Jobs, :mod:`~gpujobs_sim.batch_job`; with :mod:`~gpujobs_sim.pod_templates`
  and :mod:`~gpujobs_sim.job_status`), the kubelet; :mod:`~gpujobs_sim.conditions` writes status
  conditions and suspend fields.
- :mod:`gpujobs_sim.cluster`: :class:`SimCluster`, the one-call fixture.

Also: ``cel`` and ``crds`` (the CRD schemas and their CEL rules), ``rules`` (upstream facts),
``deadlines`` (each operator's activeDeadlineSeconds), ``images`` (what an image holds),
``mpirun_shim`` (the simulated mpirun), ``storage`` (StorageClasses, claims), ``volumes`` (a
pod's volumes in the simulated kubelet).
"""
from .apiserver import FakeApiServer
from .cluster import SimCluster

__all__ = ["FakeApiServer", "SimCluster"]
