"""The Job handle: a future-like view of one job on any backend (after submitit's Job)."""
from __future__ import annotations

from typing import Any, Callable, Generic, Iterator, TypeVar, cast

from .backends import get_backend
from .backends.base import Backend, HasProgressHistory, HasStacks
from .errors import Fix, JobCancelledError, JobFailedError, JobLostError, WaitTimeout
from .payload import Outcome, open_envelope
from .status import JobStatus

#: what the job's function returns (``gpujobs.submit(fn)`` gives a ``Job[<fn's return type>]``)
R = TypeVar("R")


def interrupted_line(job_ids: str | list[str], cancel: str) -> str:
    """The one line shown when Ctrl-C stops a wait (Python, CLI and magic alike)."""
    ids = [job_ids] if isinstance(job_ids, str) else list(job_ids)
    jobs = f"job {ids[0]} keeps" if len(ids) == 1 else f"jobs {' '.join(ids)} keep"
    return f"gpujobs: interrupted; {jobs} running (cancel: {cancel})"


class Job(Generic[R]):
    """A submitted job. ``result()`` blocks; ``status()`` never does."""

    def __init__(self, job_id: str, backend: Backend | str | None = None, spec: Any = None):
        self.id = job_id
        self.spec = spec
        self._backend = backend if isinstance(backend, Backend) else get_backend(backend)
        self._ended_as: tuple[JobStatus, dict[int, Outcome]] | None = None
        """Once the job has ended: its final status and opened outcomes (each envelope opened once)."""

    # ----------------------------------------------------------------- state
    @property
    def backend(self) -> Backend:
        return self._backend

    def status(self) -> JobStatus:
        return self._backend.status(self.id)

    def done(self) -> bool:
        return self.status().terminal

    def wait(self, timeout: float | None = None, progress: bool = False) -> JobStatus:
        """Block until the job ends; raise WaitTimeout (the job keeps running) after ``timeout``.

        ``progress=True`` shows a terminal progress bar while waiting (tqdm when installed,
        else rich) once the job reports ``ctx.progress``, and a spinner with the phase before.
        Ctrl-C stops waiting, not the job: one line says how to cancel it, then
        KeyboardInterrupt is re-raised."""
        try:
            if progress:
                from .views.terminal import wait_with_bar
                st = wait_with_bar(self._backend, self.id, timeout)
            else:
                st = self._backend.wait(self.id, timeout)
        except KeyboardInterrupt as exc:
            if not getattr(exc, "gpujobs_reported", False):
                import sys
                sys.stderr.write(interrupted_line(self.id, f"gpujobs.attach({self.id!r}).cancel()")
                                 + "\n")
                sys.stderr.flush()
                exc.gpujobs_reported = True  # type: ignore[attr-defined]
            raise
        if not st.terminal:
            raise WaitTimeout(f"job {self.id} still {st.phase} after {timeout} s; it keeps running",
                              Fix.run("cancel", self.id, "{} stops it"))
        return st

    # --------------------------------------------------------------- results
    def _outcomes(self) -> dict[int, Outcome]:
        key = self._backend.job_key(self.id)
        return {rank: open_envelope(blob, key) for rank, blob in self._backend.outcomes(self.id).items()}

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The exception the job ended with (remote exceptions as their own type), or None."""
        return self._ended(timeout)[0]

    def _ended(self, timeout: float | None) -> tuple[BaseException | None, JobStatus, dict[int, Outcome]]:
        """Once the job has ended: its exception (or None), final status and outcomes by rank.
        The outcomes are read and their envelopes opened once per handle: a second ``result()``
        or ``exception()`` asks the backend nothing."""
        if self._ended_as is None:
            st = self.wait(timeout)
            self._ended_as = st, self._outcomes()
        st, outcomes = self._ended_as
        return self._error(st, outcomes), st, outcomes

    def _error(self, st: JobStatus, outcomes: dict[int, Outcome]) -> BaseException | None:
        # The cause first: a rank's own error beats errors that only report a lost peer.
        failed = sorted((o for o in outcomes.values() if not o.ok), key=lambda o: (o.collateral, o.rank))
        if failed:
            first = failed[0]
            died_silently = (first.collateral and st.phase == "failed" and st.reason == "rank-failed"
                             and f"rank {first.rank} " not in st.message)
            if not died_silently:
                return _fold_peers(first.exception(), failed[1:])
            # The cause died without an exception (killed, os._exit): say so.
            err = JobFailedError(f"job {self.id} failed: {st.message}", exit_code=st.exit_code)
            err.__cause__ = first.exception()
            return err
        if st.phase == "succeeded":
            return None
        if st.phase == "cancelled":
            return JobCancelledError(f"job {self.id} was cancelled" +
                                     (f": {st.message}" if st.message else ""))
        if st.reason == "lost":
            return JobLostError(f"job {self.id} was lost: {st.message}")
        return JobFailedError(f"job {self.id} failed: {st.message or 'no result'}",
                              exit_code=st.exit_code)

    def result(self, timeout: float | None = None) -> R:
        """Rank 0's return value (a list by rank with ``return_all``, typed ``Job[Any]`` then);
        re-raises remote errors."""
        exc, st, outcomes = self._ended(timeout)
        if exc is not None:
            raise exc
        if len(outcomes) > 1 or st.extra.get("return_all"):
            # return_all: .return_all() typed the job Job[Any], its value is this list
            return cast(R, [outcomes[r].value for r in sorted(outcomes)])
        if 0 not in outcomes:
            raise JobLostError(f"job {self.id} succeeded but rank 0 left no result")
        return outcomes[0].value

    # ------------------------------------------------------------- the rest
    def logs(self, follow: bool = False, rank: int | None = None) -> str | Iterator[str]:
        """All ranks' logs, prefixed ``[rank N]`` (a string; an iterator of lines with follow)."""
        lines = self._backend.logs(self.id, rank=rank, follow=follow)
        return lines if follow else "".join(lines)

    def cancel(self) -> None:
        self._backend.cancel(self.id)

    def subscribe(self, callback: Callable[[JobStatus], Any]) -> Callable[[], None]:
        return self._backend.subscribe(self.id, callback)

    def render(self, kind: str | None = None) -> list[dict]:
        """The Kubernetes objects for this job's spec (see JobBuilder.render)."""
        from .builder import renderer
        if self.spec is None:
            raise JobLostError(f"job {self.id}: its spec is not known in this process")
        return renderer().render(self.spec, kind=kind)

    def metrics(self):
        """Per-rank device samples as a pandas DataFrame (see gpujobs.metrics)."""
        from .metrics import job_metrics_frame
        return job_metrics_frame(self)

    def progress(self):
        """The ``ctx.progress`` history as a pandas DataFrame: time, rank, step, total and one
        column per metric passed (``ctx.progress(step, total, loss=...)``)."""
        from .progress import progress_frame
        if isinstance(self._backend, HasProgressHistory):
            return progress_frame(self._backend.progress_history(self.id))
        st = self.status()
        p = st.progress
        return progress_frame([] if p is None else [
            {"rank": p.rank, "time": p.updated, "step": p.step, "total": p.total,
             "metrics": p.metrics}])

    def stacks(self, rank: int | None = None, timeout: float = 10.0) -> dict[int, str]:
        """{rank: the Python stacks of all its threads} of a running job (one rank with
        ``rank``); ranks that do not answer within ``timeout`` seconds are left out."""
        if not isinstance(self._backend, HasStacks):
            from .errors import BackendError
            raise BackendError(f"the {self._backend.name} backend cannot show live stacks; "
                               f"the job's logs are in job.logs()")
        return self._backend.stacks(self.id, rank=rank, timeout=timeout)

    def timeline(self) -> list[tuple[float, str, str]]:
        return [(e.time, e.kind, e.message) for e in self.status().events]

    def __repr__(self) -> str:
        try:
            return f"<Job {self.id} {self.status().summary()}>"
        except Exception:
            return f"<Job {self.id}>"

    def _repr_html_(self) -> str:
        from .views.html import render_job_html
        return render_job_html(self.status())

    def _ipython_display_(self) -> None:
        from .views import display_job
        display_job(self)

    def __reduce__(self):
        return (attach, (self.id, self._backend.name))


