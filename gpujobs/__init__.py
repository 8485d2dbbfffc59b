"""gpujobs: turn a Python function into a queued, gang-scheduled GPU job.

>>> job = gpujobs.submit(train, gpus=4)
>>> job.result()
"""
from __future__ import annotations

from . import errors
from .builder import JobBuilder, job, submit
from .context import JobContext, context
from .errors import SpecError
from .handle import Job, attach
from .spec import JobSpec, SecretRef, Volume
from .status import GpuSample, JobEvent, JobStatus

__version__ = "0.1.0"

__all__ = ["submit", "job", "JobBuilder", "JobSpec", "Job", "JobStatus", "JobEvent", "GpuSample",
           "attach", "jobs", "context", "JobContext", "errors", "SpecError", "SecretRef", "Volume"]


def jobs(queue: str | None = None, backend: str | None = None):
    """Jobs known to the backend, newest first (``.to_pandas()`` for a DataFrame)."""
    from .backends import get_backend
    from .views.table import JobTable
    return JobTable(get_backend(backend).jobs(queue))
