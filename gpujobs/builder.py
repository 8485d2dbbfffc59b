"""The fluent builder: ``gpujobs.job(fn, *args).ddp(...).queue(...).submit()``.

Every method returns a new builder (builders are immutable and reusable);
``.spec()`` validates and returns the :class:`JobSpec`.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Generic, Mapping, TypeVar

from .errors import Fix, SpecError
from .shape import Shape, gang_shape
from .spec import PLACEMENT_FIELDS, JobSpec, SecretRef, Volume, check_count

if TYPE_CHECKING:
    from .handle import Job
    from .status import Plan

#: what the user's function returns, hence what ``job.result()`` gives back
R = TypeVar("R")


class JobBuilder(Generic[R]):
    """Collects job options; nothing is checked against a backend until submit()."""

    def __init__(self, fn: Callable[..., R] | None = None, *args: Any, **kwargs: Any):
        self._fields: dict[str, Any] = {"fn": fn, "args": args, "kwargs": kwargs}

    def _with(self, **changes: Any) -> "JobBuilder[R]":
        new = JobBuilder.__new__(JobBuilder)
        new._fields = {**self._fields, **changes}
        return new

    # ------------------------------------------------------------ frameworks
    def ddp(self, nodes: int = 1, gpus_per_node: int | None = None, *, gpus: int | None = None,
            procs_per_node: int | None = None) -> "JobBuilder[R]":
        """torch.distributed DDP: one rank per GPU. ``gpus`` = total (split over ``nodes``).

        CPU-only gangs: ``gpus_per_node=0, procs_per_node=N``.
        """
        return self._torch("ddp", nodes, gpus_per_node, gpus, procs_per_node)

    def fsdp(self, nodes: int = 1, gpus_per_node: int | None = None, *, gpus: int | None = None,
             procs_per_node: int | None = None) -> "JobBuilder[R]":
        """FSDP2: the same gang as ddp; shard with :func:`gpujobs.fsdp.shard`."""
        return self._torch("fsdp", nodes, gpus_per_node, gpus, procs_per_node)

    def _torch(self, framework: str, nodes: int, gpus_per_node: int | None, gpus: int | None,
               procs_per_node: int | None) -> "JobBuilder[R]":
        check_count("nodes", nodes)
        if gpus is not None and gpus_per_node is not None:
            raise SpecError("gpus", "both gpus and gpus_per_node were given", "pass one of them")
        if gpus is not None:
            check_count("gpus", gpus)
            return self.with_shape(gang_shape(framework, gpus, nodes, procs_per_node))
        if gpus_per_node is None:
            gpus_per_node = 1
        check_count("gpus_per_node", gpus_per_node, minimum=0)
        if gpus_per_node == 0:
            if procs_per_node is None:
                raise SpecError("procs_per_node", "a CPU-only gang (gpus_per_node=0) needs a rank count",
                                "pass procs_per_node=N")
            check_count("procs_per_node", procs_per_node)
            return self._with(framework=framework, nodes=nodes, procs_per_node=procs_per_node,
                              gpus_per_proc=0)
        if procs_per_node not in (None, gpus_per_node):
            raise SpecError("procs_per_node", f"{framework} runs one rank per GPU "
                            f"({gpus_per_node} per node), not {procs_per_node}", "drop procs_per_node")
        return self._with(framework=framework, nodes=nodes, procs_per_node=gpus_per_node,
                          gpus_per_proc=1)

    def with_shape(self, shape: Shape) -> "JobBuilder[R]":
        """Framework and rank layout from :func:`gpujobs.shape.gang_shape` (GPUs -> ranks)."""
        return self._with(**shape.fields())

    def ray(self, workers: int = 1, gpus_per_worker: int = 1, cpus_per_worker: float = 1.0) -> "JobBuilder[R]":
        """A Ray cluster of ``workers`` workers; ``fn`` runs as the driver."""
        check_count("workers", workers)
        check_count("gpus_per_worker", gpus_per_worker, minimum=0)
        return self._with(framework="ray", nodes=workers, procs_per_node=1,
                          gpus_per_proc=gpus_per_worker, cpus_per_proc=cpus_per_worker)

    def mpi(self, ranks: int = 1, gpus_per_rank: int = 1, ranks_per_node: int | None = None) -> "JobBuilder[R]":
        """MPI (mpi4py): ``fn`` runs in every rank with COMM_WORLD ready."""
        check_count("ranks", ranks)
        check_count("gpus_per_rank", gpus_per_rank, minimum=0)
        per_node = ranks if ranks_per_node is None else check_count("ranks_per_node", ranks_per_node)
        if ranks % per_node:
            raise SpecError("ranks_per_node", f"{per_node} does not divide ranks={ranks}",
                            f"use a divisor of {ranks}, e.g. ranks_per_node="
                            f"{max(d for d in range(1, per_node + 1) if ranks % d == 0)}")
        return self._with(framework="mpi", nodes=ranks // per_node, procs_per_node=per_node,
                          gpus_per_proc=gpus_per_rank)

    # ------------------------------------------------------------- placement
    def queue(self, name: str) -> "JobBuilder[R]":
        return self._with(queue=name)

    def priority(self, name: str) -> "JobBuilder[R]":
        return self._with(priority=name)

    def image(self, image: str) -> "JobBuilder[R]":
        return self._with(image=image)

    def name(self, name: str) -> "JobBuilder[R]":
        return self._with(name=name)

    def env(self, **variables: str) -> "JobBuilder[R]":
        merged = dict(self._fields.get("env", ()))
        merged.update(variables)
        return self._with(env=tuple(merged.items()))

    def secret_env(self, **refs: tuple[str, str]) -> "JobBuilder[R]":
        """Environment from Secrets, by reference only: ``.secret_env(TOKEN=("hf", "token"))``."""
        merged = dict(self._fields.get("secret_env", ()))
        for k, ref in refs.items():
            if not (isinstance(ref, tuple) and len(ref) == 2):
                raise SpecError(f"secret_env[{k}]", f"expected (secret, key), got {ref!r}",
                                f"use .secret_env({k}=('secret-name', 'key'))")
            merged[k] = SecretRef(*ref)
        return self._with(secret_env=tuple(merged.items()))

    def resources(self, cpus_per_proc: float | None = None, memory: str | None = None,
                  gpu_resource: str | None = None) -> "JobBuilder[R]":
        changes: dict[str, Any] = {}
        if cpus_per_proc is not None:
            changes["cpus_per_proc"] = cpus_per_proc
        if memory is not None:
            changes["memory_per_proc"] = memory
        if gpu_resource is not None:
            changes["gpu_resource"] = gpu_resource
        return self._with(**changes)

    def mig(self, profile: str) -> "JobBuilder[R]":
        """Request a MIG slice per rank, e.g. ``.mig("1g.10gb")`` → ``nvidia.com/mig-1g.10gb``."""
        return self._with(gpu_resource=f"nvidia.com/mig-{profile}")

    def on(self, backend: str, **options: Any) -> "JobBuilder[R]":
        """Choose the backend ("local", "kubernetes"); options: namespace=, kind=, volcano=."""
        return self._with(backend=backend, **options)

    def kubernetes(self, *, namespace: str | None = None, kind: str | None = None,
                   volcano: str | None = None, volcano_queue: str | None = None) -> "JobBuilder[R]":
        opts = {k: v for k, v in dict(namespace=namespace, kind=kind, volcano=volcano,
                                       volcano_queue=volcano_queue).items() if v is not None}
        return self._with(backend="kubernetes", **opts)

    def topology(self, required: str | None = None, preferred: str | None = None) -> "JobBuilder[R]":
        """Keep the gang in one topology domain (a node label such as a rack or block)."""
        return self._with(topology_required=required, topology_preferred=preferred)

    def node_selector(self, **labels: str) -> "JobBuilder[R]":
        return self._with(node_selector=tuple({**dict(self._fields.get("node_selector", ())),
                                               **labels}.items()))

    def tolerations(self, *tolerations: Mapping[str, Any]) -> "JobBuilder[R]":
        return self._with(tolerations=tuple(tolerations))

    def volume(self, claim: str, mount_path: str = "/mnt/data") -> "JobBuilder[R]":
        return self._with(volume=Volume(claim, mount_path))

    def return_all(self, value: bool = True) -> "JobBuilder[Any]":
        """``result()`` gives every rank's value, a list by rank (so the result type is no longer R)."""
        return self._with(return_all=value)

    def options(self, **fields: Any) -> "JobBuilder[R]":
        """Set any JobSpec field directly (e.g. grace_period_s=60, max_payload_bytes=…)."""
        known = {f.name for f in dataclasses.fields(JobSpec)} | set(PLACEMENT_FIELDS)
        for k in fields:
            if k not in known or k.startswith("_"):
                raise SpecError(k, "is not a job option",
                                f"use one of {', '.join(sorted(x for x in known if not x.startswith('_')))}")
        return self._with(**fields)

    # ---------------------------------------------------------------- output
    def spec(self) -> JobSpec:
        spec = JobSpec(**self._fields)
        if spec.kind is not None:
            # a kind is the Kubernetes backend's (its registry: kinds/); refused here, whatever the
            # backend, as when the spec checked it
            from .backends.kubernetes import check_kind
            check_kind(spec.framework, spec.kind)
        return spec

    def render(self, kind: str | None = None) -> list[dict]:
        """The exact Kubernetes objects submit would create (no cluster needed)."""
        from .backends import renderer
        return renderer().render(self.spec(), kind=kind)

    def plan(self) -> "Plan":
        """What :meth:`submit` would do now, without submitting: a :class:`gpujobs.Plan`
        (``admit_now``, ``position``, ``preempts``, ``expected_start``, ``reason``)."""
        from .backends import get_backend
        from .backends.base import Plans
        spec = self.spec()
        backend = get_backend(spec.backend)
        if not isinstance(backend, Plans):
            raise SpecError("backend", f"the {backend.name} backend cannot "
                            "plan a job yet", Fix.set("backend", "local", "use {} for a plan, or submit and read "
                            "job.status().reason"))
        return backend.plan(spec)

    def max_runtime(self, seconds: float) -> "JobBuilder[R]":
        """Declared run-time limit (like sbatch --time); forecasts use it as an upper bound
        of the job's end (Kubernetes: activeDeadlineSeconds)."""
        return self._with(max_runtime_s=seconds)

    def submit(self) -> "Job[R]":
        from .backends import get_backend
        from .handle import Job
        spec = self.spec()
        backend = get_backend(spec.backend)
        job_id = backend.submit(spec)
        return Job(job_id, backend, spec=spec)


