"""The Kind protocol: everything gpujobs knows about one Kubernetes job kind, in one object.

A kind module (one per kind, beside this one) defines a :class:`Kind` and the registry in
``kinds/__init__.py`` lists it; render, pod sets, status, hints, RBAC and the CLI loop over the
registry, so a kind's name is written in its own module and nowhere else in the package
(docs/adding-a-kind.md). Also here: what those modules share and that must not import the
registry (pod sets, the job's own state).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from ....quantity import parse_quantity
from ....spec import JobSpec
from ..naming import ANN_GANG

if TYPE_CHECKING:
    from ....status import Progress
    from ..render.podspec import RenderCtx

JOB_VERBS = ("create", "get", "list", "watch", "delete")
"""What gpujobs does with a job object: submit, the adopt/rollback reads, the watch, cancel."""
PHASES = frozenset({"succeeded", "failed", "running", "starting", "suspended", None})
"""The phases a kind's ``state`` may give (None: the object says nothing yet)."""
RankEnvNames = tuple[list[str], list[str], list[str]]


@dataclass(frozen=True)
class KindState:
    """A job object's own status, reduced (the status mapping adds Kueue's and the pods')."""
    phase: str | None  # succeeded | failed | running | starting | suspended | None (unknown)
    reason: str = ""
    message: str = ""
    ready: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    restarts: int = 0


@dataclass(frozen=True)
class PodSet:
    name: str
    count: int
    template: dict          # PodTemplateSpec (for a template-less kind: synthesised from its spec)
    requests: dict[str, Decimal]  # per pod, parsed (requests, falling back to limits like the apiserver)


