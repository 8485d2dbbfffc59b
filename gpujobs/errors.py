"""One exception hierarchy for gpujobs.

Everything gpujobs raises on purpose derives from :class:`GpuJobsError`::

    GpuJobsError
    ├── SpecError (ValueError)          bad input, raised before anything is created
    │   ├── PayloadError                fn/args cannot be serialised or are too large
    │   └── JobNotFound (LookupError)   no job with that id (status / attach / cancel)
    ├── SubmitError                     the backend refused or failed to create the job
    │   ├── PreflightError              a check before creation failed (queue, CRD, RBAC …)
    │   └── QuotaError                  the job can never fit its queue
    ├── BackendError                    the backend misbehaved after submission
    │   ├── BackendUnavailable          agent / API server cannot be reached
    │   ├── StateError                  local state directory unreadable or corrupt
    │   └── KubernetesError             an API call failed (carries the HTTP status)
    ├── JobError                        the job itself ended badly
    │   ├── JobFailedError              a rank exited non-zero or was killed (no exception)
    │   ├── JobCancelledError           the job was cancelled
    │   ├── JobLostError                the job's processes vanished (agent crash …)
    │   ├── RemoteError                 a remote exception that cannot be re-created locally
    │   └── JobStateError               the job is not in a phase that allows this (stacks of
    │                                   a finished job)
    ├── ResultAuthError                 a result failed its HMAC check: never unpickled
    └── WaitTimeout (TimeoutError)      result()/wait() timed out; the job keeps running

In IPython and Jupyter a gpujobs error shows the caller's frames and the message, not
gpujobs' own frames (``_render_traceback_``, :mod:`gpujobs.tracebacks`; ``%tb verbose`` or
``GPUJOBS_DEBUG=1`` shows them all).

A remote exception is re-raised as *its own type*; gpujobs adds ``rank`` and
``remote_traceback`` attributes and a note with the remote traceback.

Every error can be rebuilt from :meth:`GpuJobsError.init_args` (its constructor's arguments):
pickling uses them, and so does the local agent's socket (:mod:`gpujobs.backends.local.protocol`),
so a ``PreflightError`` raised in the agent arrives with its ``obj``, a ``KubernetesError`` with its
``status``. The common ones are exported from ``gpujobs`` itself (``gpujobs.JobNotFound`` …).
"""
from __future__ import annotations

import re
from typing import Mapping


class GpuJobsError(Exception):
    """Base class of every error gpujobs raises on purpose."""

    def init_args(self) -> tuple:
        """The arguments that rebuild this error as ``type(self)(*init_args())``; subclasses with
        a structured constructor return their fields."""
        return tuple(self.args)

    def __reduce__(self):
        return (type(self), self.init_args())

    def _render_traceback_(self) -> list[str]:
        """IPython's hook: the caller's frames and this error, not gpujobs' own frames
        (:mod:`gpujobs.tracebacks`)."""
        from .tracebacks import render_short
        return render_short(self)


class SpecError(GpuJobsError, ValueError):
    """Invalid job description. ``field`` names the input, ``fix`` says what to do."""

    def __init__(self, field: str, problem: str, fix: str | None = None):
        self.field = field
        self.problem = problem
        self.fix = fix
        msg = f"{field}: {problem}"
        if fix:
            msg += f" (fix: {fix})"
        super().__init__(msg)

    def init_args(self) -> tuple:
        return (self.field, self.problem, self.fix)


class PayloadError(SpecError):
    """The function or its arguments cannot travel to the ranks."""


class JobNotFound(SpecError, LookupError):
    """No job with this id on the backend (``field`` is ``job_id``)."""


class SubmitError(GpuJobsError):
    """The backend could not create the job."""


class PreflightError(SubmitError):
    """A check made before creating anything failed; ``obj`` names what is wrong."""

    def __init__(self, obj: str, message: str):
        self.obj = obj
        self.detail = message
        super().__init__(f"{obj}: {message}")

    def init_args(self) -> tuple:
        return (self.obj, self.detail)


class QuotaError(SubmitError):
    """The job asks for more than its queue could ever give it."""


class BackendError(GpuJobsError):
    """The backend failed after the job was accepted."""


class BackendUnavailable(BackendError):
    """The backend (local agent, API server) cannot be reached."""


class StateError(BackendError):
    """The local state directory is unreadable, unwritable or corrupt."""


class KubernetesError(BackendError):
    """A Kubernetes API call failed."""

    def __init__(self, message: str, status: int | None = None, reason: str | None = None):
        self.message = message
        self.status = status
        self.reason = reason
        super().__init__(message)

    def init_args(self) -> tuple:
        return (self.message, self.status, self.reason)


class JobError(GpuJobsError):
    """The job ended without a result."""


class JobFailedError(JobError):
    """A rank exited with a non-zero code or was killed by a signal."""

    def __init__(self, message: str, rank: int | None = None, exit_code: int | None = None):
        self.message = message
        self.rank = rank
        self.exit_code = exit_code
        super().__init__(message)

    def init_args(self) -> tuple:
        return (self.message, self.rank, self.exit_code)


class JobCancelledError(JobError):
    """The job was cancelled before it produced a result."""


class JobLostError(JobError):
    """The job's processes disappeared (for example the local agent was killed)."""


class RemoteError(JobError):
    """A remote exception whose type cannot be re-created in this process."""

    def __init__(self, type_name: str, message: str, rank: int | None = None,
                 remote_traceback: str = ""):
        self.type_name = type_name
        self.message = message
        self.rank = rank
        self.remote_traceback = remote_traceback
        super().__init__(f"{type_name}: {message}")

    def init_args(self) -> tuple:
        return (self.type_name, self.message, self.rank, self.remote_traceback)


class JobStateError(JobError):
    """The job is not in a phase that allows the request (e.g. stacks of a job not running)."""


class ResultAuthError(GpuJobsError):
    """A result or payload failed authentication; it was not unpickled."""


class WaitTimeout(GpuJobsError, TimeoutError):
    """``result()`` / ``wait()`` ran out of time; the job is still running."""


class RankRerunWarning(UserWarning):
    """The cluster would run a failing rank's function again in place (a TrainJob runtime whose
    pods restart on failure); the message names the runtime and the fix."""


class GracePeriodWarning(UserWarning):
    """The cluster will not give the job's pods the termination grace period gpujobs set (e.g.
    Kueue before v0.20 drops a TrainJob's); the message names the component and the fix."""


class DeprecatedPathWarning(FutureWarning):
    """gpujobs was asked for something upstream deprecates (shown by default, unlike
    DeprecationWarning); the message names the supported path."""


class CheckpointWarning(UserWarning):
    """A job saves checkpoints where a preempted run cannot find them again (a Kubernetes pod's
    own disk): the message names the durable place to use instead."""


def fixes_for(msg: str, table: Mapping[str, str]) -> str:
    """An error's message with the Python fixes it names rewritten for another front end (the
    CLI, the cell magic): ``table`` maps a Python text to the text to show instead; ``JOB`` in a
    key matches a quoted value (no quote, no space) that its replacement repeats."""
    for python, shown in table.items():
        if "JOB" in python:
            pattern = re.escape(python).replace("JOB", r"([^'\s]+)")
            msg = re.sub(pattern, shown.replace("JOB", r"\1"), msg)
        else:
            msg = msg.replace(python, shown)
    return msg
