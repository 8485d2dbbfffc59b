"""gpujobs inside a pod: the runtime's ``gpujobs/__init__.py`` (lib.zip), not imported on the client.

The Kubernetes backend ships the rank package whole, :mod:`gpujobs.errors` and the public
modules re-exporting the rank package (``gpujobs.checkpoint``, ``gpujobs.fsdp``), with this
file as the package's ``__init__`` in place of the client's, which imports the client side
(builder, backends, views: not shipped). A job's function may use here what runs in a rank:
``gpujobs.context()``, ``gpujobs.JobContext``, ``gpujobs.checkpoint``, ``gpujobs.fsdp`` and
``gpujobs.errors`` (with the error names the client's package exports); anything else says it
is not available in the pod.

Imports are absolute: this file runs as ``gpujobs/__init__.py``, not where it lies.
"""
from gpujobs import errors
from gpujobs.errors import (BackendError, BackendUnavailable, GpuJobsError, JobCancelledError,
                            JobError, JobFailedError, JobLostError, JobNotFound, PreflightError,
                            QuotaError, RemoteError, ResultAuthError, SpecError, SubmitError,
                            WaitTimeout)
from gpujobs.rank.context import JobContext, context

__all__ = ["context", "JobContext", "errors", "GpuJobsError", "SpecError", "JobNotFound",
           "SubmitError", "PreflightError", "QuotaError", "BackendError", "BackendUnavailable",
           "JobError", "JobFailedError", "JobCancelledError", "JobLostError", "RemoteError",
           "ResultAuthError", "WaitTimeout"]

IN_POD = ("checkpoint", "fsdp")
"""Submodules loaded on first use (``gpujobs.checkpoint.resumable``), as on the client."""


def __getattr__(name):
    if name in IN_POD:
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"{__name__}.{name} is not available inside the pod (only the rank "
                         "package is shipped); install gpujobs in the image to use it there")
