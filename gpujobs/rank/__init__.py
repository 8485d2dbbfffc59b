"""The rank package: everything that runs inside a rank (a local process or a pod), and nothing else.

It imports the standard library, cloudpickle and :mod:`gpujobs.errors` only (an import-linter
contract in pyproject.toml checks it); torch, Ray, mpi4py, pynvml and psutil are imported
inside the functions that use them, in the ranks that need them. The Kubernetes backend ships
this package's files whole into pods (:mod:`gpujobs.backends.kubernetes.render.shipped`).

- :mod:`.contract`: what a launcher tells a rank (``GPUJOBS_*`` variables, a local job's files).
- :mod:`.wire`: the pod -> client wire format: every marker line, progress and metrics lines,
  :class:`~gpujobs.rank.wire.GpuSample`.
- :mod:`.runner`: the one runner (``python -m gpujobs.rank.runner``), its framework set-up
  (:mod:`.runner.frameworks`) and kept logs (:mod:`.runner.runlogs`).
- :mod:`.context`: ``gpujobs.context()``; :mod:`.progress`: the in-rank progress reporter;
  :mod:`.checkpoint` and :mod:`.fsdp`: ``gpujobs.checkpoint`` / ``gpujobs.fsdp``.
- :mod:`.envelope` (keys, seal / open), :mod:`.shipping` (unpack a call, serve the user's
  modules shipped with it), :mod:`.sources` (source lines for remote tracebacks),
  :mod:`.outcome` (what a rank sends back).
- :mod:`.sampler`, :mod:`.nvml`, :mod:`.cpu`, :mod:`.podlaunch`: the metrics samplers a
  rank's launcher runs.
- :mod:`.filemodes`: private (0600) files.
- :mod:`.pod_package`: the ``gpujobs/__init__.py`` a pod gets instead of the client's.
"""
