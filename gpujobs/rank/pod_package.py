"""gpujobs inside a pod: the runtime's ``gpujobs/__init__.py`` (lib.zip), not imported on the client.

The Kubernetes backend ships the rank package whole, :mod:`gpujobs.errors` and the public
modules re-exporting the rank package (``gpujobs.checkpoint``, ``gpujobs.fsdp``), with this
file as the package's ``__init__`` in place of the client's, which imports the client side
(builder, backends, views: not shipped). A job's function may use here what runs in a rank:
``gpujobs.context()``, ``gpujobs.JobContext``, ``gpujobs.checkpoint``, ``gpujobs.fsdp`` and
``gpujobs.errors`` (with the error names the client's package exports); anything else says it
is not available in the pod. A client-side module a pickled function names (cloudpickle records
``gpujobs.progress`` for a function that calls ``ctx.progress`` where the client had imported it)
imports as an empty stand-in whose attributes say so (:class:`NotInPod`, last on sys.meta_path).

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

import sys

IN_POD = ("checkpoint", "fsdp")
"""Submodules loaded on first use (``gpujobs.checkpoint.resumable``), as on the client."""


def __getattr__(name):
    if name in IN_POD:
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"{__name__}.{name} is not available inside the pod (only the rank "
                         "package is shipped); install gpujobs in the image to use it there")


class NotInPod:
    """Finds every ``gpujobs.*`` module lib.zip lacks (after the real finders): an empty
    stand-in whose attributes raise AttributeError naming what is missing."""

    def find_spec(self, name, path=None, target=None):
        if not name.startswith("gpujobs."):
            return None
        import importlib.util
        return importlib.util.spec_from_loader(name, self, is_package=True)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        name = module.__name__

        def missing(attr):
            if attr.startswith("__"):
                raise AttributeError(attr)
            raise AttributeError(f"{name}.{attr} is not available inside the pod (only the rank "
                                 "package is shipped); install gpujobs in the image to use it "
                                 "there")
        module.__getattr__ = missing


if not any(isinstance(f, NotInPod) for f in sys.meta_path):
    sys.meta_path.append(NotInPod())