def _peer_text(message: str) -> str:
    """The first line of a peer-lost error without gloo's source location prefix."""
    import re
    line = (message.strip().splitlines() or [""])[0]
    return re.sub(r"^\[[^\]]*\.(?:cc|cpp|h):\d+\]\s*", "", line)[:160]


def _fold_peers(exc: BaseException, others: list[Outcome]) -> BaseException:
    """The other failed ranks as one line on the cause's exception: their errors only say a
    peer went away (gloo/NCCL "connection closed"), the cause's traceback comes first."""
    collateral = [o for o in others if o.collateral]
    own = [o for o in others if not o.collateral]
    lines = []
    if collateral:
        ranks = ", ".join(str(o.rank) for o in collateral)
        first = _peer_text(collateral[0].exc_message)
        lines.append(f"[gpujobs] rank{'s' if len(collateral) > 1 else ''} {ranks} then failed "
                     f"because a peer went away ({collateral[0].exc_type.rsplit('.', 1)[-1]}: "
                     f"{first}; their tracebacks: exc.peer_errors)")
    for o in own:
        lines.append(f"[gpujobs] rank {o.rank} also raised {o.exc_type.rsplit('.', 1)[-1]}: "
                     f"{(o.exc_message.strip().splitlines() or [''])[0][:160]}")
    if lines and hasattr(exc, "add_note"):
        try:
            exc.add_note("\n".join(lines))
            exc.peer_errors = {o.rank: o.traceback for o in others}  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001
            pass
    return exc


def attach(job_id: str, backend: str | None = None) -> Job[Any]:
    """A handle to an existing job (e.g. after a kernel restart). A ``namespace/name`` id is a
    Kubernetes job (as in the CLI), whatever the default backend."""
    if backend is None and "/" in job_id:
        backend = "kubernetes"
    be = get_backend(backend)
    be.status(job_id)  # raises if unknown
    return Job(job_id, be)
