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
    │   └── BackendAPIError             a backend's API call failed (carries the HTTP status)
    │       └── KubernetesError         a Kubernetes API call failed
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

A fix is a :class:`Fix` (set a field to an example value, drop a field, run a command, or plain
words), not prose for one front end: ``str(exc)`` spells it for Python (:data:`PYTHON`), and the
CLI and the ``%%gpujob`` magic spell the same Fix with their own :class:`Spelling`
(:meth:`GpuJobsError.render`). docs/troubleshooting.md, "How an error's fix is written".
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field as _field
from typing import Any, Mapping

#: what a :class:`Fix` asks for
ACTIONS = ("set", "drop", "run", "say")


@dataclass(frozen=True)
class Fix:
    """What to do about an error, said once for every front end.

    ``action``: ``set`` (give ``field`` the value ``example``), ``drop`` (leave ``field`` out),
    ``run`` (run the command named ``field``, its argument ``example``) or ``say`` (plain words,
    the same everywhere). ``text``: the words around the spelled action, ``{}`` marking its place
    (none: the action alone; for ``say``, the whole fix); ``{=FIELD}`` in it is another field as
    the front end names it (``{=nodes}``: ``nodes``, on the command line ``--nodes``)."""
    action: str
    field: str = ""
    example: str = ""
    text: str = ""

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"Fix action {self.action!r} is not one of {', '.join(ACTIONS)}")

    @classmethod
    def set(cls, field: str, example: object, text: str = "") -> "Fix":
        return cls("set", field, str(example), text)

    @classmethod
    def drop(cls, field: str, text: str = "") -> "Fix":
        return cls("drop", field, "", text)

    @classmethod
    def run(cls, command: str, argument: object = "", text: str = "") -> "Fix":
        return cls("run", command, str(argument), text)

    @classmethod
    def say(cls, text: str) -> "Fix":
        return cls("say", "", "", text)

    @classmethod
    def of(cls, fix: "Fix | str | Mapping[str, Any] | None") -> "Fix | None":
        """A Fix from what an error's constructor was given: a Fix, plain words (``say``), the
        dict of :meth:`as_dict` (an error rebuilt from the local agent's JSON), or None."""
        if fix is None or isinstance(fix, Fix):
            return fix
        if isinstance(fix, str):
            return cls.say(fix) if fix else None
        return cls(**dict(fix))

    def as_dict(self) -> dict[str, str]:
        return asdict(self)

    def spell(self, spelling: "Spelling | None" = None) -> str:
        """This fix in the words of ``spelling``'s front end (default: Python)."""
        sp = spelling or PYTHON
        text = re.sub(r"\{=(\w+)\}", lambda m: sp.name(m.group(1)), self.text)
        if self.action == "say":
            return text
        if self.action == "set":
            action = sp.template("fields", self.field).format(v=self.example)
        elif self.action == "drop":
            action = f"drop {sp.name(self.field)}"
        else:
            action = sp.template("commands", self.field).format(v=self.example)
        return text.replace("{}", action) if "{}" in text else (f"{action} {text}" if text else action)


@dataclass(frozen=True)
class Spelling:
    """One front end's words for a :class:`Fix`: ``fields`` maps a JobSpec field to how it is set
    there (``{v}``: the example value), ``commands`` a command's name to how it is run there
    (``{v}``: its argument), ``names`` a field to how an error names it (default: the field).
    What a front end does not spell falls back to Python's (:data:`PYTHON`)."""
    fields: Mapping[str, str]
    commands: Mapping[str, str]
    names: Mapping[str, str] = _field(default_factory=dict)

    @classmethod
    def flags(cls, fields: Mapping[str, str], commands: Mapping[str, str]) -> "Spelling":
        """A command line's spelling: each field is named by its flag (``--image {v}``: ``--image``)."""
        return cls(fields, commands, {f: t.split()[0] for f, t in fields.items()})

    def template(self, table: str, key: str) -> str:
        own, python = getattr(self, table), getattr(PYTHON, table)
        return own.get(key) or python.get(key) or (f"{key}={{v}}" if table == "fields" else key)

    def name(self, field: str) -> str:
        return self.names.get(field, field)


