"""The interface every backend implements (the Job handle only talks to this)."""
from __future__ import annotations

from typing import Any, Callable, Iterator, Protocol, runtime_checkable

from ..spec import JobSpec
from ..status import JobStatus


@runtime_checkable
class Backend(Protocol):
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

    def render(self, spec: JobSpec, kind: str | None = None) -> list[dict]: ...
