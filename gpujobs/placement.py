"""Where a job's pods go on Kubernetes: :class:`KubernetesPlacement`, one typed part of a JobSpec.

The kubernetes backend is the one reader of these fields (they become the job's kind, namespace,
Volcano mode and queue, node selector, tolerations, topology requests, volume, /dev/shm size and
labels); the local backend ignores them. They are set through the builder (``.kubernetes(...)``,
``.on(...)``, ``.topology(...)``, ``.node_selector(...)``, ``.tolerations(...)``, ``.volume(...)``)
or submit's ``volume=``, and read as ``spec.kubernetes.<field>`` (``spec.<field>`` reads the same
value). Validated once, when made; the kind is checked against the framework by the Kubernetes
backend's kinds (the builder asks them when a kind is given, and render does).

This module is below :mod:`gpujobs.spec` (the spec holds a placement), so it imports no backend.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Mapping

from .errors import Fix, SpecError
from .quantity import parse_bytes

NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
"""A Kubernetes name (DNS-1123 label): lowercase letters, digits and '-'."""

VOLCANO_MODES = ("none", "gang", "job", "appwrapper")
"""none: Kueue only; gang: Kueue admits, Volcano gang-places the operator's pods;
job: a bare Volcano Job (Volcano queue); appwrapper: a Volcano Job in a CodeFlare wrapper (Kueue)."""


def slug(text: str, limit: int = 40) -> str:
    """``text`` as a Kubernetes name part: lowercase, runs of other characters as '-', at most
    ``limit`` characters ('' when nothing usable is left)."""
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:limit].strip("-")


def check_name(field_name: str, value: Any) -> None:
    """SpecError unless ``value`` (when given) is a Kubernetes name of at most 63 characters
    (queue, priority, namespace, Volcano queue)."""
    if value is None or (isinstance(value, str) and NAME_RE.match(value) and len(value) <= 63):
        return
    suggestion = slug(value, 63) if isinstance(value, str) else ""
    fix: Fix | str
    if field_name == "priority" and not isinstance(value, str):
        fix = "name a priority class, e.g. 'high' (the class gives the number)"
    else:
        fix = (Fix.set(field_name, suggestion, "use {} (lowercase letters, digits and '-', a "
                       "Kubernetes name)") if suggestion else
               "use lowercase letters, digits and '-' (a Kubernetes name)")
    raise SpecError(field_name, f"{value!r} is not a valid {field_name} name", fix)


def plain(value: Any) -> Any:
    """A tuple field as JSON holds it (a list of lists / dicts); any other value unchanged (the
    one conversion of JobSpec.to_dict and KubernetesPlacement.to_dict)."""
    if not isinstance(value, tuple):
        return value
    return [list(x) if isinstance(x, tuple) else (dict(x) if isinstance(x, Mapping) else x) for x in value]


@dataclass(frozen=True)
class Volume:
    """A PersistentVolumeClaim mounted into every rank (data, checkpoints)."""
    claim: str
    mount_path: str = "/mnt/data"

    @classmethod
    def parse(cls, text: str, field: str = "volume") -> "Volume":
        """``CLAIM[:PATH]`` (the CLI's ``--volume``, the magic's, ``checkpoint_volume`` in config)."""
        claim, colon, path = str(text).partition(":")
        if not claim or (colon and not path):
            raise SpecError(field, f"{text!r} is not CLAIM[:PATH]",
                            Fix.set("volume", "ckpt", "name a PersistentVolumeClaim, e.g. {}") if field == "volume"
                            else f"name a PersistentVolumeClaim, e.g. {field} = \"ckpt\" or \"ckpt:/mnt/ckpt\"")
        return cls(claim, path or cls.mount_path)


@dataclass(frozen=True)
class KubernetesPlacement:
    """The Kubernetes-only part of a JobSpec (see the module doc). Frozen; validated when made."""

    kind: str | None = None
    """The kind to render as (None: the framework's default); checked against the framework by
    the Kubernetes backend's kinds (gpujobs.backends.kubernetes.kinds)."""
    namespace: str | None = None
    volcano: str = "none"
    volcano_queue: str | None = None
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Mapping[str, Any], ...] = ()
    topology_required: str | None = None
    topology_preferred: str | None = None
    volume: Volume | None = None
    shm_size: str | None = "8Gi"
    labels: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.shm_size is not None:
            parse_bytes(self.shm_size, "shm_size", example="'8Gi'")
        check_name("namespace", self.namespace)
        check_name("volcano_queue", self.volcano_queue)
        if self.volcano not in VOLCANO_MODES:
            raise SpecError("volcano", f"unknown mode {self.volcano!r}",
                            f"use one of {', '.join(VOLCANO_MODES)}")
        for k, v in self.node_selector:
            if not isinstance(k, str) or not isinstance(v, str):
                raise SpecError(f"node_selector[{k}]", f"label values must be strings, got {v!r}",
                                f"pass .node_selector(**{{{k!r}: '{v}'}})")
        for t in self.tolerations:
            if not isinstance(t, Mapping):
                raise SpecError("tolerations", f"{t!r} is not a toleration mapping",
                                "pass dicts such as {'key': 'nvidia.com/gpu', 'operator': 'Exists', "
                                "'effect': 'NoSchedule'}")
        if self.volume is not None:
            if not NAME_RE.match(str(self.volume.claim)) or len(str(self.volume.claim)) > 253:
                raise SpecError("volume", f"{self.volume.claim!r} is not a valid PersistentVolumeClaim "
                                "name", "use the claim's name: lowercase letters, digits and '-'")
            if not str(self.volume.mount_path).startswith("/"):
                raise SpecError("volume", f"mount path {self.volume.mount_path!r} is not absolute",
                                "use an absolute path such as '/mnt/data'")

    def to_dict(self) -> dict[str, Any]:
        """Plain data, field by field (the spec's :meth:`~gpujobs.spec.JobSpec.to_dict` keys)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Volume):
                v = dataclasses.asdict(v)
            out[f.name] = plain(v)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "KubernetesPlacement":
        """Inverse of :meth:`to_dict` (keys of other fields are left to the caller)."""
        d = {k: data[k] for k in FIELDS if k in data}
        for key in ("node_selector", "labels"):
            if key in d:
                d[key] = tuple(tuple(x) for x in d[key])
        if "tolerations" in d:
            d["tolerations"] = tuple(d["tolerations"])
        if d.get("volume"):
            d["volume"] = Volume(**d["volume"])
        return cls(**d)


#: the placement's field names (each is also a keyword of JobSpec and of builder.options)
FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(KubernetesPlacement))
