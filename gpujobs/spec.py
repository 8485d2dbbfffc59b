"""JobSpec: the one typed, validated description of a job.

The builder, the ``%%gpujob`` magic, the CLI and the sbatch translator all end
here; every backend renders from it. Validation happens once, in
``__post_init__``, and raises :class:`~gpujobs.errors.SpecError` naming the
field and the fix, before anything is created.

Shape vocabulary (same for every framework)::

    nodes            pods / machines in the gang
    procs_per_node   processes (ranks) per node
    gpus_per_proc    GPUs each rank owns (0 = CPU-only rank)

    world_size = nodes * procs_per_node      total_gpus = world_size * gpus_per_proc

ddp/fsdp: one rank per GPU. mpi: ``ranks`` = world_size. ray: one worker per
"node" (a Ray worker pod / local worker slot) owning ``gpus_per_proc`` GPUs.
"""
from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from .config import default_backend_name
from .errors import Fix, SpecError
from .placement import FIELDS as PLACEMENT_FIELDS
from .placement import NAME_RE as _NAME_RE
from .placement import KubernetesPlacement, Volume, check_name, plain, slug
from .quantity import parse_bytes

FRAMEWORKS = ("ddp", "fsdp", "ray", "mpi")

DEFAULT_MAX_PAYLOAD_BYTES = 64 * 1024 * 1024
# An image reference as the kubelet parses it (else the pod fails later with InvalidImageName):
# the grammar of distribution/reference v0.5.0 (reference.go), and its normalize.go rule that the
# first component is a registry only when it has a '.' or ':' or is 'localhost'; names of at most
# 255 characters (NameTotalLengthMax).
_IMAGE_DOMAIN_RE = re.compile(r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*"
                              r"[a-zA-Z0-9])?)*|\[[0-9a-fA-F:.]+\])(?::[0-9]+)?")
_IMAGE_PATH_RE = re.compile(r"[a-z0-9]+(?:(?:[_.]|__|-+)[a-z0-9]+)*")
_IMAGE_TAG_RE = re.compile(r"[\w][\w.-]{0,127}")
_IMAGE_DIGEST_RE = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}")


def _image_suggestion(image: str) -> str:
    """``image`` without surrounding blanks and with its name (not its tag) in lowercase."""
    v = image.strip()
    rest, at, digest = v.partition("@")
    i = rest.rfind(":") if rest.rfind(":") > rest.rfind("/") else len(rest)
    return rest[:i].lower() + rest[i:] + at + digest


def image_problem(image: str) -> str | None:
    """Why ``image`` is not an image reference a kubelet can pull, or None when it is."""
    rest, at, digest = image.partition("@")
    if at and not _IMAGE_DIGEST_RE.fullmatch(digest):
        return f"its digest {digest!r} is not ALGORITHM:HEX (e.g. sha256:<64 hex digits>)"
    name, tag = rest, None
    if rest.rfind(":") > rest.rfind("/"):
        name, tag = rest[:rest.rfind(":")], rest[rest.rfind(":") + 1:]
    if tag is not None and not _IMAGE_TAG_RE.fullmatch(tag):
        return f"its tag {tag!r} is not 1-128 letters, digits, '_', '.', '-' (not starting with '.' or '-')"
    parts = name.split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        if not _IMAGE_DOMAIN_RE.fullmatch(parts[0]):
            return f"its registry {parts[0]!r} is not a host name[:port]"
        parts = parts[1:]
    bad = [p for p in parts if not _IMAGE_PATH_RE.fullmatch(p)]
    if bad:
        return (f"its name part {bad[0]!r} is not lowercase letters and digits separated by '.', '_', "
                "'__' or '-'")
    if len(name) > 255:
        return "its name is longer than 255 characters"
    return None
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_GPU_RESOURCE_RE = re.compile(r"^[a-z0-9.-]+/[a-z0-9.-]+$")


#: the longest run-time limit: Kueue's Workload ``spec.maximumExecutionTimeSeconds`` is an int32
#: (``format: int32, minimum: 1``, kueue@ff69552
#: config/components/crd/bases/kueue.x-k8s.io_workloads.yaml), and so is the
#: ``kueue.x-k8s.io/max-exec-time-seconds`` label it is read from
MAX_RUNTIME_S = 2**31 - 1
_RUNTIME_FIX = Fix.set("max_runtime_s", 3600, "e.g. {}, or leave it unset for no limit")