def job(fn: Callable[..., R] | None = None, *args: Any, **kwargs: Any) -> JobBuilder[R]:
    """Start describing a job that runs ``fn(*args, **kwargs)`` in every rank.

    The call is checked against ``fn``'s signature here, as :func:`submit` does."""
    if fn is not None:
        check_call(fn, args, kwargs, _SUBMIT_OPTIONS, builder=True)
    return JobBuilder(fn, *args, **kwargs)


_SUBMIT_OPTIONS = ("gpus", "framework", "nodes", "queue", "priority", "image", "name", "backend", "env",
                   "volume")
#: builder-only options people also type into submit(...)
_BUILDER_HINTS = {"gpus_per_node": "gpujobs.job(fn).ddp(gpus_per_node=N)",
                  "procs_per_node": "gpujobs.job(fn).ddp(gpus_per_node=0, procs_per_node=N)",
                  "ranks": "gpujobs.job(fn).mpi(ranks=N)", "workers": "gpujobs.job(fn).ray(workers=N)"}
#: where each submit option goes in the fluent builder (gpujobs.job(fn, ...) takes only fn's arguments)
_OPTION_METHODS = {"gpus": ".ddp(gpus={v})", "nodes": ".ddp(nodes={v})",
                   "framework": ".mpi(...) / .ray(...) / .fsdp(...)", "queue": ".queue({v})",
                   "priority": ".priority({v})", "image": ".image({v})", "name": ".name({v})",
                   "backend": ".on({v})", "env": ".env(**{v})"}