#: the Python API's spelling: builder methods for the job's options, keywords for its shape
PYTHON = Spelling(
    fields={"image": ".image('{v}')", "queue": ".queue('{v}')", "priority": ".priority('{v}')",
            "volume": ".volume('{v}')", "max_runtime_s": ".max_runtime({v})", "backend": ".on('{v}')",
            "name": ".name('{v}')", "env": ".env({v})", "gpus": "gpus={v}", "nodes": "nodes={v}",
            "procs_per_node": "procs_per_node={v}", "framework": "framework='{v}'",
            "grace_period_s": "grace_period_s={v}", "kind": ".kubernetes(kind='{v}')",
            "namespace": ".kubernetes(namespace='{v}')", "volcano_queue": ".kubernetes(volcano_queue='{v}')"},
    commands={"jobs": "gpujobs.jobs()", "kubernetes-jobs": "gpujobs.jobs(backend='kubernetes')",
              "cancel": "gpujobs.attach('{v}').cancel()", "queue": "gpujobs.queue('{v}')"})


class GpuJobsError(Exception):
    """Base class of every error gpujobs raises on purpose. ``remedy``: its :class:`Fix`, if any."""

    remedy: Fix | None = None

    def render(self, spelling: Spelling | None = None) -> str:
        """The message with its fix in ``spelling``'s words (a front end's); ``str(exc)`` is
        ``render(PYTHON)``."""
        return str(self)

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
    """Invalid job description. ``field`` names the input, ``remedy`` (a :class:`Fix`, or plain
    words) says what to do; ``fix`` is its Python spelling."""

    def __init__(self, field: str, problem: str, fix: Fix | str | Mapping[str, Any] | None = None):
        self.field = field
        self.problem = problem
        self.remedy = Fix.of(fix)
        self.fix = self.remedy.spell() if self.remedy else None
        super().__init__(self.render())

    def render(self, spelling: Spelling | None = None) -> str:
        sp = spelling or PYTHON
        msg = f"{sp.name(self.field)}: {self.problem}"
        return msg + f" (fix: {self.remedy.spell(sp)})" if self.remedy else msg

    def init_args(self) -> tuple:
        return (self.field, self.problem, self.remedy.as_dict() if self.remedy else None)


class PayloadError(SpecError):
    """The function or its arguments cannot travel to the ranks."""


class JobNotFound(SpecError, LookupError):
    """No job with this id on the backend (``field`` is ``job_id``)."""


class SubmitError(GpuJobsError):
    """The backend could not create the job."""


class PreflightError(SubmitError):
    """A check made before creating anything failed; ``obj`` names what is wrong, ``remedy``
    (optional) what to do."""

    def __init__(self, obj: str, message: str, fix: Fix | str | Mapping[str, Any] | None = None):
        self.obj = obj
        self.detail = message
        self.remedy = Fix.of(fix)
        super().__init__(self.render())

    def render(self, spelling: Spelling | None = None) -> str:
        msg = f"{self.obj}: {self.detail}"
        return msg + f"; {self.remedy.spell(spelling)}" if self.remedy else msg

    def init_args(self) -> tuple:
        return (self.obj, self.detail, self.remedy.as_dict() if self.remedy else None)


class QuotaError(SubmitError):
    """The job asks for more than its queue could ever give it."""


class BackendError(GpuJobsError):
    """The backend failed after the job was accepted."""


class BackendUnavailable(BackendError):
    """The backend (local agent, API server) cannot be reached."""


class StateError(BackendError):
    """The local state directory is unreadable, unwritable or corrupt."""


class BackendAPIError(BackendError):
    """A call to a backend's API failed; ``status``: its HTTP status (None: no answer),
    ``reason``: the API's reason word (``NotFound``, ``Forbidden`` …). The core reads these, never
    a backend's own subclass."""

    def __init__(self, message: str, status: int | None = None, reason: str | None = None):
        self.message = message
        self.status = status
        self.reason = reason
        super().__init__(message)

    def init_args(self) -> tuple:
        return (self.message, self.status, self.reason)


class KubernetesError(BackendAPIError):
    """A Kubernetes API call failed (raised by the kubernetes backend only)."""


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
    """``result()`` / ``wait()`` ran out of time; the job is still running (``remedy``: how to
    stop it)."""

    def __init__(self, message: str, fix: Fix | str | Mapping[str, Any] | None = None):
        self.message = message
        self.remedy = Fix.of(fix)
        super().__init__(self.render())

    def render(self, spelling: Spelling | None = None) -> str:
        return self.message + f" ({self.remedy.spell(spelling)})" if self.remedy else self.message

    def init_args(self) -> tuple:
        return (self.message, self.remedy.as_dict() if self.remedy else None)


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
