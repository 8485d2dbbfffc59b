"""The whole surface between the core and a backend (after torchx's scheduler interface).

:class:`Backend` is what every backend implements: the Job handle, the views and the CLI need
nothing else. What only some backends can do is a capability, a runtime-checkable protocol of its
own; a front end asks ``isinstance(backend, Plans)`` (never ``getattr``/``hasattr``) and says
plainly when the backend lacks it. A backend declares its capabilities by naming them as bases
(``class KubernetesBackend(Backend, Renders, Plans, ...)``), so mypy checks each signature, and
tests/core/test_backend_seam.py checks that the declared set is exactly the implemented one.

=====================  =========================================================================
protocol               methods
=====================  =========================================================================
Backend                name, submit, status, wait, outcomes, job_key, logs, cancel, jobs,
                       subscribe
Renders                render(spec, kind=None): the objects a submit creates (no cluster needed)
Plans                  plan(spec): what submitting would do now (:class:`gpujobs.status.Plan`)
ChecksQueues           check_queue(queue, namespace=None): SpecError for an unknown queue
HasStacks              stacks(job_id, rank=None, timeout=...): live Python stacks by rank
HasMetricsHistory      metrics_history(job_id): every kept metrics sample of the job
HasProgressHistory     progress_history(job_id): every ``ctx.progress`` report of the job
=====================  =========================================================================

==========  =======================================================================
backend     capabilities
==========  =======================================================================
local       Plans, ChecksQueues, HasStacks, HasMetricsHistory, HasProgressHistory
kubernetes  Renders, Plans, ChecksQueues, HasStacks, HasMetricsHistory, HasProgressHistory
==========  =======================================================================
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol, runtime_checkable

from ..spec import JobSpec
from ..status import JobStatus

if TYPE_CHECKING:
    from ..status import Plan


@runtime_checkable
class Backend(Protocol):
    """What every backend implements."""

    name: str

    def submit(self, spec: JobSpec) -> str:
        """Create the job; return its id. Raise SpecError/SubmitError before creating anything."""

    def status(self, job_id: str) -> JobStatus: ...

    def wait(self, job_id: str, timeout: float | None = None) -> JobStatus:
        """Block until the job is terminal or ``timeout`` passes; return the last status."""

    def outcomes(self, job_id: str) -> dict[int, bytes]:
        """Sealed outcome envelopes by rank (verified and unpickled by the handle)."""

    def job_key(self, job_id: str) -> bytes:
        """The job's HMAC key (kept by the submitter's side only)."""

    def logs(self, job_id: str, rank: int | None = None, follow: bool = False) -> Iterator[str]: ...

    def cancel(self, job_id: str) -> None: ...

    def jobs(self, queue: str | None = None) -> list[JobStatus]: ...

    def subscribe(self, job_id: str, callback: Callable[[JobStatus], Any]) -> Callable[[], None]:
        """Call ``callback`` with each new status; returns an unsubscribe function."""


@runtime_checkable
class Renders(Protocol):
    """The backend's objects for a spec, without a cluster (``JobBuilder.render``)."""

    def render(self, spec: JobSpec, kind: str | None = None) -> list[dict]: ...


@runtime_checkable
class Plans(Protocol):
    """What submitting a spec now would do; nothing is submitted (``JobBuilder.plan``)."""

    def plan(self, spec: JobSpec) -> Plan: ...


@runtime_checkable
class ChecksQueues(Protocol):
    """SpecError naming the known queues when ``queue`` is not one of them (``namespace``: where
    the backend has namespaces, which one's queues)."""

    def check_queue(self, queue: str, namespace: str | None = None) -> None: ...


@runtime_checkable
class HasStacks(Protocol):
    """{rank: Python stacks of all its threads} of a running job (``job.stacks``)."""

    def stacks(self, job_id: str, rank: int | None = None, timeout: float = 10.0) -> dict[int, str]: ...


@runtime_checkable
class HasMetricsHistory(Protocol):
    """Every kept metrics sample of a job (``job.metrics``); without it, the latest readings."""

    def metrics_history(self, job_id: str) -> list: ...


@runtime_checkable
class HasProgressHistory(Protocol):
    """Every ``ctx.progress`` report of a job, oldest first (``job.progress``)."""

    def progress_history(self, job_id: str) -> list[dict]: ...


#: every capability a backend may declare, beyond :class:`Backend`
CAPABILITIES: tuple[type, ...] = (Renders, Plans, ChecksQueues, HasStacks, HasMetricsHistory,
                                  HasProgressHistory)
