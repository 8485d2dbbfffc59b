"""The job kinds gpujobs renders: one module per kind, each a :class:`~.base.Kind`, and this
registry, which everything else loops over (docs/adding-a-kind.md).

Modules: ``base`` (the Kind protocol, KindBase, what the kinds share), ``trainjob``,
``pytorchjob``, ``mpijob`` (``kubeflow_v1``: the operator conditions those two share), ``rayjob``,
``volcanojob``, ``appwrapper``, ``batchjob`` (a plain batch/v1 Job; docs/adding-a-kind.md's worked
example).

How a spec picks its kind: an explicit ``kind=``, else the kind whose ``volcano_mode`` is the
spec's ``volcano=`` mode (a bare Volcano Job, or one inside CodeFlare's wrapper so a Kueue queue
can hold it), else the kind that is the default for the framework.
"""
from __future__ import annotations

from ....errors import Fix, SpecError
from ....spec import JobSpec
from . import appwrapper, batchjob, mpijob, pytorchjob, rayjob, trainjob, volcanojob
from .base import JOB_VERBS, Kind, KindState, PodSet, annotated_gang

__all__ = ["KINDS", "Kind", "KindState", "PodSet", "DEFAULT_KIND", "KUEUE_KINDS", "JOB_VERBS", "check_kind",
           "for_object", "gang_size_of", "kind_state", "pod_sets", "resolve_kind"]

KINDS: dict[str, Kind] = {k.name: k for k in (trainjob.KIND, pytorchjob.KIND, mpijob.KIND, rayjob.KIND,
                                              volcanojob.KIND, appwrapper.KIND, batchjob.KIND)}
"""Every kind, by gpujobs' name, in the order help texts and errors list them."""
DEFAULT_KIND: dict[str, str] = {fw: k.name for k in KINDS.values() for fw in k.default_for}
KUEUE_KINDS = frozenset(k.name for k in KINDS.values() if k.kueue_integration)
_MODE_KINDS: dict[str, Kind] = {k.volcano_mode: k for k in KINDS.values() if k.volcano_mode}


def for_object(job: dict) -> Kind | None:
    """The kind of a job object (by its ``kind`` and ``apiVersion`` group), None if not one of ours."""
    api_kind, api_version = job.get("kind"), job.get("apiVersion")
    found = [k for k in KINDS.values() if k.api_kind == api_kind]
    if api_version:
        found = [k for k in found if str(api_version).rpartition("/")[0] == k.group]
    return found[0] if found else None


def check_kind(framework: str, kind: str | None) -> None:
    """SpecError when ``kind`` is not a kind, or a ``framework`` job cannot render as it."""
    if kind is None:
        return
    if kind not in KINDS:
        raise SpecError("kind", f"unknown kind {kind!r}", f"use one of {', '.join(KINDS)}")
    if framework in KINDS[kind].frameworks:
        return
    allowed = [k.name for k in KINDS.values() if framework in k.frameworks]
    if len(allowed) == 1:
        raise SpecError("kind", f"a {framework} job renders as {allowed[0]}, not {kind}",
                        Fix.set("kind", allowed[0], "use {}, or drop {=kind}"))
    names = [repr(k) for k in allowed]
    article = "an" if framework == "mpi" else "a"  # an em-pee-eye job
    raise SpecError("kind", f"{article} {framework} job cannot render as {kind}",
                    f"use {', '.join(names[:-1])} or {names[-1]}")


def resolve_kind(spec: JobSpec, kind: str | None = None) -> str:
    """The kind to render ``spec`` as (explicit ``kind``, then spec.kind, then the defaults)."""
    kind = kind or spec.kind
    if kind is not None and kind not in KINDS:
        raise SpecError("kind", f"unknown kind {kind!r}", f"use one of {', '.join(KINDS)}")
    fw, mode = spec.framework, spec.volcano
    allowed = [k for k in KINDS.values() if fw in k.frameworks]
    if len(allowed) == 1 and not allowed[0].volcano_mode:  # the framework has one kind (ray)
        only = allowed[0]
        if mode in _MODE_KINDS or kind not in (None, only.name):
            raise SpecError("volcano" if kind in (None, only.name) else "kind",
                            f"a {fw} job renders only as {only.name} (volcano={mode!r}, kind={kind!r})",
                            only.mode_fix)
        return only.name
    check_kind(fw, kind)
    by_mode = _MODE_KINDS.get(mode)
    if by_mode is not None:
        if kind not in (None, by_mode.name):
            text, fix = by_mode.mode_mismatch
            raise SpecError("kind", text.format(kind=kind), fix.format(kind=kind))
        return by_mode.name
    if mode == "gang" and kind in {k.name for k in _MODE_KINDS.values()}:
        raise SpecError("volcano", f"'gang' places an operator's pods with Volcano; a {kind} "
                        "is already a Volcano Job", "use volcano=" + " or ".join(repr(m) for m in _MODE_KINDS))
    return kind or DEFAULT_KIND[fw]


def gang_size_of(job: dict) -> int:
    """Pods that must all be up: gpujobs' annotation, else the replicas the kind declares."""
    gang = annotated_gang(job)
    if gang is not None:
        return gang
    kind = for_object(job)
    return kind.gang_size(job) if kind is not None else 0


def kind_state(job: dict) -> KindState:
    """The job object's own status, by its kind (unknown phase for an object of no kind here)."""
    kind = for_object(job)
    return kind.state(job) if kind is not None else KindState(None)


def pod_sets(job: dict) -> list[PodSet]:
    """The pod sets of a rendered job object, as Kueue derives them per kind (kueue@ff69552
    pkg/controller/jobs/*: each integration's PodSets; snapshots in docs/kubernetes-kinds.md)."""
    kind = for_object(job)
    if kind is None:
        raise ValueError(f"not a job kind gpujobs renders: {job.get('apiVersion')}/{job.get('kind')}")
    return kind.pod_sets(job)
