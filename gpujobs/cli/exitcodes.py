"""Exit codes of the ``gpujobs`` command (kept stable for scripts).

====  =========================================================================
0     success (for ``--wait``: the job succeeded)
1     the job failed, was cancelled or its result could not be read
2     something to fix first: bad arguments, bad script/table, a job that can never fit,
      credentials or permissions the cluster refuses (HTTP 401 / 403, as submit's RBAC checks)
3     backend unavailable, try again later: local agent / API server unreachable or failing,
      backend not installed
4     not found: no such job
130   interrupted (Ctrl-C); a job being waited for keeps running
====  =========================================================================
"""
from __future__ import annotations

from ..errors import (BackendAPIError, BackendError, BackendUnavailable, GpuJobsError, JobError,
                      ResultAuthError, SpecError, SubmitError, WaitTimeout)

OK, JOB_FAILED, USAGE, BACKEND_UNAVAILABLE, NOT_FOUND, INTERRUPTED = 0, 1, 2, 3, 4, 130


def is_not_found(exc: BaseException) -> bool:
    if any("NotFound" in cls.__name__ for cls in type(exc).__mro__):
        return True
    if isinstance(exc, BackendAPIError) and exc.status == 404:
        return True
    return isinstance(exc, SpecError) and exc.field in ("job_id", "job")


def exit_code_for(exc: BaseException) -> int:
    """The exit code for an exception that reached the top of a command."""
    if isinstance(exc, KeyboardInterrupt):
        return INTERRUPTED
    if is_not_found(exc):
        return NOT_FOUND
    if isinstance(exc, (SpecError, SubmitError)):
        return USAGE
    if isinstance(exc, BackendAPIError) and exc.status in (401, 403):
        return USAGE  # refused: fix the login or the Role first, as submit's preflight says
    if isinstance(exc, (BackendUnavailable, ImportError, ConnectionError)):
        return BACKEND_UNAVAILABLE
    if isinstance(exc, (JobError, ResultAuthError, WaitTimeout)):
        return JOB_FAILED
    if isinstance(exc, BackendError):
        return BACKEND_UNAVAILABLE
    if isinstance(exc, (GpuJobsError, ValueError, OSError)):
        return USAGE
    return JOB_FAILED