@runtime_checkable
class Kind(Protocol):
    """One Kubernetes job kind. ``name`` is gpujobs' name for it (``kind=``, the submit record);
    ``api_kind`` the object's ``.kind``."""
    # read-only: a kind module sets them as class attributes (KindBase)
    @property
    def name(self) -> str: ...

    @property
    def group(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def plural(self) -> str: ...

    @property
    def api_kind(self) -> str: ...

    @property
    def verbs(self) -> tuple[str, ...]: ...

    @property
    def frameworks(self) -> tuple[str, ...]:
        """The frameworks (ddp, fsdp, mpi, ray) a job of this kind can run."""
        ...

    @property
    def default_for(self) -> tuple[str, ...]:
        """The frameworks that render as this kind when the spec names none."""
        ...

    @property
    def kueue_integration(self) -> str | None:
        """Kueue's integration name (its Configuration's integrations.frameworks), None: not queued by
        Kueue (then no queue labels are rendered)."""
        ...

    @property
    def volcano_mode(self) -> str | None:
        """The ``volcano=`` mode that renders as this kind (None: an operator's kind, which takes
        volcano='none' or 'gang')."""
        ...

    @property
    def own_deadline(self) -> bool:
        """Whether its operator enforces the rendered activeDeadlineSeconds."""
        ...

    @property
    def rank_env(self) -> RankEnvNames:
        """Where its operator puts a pod's node rank, master address and port (bootstrap.json)."""
        ...

    @property
    def phases(self) -> frozenset[str | None]:
        """Every phase ``state`` can give; a test drives each."""
        ...

    @property
    def name_rule(self) -> str: ...

    @property
    def wraps(self) -> Kind | None:
        """The kind whose object this one's controller creates (its CRD must be served too)."""
        ...

    @property
    def mode_fix(self) -> str: ...

    @property
    def mode_mismatch(self) -> tuple[str, str]: ...

    @property
    def api_version(self) -> str: ...

    @property
    def crd_name(self) -> str: ...

    def check(self, spec: JobSpec) -> None:
        """SpecError for what this kind cannot run (nothing created yet)."""

    def render(self, ctx: "RenderCtx", meta: dict, opts: Any) -> dict:
        """The job object (``opts``: the backend's RenderOptions)."""

    def gang_pods(self, spec: JobSpec) -> int:
        """Pods that must all run for ``spec`` rendered as this kind to make progress."""

    def companions(self, ctx: "RenderCtx", job: dict) -> list[dict]:
        """Objects the job needs beside it (a headless Service), created after it and owned by it."""

    def pod_sets(self, job: dict) -> list[PodSet]:
        """The object's pod sets as Kueue derives them."""

    def gang_size(self, job: dict) -> int:
        """Pods the object declares (when gpujobs' annotation is missing)."""

    def state(self, job: dict) -> KindState:
        """The object's own status."""

    def progress(self, job: dict) -> "Progress | None":
        """The progress its operator reports in the object's status (None: none)."""

    def gang_hint(self, job: dict, podgroup: dict | None, pods: list[dict], now: float | None) -> str:
        """Why its gang is not placed as it should be ('' when nothing to say)."""

    def workers_hint(self, job: dict, pods: list[dict]) -> str:
        """Why it waits for its workers ('' when nothing to say)."""


class KindBase:
    """Defaults for a Kind; a kind module subclasses it and sets the class attributes."""
    name: ClassVar[str]
    group: ClassVar[str]
    version: ClassVar[str]
    plural: ClassVar[str]
    api_kind: ClassVar[str]
    verbs: ClassVar[tuple[str, ...]] = JOB_VERBS
    frameworks: ClassVar[tuple[str, ...]]
    default_for: ClassVar[tuple[str, ...]] = ()
    kueue_integration: ClassVar[str | None] = None
    volcano_mode: ClassVar[str | None] = None
    own_deadline: ClassVar[bool] = True
    rank_env: ClassVar[RankEnvNames] = ([], [], [])
    phases: ClassVar[frozenset[str | None]] = PHASES
    wraps: ClassVar["Kind | None"] = None
    name_rule: ClassVar[str] = ""
    """Its CRD's rule on object names, if any (named when a job name breaks it)."""
    mode_fix: ClassVar[str] = "use volcano='none' or 'gang'"
    """The fix when the only kind of a framework is asked for with another kind or mode."""
    mode_mismatch: ClassVar[tuple[str, str]] = ("", "")
    """(message, fix) when a ``volcano_mode`` kind is asked for with another ``kind=`` ({kind})."""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{self.group}"

    def __repr__(self) -> str:
        return f"<kind {self.name}>"

    def check(self, spec: JobSpec) -> None:
        return None

    def gang_pods(self, spec: JobSpec) -> int:
        return spec.nodes

    def companions(self, ctx: "RenderCtx", job: dict) -> list[dict]:
        return []

    def progress(self, job: dict) -> "Progress | None":
        return None

    def gang_hint(self, job: dict, podgroup: dict | None, pods: list[dict], now: float | None) -> str:
        return ""

    def workers_hint(self, job: dict, pods: list[dict]) -> str:
        return ""


# ------------------------------------------------------------------ shared by the kinds
def container_requests(containers: list[dict]) -> dict[str, Decimal]:
    """Per-pod requests summed over containers (limits where no request, like the apiserver).

    Each quantity is parsed once, here; the amounts are exact Decimals.
    """
    total: dict[str, Decimal] = {}
    for i, c in enumerate(containers):
        res = c.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        for k, v in merged.items():
            field = f"containers[{i}] ({c.get('name', '?')}) resources {k}"
            total[k] = total.get(k, Decimal(0)) + parse_quantity(v, field)
    return total


def pod_set(name: str, count: int, template: dict) -> PodSet:
    return PodSet(name, int(count), template,
                  container_requests(template.get("spec", {}).get("containers", [])))


def path_get(obj: Any, path: str) -> Any:
    """``obj`` at a dotted path with list indexes (``template.spec.tasks[0].template``)."""
    for part in path.split("."):
        m = re.fullmatch(r"([A-Za-z]+)(?:\[(\d+)\])?", part)
        if not m:
            raise KeyError(path)
        obj = obj[m.group(1)]
        if m.group(2) is not None:
            obj = obj[int(m.group(2))]
    return obj


def annotated_gang(job: dict) -> int | None:
    """gpujobs' gang-size annotation on a job object (None when missing)."""
    ann = (job.get("metadata") or {}).get("annotations") or {}
    return int(ann[ANN_GANG]) if ann.get(ANN_GANG) else None


def replicas_sum(specs: dict | None) -> int:
    """Sum of ``replicas`` (default 1) over an operator's replica specs."""
    return sum(int(r.get("replicas", 1)) for r in (specs or {}).values())