def _fn_name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


def _kw_text(kwargs: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in kwargs.items())


def check_call(fn: Callable[..., Any], args: tuple, kwargs: Mapping[str, Any],
               options: tuple[str, ...] = (), builder: bool = False) -> None:
    """Refuse a call ``fn(*args, **kwargs)`` that cannot bind to ``fn``'s signature, or a keyword
    that looks like a misspelt submit option (``gpu=2`` for ``gpus=2``), before anything runs.

    ``builder``: the call is ``gpujobs.job(fn, ...)``, where options are builder methods."""
    import difflib
    import inspect
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # builtins and C callables without a signature
        return
    named = {n for n, p in sig.parameters.items()
             if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    name = _fn_name(fn)
    for k in kwargs:
        if k in named:
            continue
        close = difflib.get_close_matches(k, [*options, *_BUILDER_HINTS] if options else [],
                                          n=1, cutoff=0.75)
        takes_kw = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
        if close and builder:
            opt = close[0]
            if takes_kw:  # fn takes **kwargs: the keyword is passed on, as asked
                continue
            method = (_BUILDER_HINTS[opt].removeprefix("gpujobs.job(fn)") if opt in _BUILDER_HINTS
                      else _OPTION_METHODS[opt].format(v=repr(kwargs[k])))
            raise SpecError(k, ("is a submit option" if k == opt else
                                f"is not an argument of {name}() (did you mean the option {opt}=?)")
                            + f"; gpujobs.job({name}, ...) takes only {name}'s own arguments",
                            f"use gpujobs.job({name}){method}.submit()")
        if close:
            opt = close[0]
            how = (f"use {_BUILDER_HINTS[opt]}" if opt in _BUILDER_HINTS else
                   f"write {opt}={kwargs[k]!r}")
            raise SpecError(k, f"is not a submit option (did you mean {opt}=?); as written it "
                            f"would be passed to {name}() as a keyword argument"
                            + ("" if takes_kw else ", which it does not accept"),
                            how + (f"; to pass {k}= to {name} itself use gpujobs.job({name}, "
                                   f"{k}={kwargs[k]!r}).submit()" if takes_kw else ""))
    try:
        sig.bind(*args, **kwargs)
    except TypeError as exc:
        params = ", ".join(str(p) for p in sig.parameters.values()) or "no arguments"
        raise SpecError("args", f"{name}() cannot be called with ({', '.join(map(repr, args))}"
                        f"{', ' if args and kwargs else ''}{_kw_text(kwargs)}): {exc}",
                        f"{name} takes ({params}); pass arguments that match it"
                        + (f" (submit options are {', '.join(f'{o}=' for o in options)})"
                           if options and not builder else "")) from None


def submit(fn: Callable[..., R], *args: Any, gpus: int = 1, nodes: int = 1,
           framework: str = "ddp", queue: str | None = None, priority: str | None = None,
           image: str | None = None, name: str | None = None, backend: str | None = None,
           env: Mapping[str, str] | None = None, volume: str | None = None,
           **kwargs: Any) -> "Job[R]":
    """Run ``fn(*args, **kwargs)`` as a gang of ``gpus`` ranks; returns a :class:`Job`.
    ``volume``: ``"CLAIM[:PATH]"``, a PersistentVolumeClaim for every rank (Kubernetes), where
    ``ctx.checkpoint_dir`` then lives."""
    check_count("gpus", gpus, fix=Fix.set("gpus", "N", "pass {} with N >= 1 (for CPU-only gangs use "
                                          "gpujobs.job(fn).ddp(gpus_per_node=0, procs_per_node=N))"))
    check_count("nodes", nodes)
    check_call(fn, args, kwargs, _SUBMIT_OPTIONS)
    b = JobBuilder(fn, *args, **kwargs).with_shape(gang_shape(framework, gpus, nodes))
    if queue is not None:
        b = b.queue(queue)
    if priority is not None:
        b = b.priority(priority)
    if image is not None:
        b = b.image(image)
    if name is not None:
        b = b.name(name)
    if backend is not None:
        b = b.on(backend)
    if env:
        b = b.env(**env)
    if volume is not None:
        v = Volume.parse(volume, "volume")
        b = b.volume(v.claim, v.mount_path)
    return b.submit()