def check_count(field_name: str, value: Any, minimum: int = 1, fix: Fix | str | None = None) -> int:
    """Return ``value`` if it is an int >= minimum (bools refused), else raise SpecError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(field_name, f"must be an integer, got {type(value).__name__} {value!r}",
                        fix or Fix.set(field_name, max(minimum, 1), "pass a whole number such as {}"))
    if value < minimum:
        raise SpecError(field_name, f"must be >= {minimum}, got {value}",
                        fix or Fix.set(field_name, max(minimum, 1), "pass {} or more"))
    return value


@dataclass(frozen=True)
class SecretRef:
    """An environment variable filled from a Kubernetes Secret key (never a value)."""
    secret: str
    key: str


@dataclass(frozen=True)
class JobSpec:
    """Everything a backend needs to run a job. Frozen; build it with :func:`gpujobs.job`."""

    framework: str = "ddp"
    fn: Callable[..., Any] | None = field(default=None, compare=False, repr=False)
    args: tuple = field(default=(), compare=False, repr=False)
    kwargs: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    command: tuple[str, ...] | None = None
    """Run this program in every rank instead of ``fn`` (CLI scripts, sbatch bodies)."""
    nodes: int = 1
    procs_per_node: int = 1
    gpus_per_proc: int = 1
    cpus_per_proc: float = 1.0
    memory_per_proc: str | None = None
    gpu_resource: str = "nvidia.com/gpu"
    name: str | None = None
    queue: str = "default"
    priority: str | None = None
    image: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    secret_env: tuple[tuple[str, SecretRef], ...] = ()
    backend: str | None = None
    return_all: bool = False
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    grace_period_s: float = 30.0
    max_runtime_s: float | None = None
    working_dir: str | None = None
    """The ranks' working directory (None: the submitter's, on the local backend)."""
    kubernetes: KubernetesPlacement = KubernetesPlacement()
    """Where the pods go on Kubernetes (:mod:`gpujobs.placement`; the local backend ignores it).
    ``JobSpec(namespace=...)`` and the other placement keywords fill it; ``spec.namespace`` …
    read it."""
    _payload: bytes | None = field(default=None, compare=False, repr=False)

    # ------------------------------------------- the placement's fields, read-only
    @property
    def kind(self) -> str | None:
        return self.kubernetes.kind

    @property
    def namespace(self) -> str | None:
        return self.kubernetes.namespace

    @property
    def volcano(self) -> str:
        return self.kubernetes.volcano

    @property
    def volcano_queue(self) -> str | None:
        return self.kubernetes.volcano_queue

    @property
    def node_selector(self) -> tuple[tuple[str, str], ...]:
        return self.kubernetes.node_selector

    @property
    def tolerations(self) -> tuple[Mapping[str, Any], ...]:
        return self.kubernetes.tolerations

    @property
    def topology_required(self) -> str | None:
        return self.kubernetes.topology_required

    @property
    def topology_preferred(self) -> str | None:
        return self.kubernetes.topology_preferred

    @property
    def volume(self) -> Volume | None:
        return self.kubernetes.volume

    @property
    def shm_size(self) -> str | None:
        return self.kubernetes.shm_size

    @property
    def labels(self) -> tuple[tuple[str, str], ...]:
        return self.kubernetes.labels

    # ------------------------------------------------------------------ derived
    @property
    def world_size(self) -> int:
        return self.nodes * self.procs_per_node

    @property
    def total_gpus(self) -> int:
        return self.world_size * self.gpus_per_proc

    @property
    def gang_size(self) -> int:
        """Pods (Kubernetes) that must all be ready: one per node."""
        return self.nodes

    @property
    def display_name(self) -> str:
        if self.name:
            return self.name
        if self.fn is not None:
            return getattr(self.fn, "__name__", "job").replace("_", "-").lower().strip("-<>") or "job"
        if self.command:
            return re.sub(r"[^a-z0-9-]", "-", self.command[0].rsplit("/", 1)[-1].lower()).strip("-") or "job"
        return "job"

    def replace(self, **changes: Any) -> "JobSpec":
        """A copy with ``changes``, validated again."""
        if any(k in changes for k in ("fn", "args", "kwargs")):
            changes.setdefault("_payload", None)
        return dataclasses.replace(self, **changes)

    def payload(self) -> bytes:
        """The cloudpickled (fn, args, kwargs) the ranks run (validated at construction)."""
        assert self._payload is not None or self.fn is None
        return self._payload or b""

    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    # --------------------------------------------------------------- validation
    def __post_init__(self) -> None:
        if self.framework not in FRAMEWORKS:
            raise SpecError("framework", f"unknown framework {self.framework!r}",
                            f"use one of {', '.join(FRAMEWORKS)}")
        if self.fn is None and not self.command and not self._payload:
            raise SpecError("fn", "no function or command to run",
                            "pass a callable, e.g. gpujobs.submit(train, gpus=2)")
        if self.fn is not None and not callable(self.fn):
            raise SpecError("fn", f"{type(self.fn).__name__} object {self.fn!r:.60} is not callable",
                            "pass the function itself, e.g. submit(train), not submit(train())")
        if self.fn is not None and self.command:
            raise SpecError("command", "both a function and a command were given", "pass one of them")
        if self.command is not None and (not isinstance(self.command, tuple)
                                         or not all(isinstance(c, str) for c in self.command)):
            raise SpecError("command", "must be a tuple of strings", "e.g. ('python', 'train.py')")
        check_count("nodes", self.nodes)
        check_count("procs_per_node", self.procs_per_node)
        check_count("gpus_per_proc", self.gpus_per_proc, minimum=0)
        if isinstance(self.cpus_per_proc, bool) or not isinstance(self.cpus_per_proc, (int, float)) \
                or self.cpus_per_proc <= 0:
            raise SpecError("cpus_per_proc", f"must be a positive number, got {self.cpus_per_proc!r}",
                            "e.g. cpus_per_proc=4")
        if self.memory_per_proc is not None:
            parse_bytes(self.memory_per_proc, "memory", example="'16Gi' or '512Mi'")
        if not _GPU_RESOURCE_RE.match(self.gpu_resource):
            raise SpecError("gpu_resource", f"{self.gpu_resource!r} is not a resource name",
                            "use 'nvidia.com/gpu' or a MIG profile such as 'nvidia.com/mig-1g.10gb'")
        if self.name is not None and (not isinstance(self.name, str) or len(self.name) > 40
                                      or not _NAME_RE.match(self.name)):
            why = ("job names become Kubernetes object names (DNS-1123 labels: lower case), on "
                   "every backend, so a job keeps its name wherever it runs")
            suggestion = slug(str(self.name))
            raise SpecError("name", f"{self.name!r} is not a valid job name: {why}",
                            Fix.set("name", suggestion, "use {}, or at most 40 lowercase letters, digits "
                                    "and '-', starting and ending with a letter or digit") if suggestion else
                            "use at most 40 lowercase letters, digits and '-', starting and ending with a "
                            "letter or digit")
        if self.image is not None and (not isinstance(self.image, str)
                                       or (self.image and image_problem(self.image))):
            why = (image_problem(self.image) if isinstance(self.image, str) else None) or \
                f"an image is a string, not {type(self.image).__name__}"
            fixed = _image_suggestion(self.image) if isinstance(self.image, str) else ""
            raise SpecError("image", f"{self.image!r} is not an image reference: {why}",
                            Fix.set("image", fixed, "use {}") if fixed and not image_problem(fixed) else
                            "use registry/name:tag with the name in lowercase, e.g. "
                            "'pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime'")
        check_name("queue", self.queue)
        check_name("priority", self.priority)
        for k, v in self.env:
            if not isinstance(k, str) or not _ENV_RE.match(k):
                raise SpecError("env", f"{k!r} is not a valid environment variable name",
                                "use letters, digits and '_', not starting with a digit")
            if not isinstance(v, str):
                raise SpecError(f"env[{k}]", f"value must be a string, got {type(v).__name__}",
                                Fix.set("env", f"{k}='{v}'", "pass str(value), e.g. {}"))
        for k, ref in self.secret_env:
            if not _ENV_RE.match(k) or not isinstance(ref, SecretRef):
                raise SpecError("secret_env", f"{k!r} must map to SecretRef(secret, key)",
                                "use .secret_env(KEY=('secret-name', 'key'))")
        if not isinstance(self.kubernetes, KubernetesPlacement):
            raise SpecError("kubernetes", f"{self.kubernetes!r} is not a KubernetesPlacement",
                            "set the placement through the builder, e.g. .kubernetes(namespace='ml')")
        check_count("max_payload_bytes", self.max_payload_bytes)
        self._check_runtime()  # [hardening]
        if (isinstance(self.grace_period_s, bool) or not isinstance(self.grace_period_s, (int, float))
                or not math.isfinite(self.grace_period_s) or self.grace_period_s < 0):
            raise SpecError("grace_period_s", f"must be a finite number of seconds >= 0, got "
                            f"{self.grace_period_s!r}", "e.g. grace_period_s=30")
        if self.fn is not None and self._payload is None:
            from .payload import pack_call  # late import: payload imports cloudpickle
            # the local backend's ranks share this machine's PYTHONPATH (they import from it)
            local = (self.backend or default_backend_name()) == "local"
            object.__setattr__(self, "_payload",
                               pack_call(self.fn, tuple(self.args), dict(self.kwargs),
                                         limit=self.max_payload_bytes, shares_pythonpath=local))

    def _check_runtime(self) -> None:
        """The runtime limit: refused here, not by the cluster (the placement checks itself)."""
        if self.max_runtime_s is not None and (isinstance(self.max_runtime_s, bool) or not isinstance(
                self.max_runtime_s, (int, float)) or not math.isfinite(self.max_runtime_s)
                or self.max_runtime_s <= 0):
            raise SpecError("max_runtime_s", f"must be a positive, finite number of seconds, got "
                            f"{self.max_runtime_s!r}", _RUNTIME_FIX)
        if self.max_runtime_s is not None and self.max_runtime_s > MAX_RUNTIME_S:
            raise SpecError("max_runtime_s", f"{self.max_runtime_s:g} s is more than Kueue's limit of "
                            f"{MAX_RUNTIME_S} s (about 68 years)", _RUNTIME_FIX)

    # -------------------------------------------------------------- (de)serialise
    def to_dict(self) -> dict[str, Any]:
        """Plain data (no fn/args): stored by the local agent, shown by ``render``."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name in ("fn", "args", "kwargs", "_payload"):
                continue
            v = getattr(self, f.name)
            if isinstance(v, KubernetesPlacement):
                out.update(v.to_dict())  # flat, as before the placement was one field
                continue
            if f.name == "secret_env":
                v = [[k, r.secret, r.key] for k, r in v]
            out[f.name] = plain(v)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], payload: bytes | None = None) -> "JobSpec":
        """Inverse of :meth:`to_dict`; ``payload`` is the packed call, if any."""
        d = {k: v for k, v in data.items() if k not in PLACEMENT_FIELDS}
        if any(k in data for k in PLACEMENT_FIELDS):
            d["kubernetes"] = KubernetesPlacement.from_dict(data)
        if "env" in d:
            d["env"] = tuple(tuple(x) for x in d["env"])
        if "secret_env" in d:
            d["secret_env"] = tuple((k, SecretRef(s, key)) for k, s, key in d["secret_env"])
        if d.get("command") is not None:
            d["command"] = tuple(d["command"])
        # The packed call stays packed: the agent and renderers never unpickle user code.
        return cls(_payload=payload or None, **d)

    @classmethod
    def stored(cls, data: Mapping[str, Any]) -> "JobSpec":
        """The spec of a job whose sealed call is kept elsewhere (the local agent's job folder):
        :meth:`from_dict` (so validated, SpecError naming the field), no call attached."""
        return cls.from_dict(data, _STORED_CALL)

    @property
    def call_stored_elsewhere(self) -> bool:
        """Built by :meth:`stored`: :meth:`payload` is not the call."""
        return self._payload is _STORED_CALL


_STORED_CALL = b"<the sealed call is in the job folder>"


_DATACLASS_INIT = JobSpec.__init__


def _init(self: JobSpec, *args: Any, **kwargs: Any) -> None:
    """JobSpec's constructor: the placement's fields may be given one by one (``kind=``,
    ``namespace=`` … as the builder, ``dataclasses.replace`` and callers do); they go into
    ``kubernetes`` (over the one given, if any)."""
    flat = {k: kwargs.pop(k) for k in PLACEMENT_FIELDS if k in kwargs}
    if flat:
        base = kwargs.get("kubernetes", KubernetesPlacement())
        if not isinstance(base, KubernetesPlacement):
            raise SpecError("kubernetes", f"{base!r} is not a KubernetesPlacement",
                            "pass the placement's fields one by one, e.g. namespace='ml'")
        kwargs["kubernetes"] = dataclasses.replace(base, **flat)
    _DATACLASS_INIT(self, *args, **kwargs)


JobSpec.__init__ = _init  # type: ignore[method-assign]
