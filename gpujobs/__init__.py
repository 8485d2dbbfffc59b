"""gpujobs: turn a Python function into a queued, gang-scheduled GPU job.

>>> job = gpujobs.submit(train, gpus=4)
>>> job.result()

Modules: ``spec`` (JobSpec, one typed, validated description) and ``builder`` (the fluent
builder); ``placement`` (KubernetesPlacement, the Kubernetes-only part of a JobSpec); ``shape``
(GPUs -> ranks, for every entry point); ``handle`` (the Job handle);
``status`` (the one status model every view reads); ``errors`` (one exception hierarchy, fixes as
:class:`~gpujobs.errors.Fix`) and ``tracebacks`` (short notebook tracebacks of them); ``config``
(the typed settings, read once) and ``devices`` (the GPUs NVML finds); ``quantity`` (Kubernetes
quantities); ``filemodes`` (private files); ``contract`` (the rank contract: every ``GPUJOBS_*``
name); ``context``, ``fsdp``, ``checkpoint`` (what the user's function calls); ``progress``
(``ctx.progress`` reports). Packages: ``payload`` and ``runner`` (the rank side), ``admission``
(the Kueue-like engine), ``backends`` (local, kubernetes), ``metrics``, ``views``, ``slurm`` (the
sbatch translator), ``admin`` (queues from a teams table), ``cli`` and ``lab`` (front ends).
"""
from __future__ import annotations

from . import errors
from .builder import JobBuilder, job, submit
from .context import JobContext, context
from .errors import (BackendError, BackendUnavailable, GpuJobsError, JobCancelledError, JobError,
                     JobFailedError, JobLostError, JobNotFound, PreflightError, QuotaError, RemoteError,
                     ResultAuthError, SpecError, SubmitError, WaitTimeout)
from .handle import Job, attach
from .spec import JobSpec, SecretRef, Volume
from .status import GpuSample, JobEvent, JobStatus, Plan

__version__ = "0.1.0"

__all__ = ["submit", "job", "JobBuilder", "JobSpec", "Job", "JobStatus", "JobEvent", "GpuSample",
           "Plan", "attach", "jobs", "queue", "usage", "context", "JobContext", "SecretRef", "Volume",
           # loaded on first use (LAZY_SUBMODULES)
           "checkpoint", "fsdp", "slurm",
           # the errors a caller catches (the whole tree: gpujobs.errors)
           "errors", "GpuJobsError", "SpecError", "JobNotFound", "SubmitError", "PreflightError",
           "QuotaError", "BackendError", "BackendUnavailable", "JobError", "JobFailedError",
           "JobCancelledError", "JobLostError", "RemoteError", "ResultAuthError", "WaitTimeout"]


LAZY_SUBMODULES = ("checkpoint", "fsdp", "slurm")
"""What a job's function uses as ``gpujobs.checkpoint.resumable`` / ``gpujobs.fsdp.shard``, and a
caller as ``gpujobs.slurm.from_sbatch``: loaded on first use (``import gpujobs`` imports no torch),
the same in a pod."""


def __getattr__(name: str):
    if name in LAZY_SUBMODULES:
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def jobs(queue: str | None = None, backend: str | None = None):
    """Jobs known to the backend, newest first (``.to_pandas()`` for a DataFrame)."""
    from .backends import get_backend
    from .views.table import JobTable
    return JobTable(get_backend(backend).jobs(queue))


def usage(since=None, until=None, by=("queue", "user"), backend=None):
    """GPU-hours requested vs used, mean utilisation and queue wait per group, as a DataFrame.

    ``since``/``until``: epoch seconds, datetime, ISO string, or a timedelta ("that long ago").
    See :mod:`gpujobs.metrics.usage` for the definitions.
    """
    from .backends import get_backend
    from .metrics import job_samples
    from .metrics.usage import to_epoch, usage_report
    be = get_backend(backend) if backend is None or isinstance(backend, str) else backend
    t0, t1 = to_epoch(since, "since"), to_epoch(until, "until")
    statuses = be.jobs()
    samples = {st.job_id: job_samples(be, st.job_id) for st in statuses}
    return usage_report(statuses, samples, since=t0, until=t1, by=by)


def queue(name: str | None = None, backend: str | None = None, all: bool = False):
    """A live view of the active jobs in queue ``name`` (all queues when None), as
    ``gpujobs queue`` shows them; ``all=True`` adds the finished ones.

    ``.to_pandas()`` gives a DataFrame; in a notebook it displays as a refreshing table.
    Reads only ``backend.jobs(name)``, so it works for the local backend and for
    Kueue LocalQueues alike.
    """
    from .backends import get_backend
    from .backends.base import ChecksQueues
    from .views.table import QueueView
    be = get_backend(backend)
    if name is not None and isinstance(be, ChecksQueues):
        be.check_queue(name)  # a misspelt queue: an error now, not an empty table
    if all:
        return QueueView(lambda: be.jobs(name), name=name, active_only=False)
    return QueueView(lambda: [s for s in be.jobs(name) if not s.terminal], name=name)


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    """Jupyter's hook: the server extension ``gpujobs`` (the panel's API) is :mod:`gpujobs.lab`."""
    return [{"module": "gpujobs.lab"}]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """Jupyter's hook: the prebuilt "GPU jobs" panel (``jupyter labextension develop``)."""
    return [{"src": "lab/labextension", "dest": "gpujobs"}]
