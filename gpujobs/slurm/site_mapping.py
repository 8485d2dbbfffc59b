"""The site mapping file: Slurm names → Kueue queues, priority classes, GPU placement.

YAML, every section optional::

    partitions:            # partition -> LocalQueue (default: the same name)
      gpu: team-a
    qos:                   # QoS -> WorkloadPriorityClass (default: the same name)
      normal: medium
    gres:                  # GPU type in --gres/--gpus -> placement
      a100: {node_selector: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB}}
      h100: {flavor: h100}          # node labels of the flavor below
      a100-1g: {mig: 1g.10gb}       # -> resource nvidia.com/mig-1g.10gb
      l4: {resource: nvidia.com/gpu, tolerations: [{key: gpu, operator: Exists}]}
    constraints:           # --constraint feature -> node selector
      ib: {infiniband: "true"}
    flavors:               # ResourceFlavors (same shape as the admin table's `flavors`)
      h100: {nodeLabels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}}
    image: nvcr.io/nvidia/pytorch:24.08-py3   # default image for translated jobs

Without an entry, a Slurm MIG type such as ``1g.10gb`` becomes ``nvidia.com/mig-1g.10gb``;
another unmapped GPU type is kept out of the job with a warning (it may run on any GPU).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..errors import SpecError
from .source import load_yaml, read_source

MIG_RE = re.compile(r"^\d+g\.\d+gb$")
_SECTIONS = ("partitions", "qos", "gres", "constraints", "flavors", "image")


@dataclass(frozen=True)
class GpuPlacement:
    resource: str | None = None
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Mapping[str, Any], ...] = ()


@dataclass
class SiteMapping:
    partitions: dict[str, str] = field(default_factory=dict)
    qos: dict[str, str] = field(default_factory=dict)
    gres: dict[str, GpuPlacement] = field(default_factory=dict)
    constraints: dict[str, dict[str, str]] = field(default_factory=dict)
    image: str | None = None
    source: str = "mapping"

    def queue_for(self, partition: str) -> str:
        return self.partitions.get(partition, partition)

    def priority_for(self, qos: str) -> str:
        return self.qos.get(qos, qos)

    def gpu_placement(self, gpu_type: str) -> GpuPlacement | None:
        if gpu_type in self.gres:
            return self.gres[gpu_type]
        if MIG_RE.match(gpu_type):
            return GpuPlacement(resource=f"nvidia.com/mig-{gpu_type}")
        return None


def _str_map(where: str, value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise SpecError(where, f"must be a mapping of names, got {type(value).__name__}",
                        "write `name: value` pairs")
    return {k: str(v) for k, v in value.items()}


def load_mapping(source: str | Path | Mapping[str, Any] | SiteMapping | None) -> SiteMapping:
    """Read a mapping (path, YAML text, dict or SiteMapping); None gives the defaults."""
    if source is None:
        return SiteMapping()
    if isinstance(source, SiteMapping):
        return source
    name = "mapping"
    if isinstance(source, Mapping):
        data: Any = source
    else:
        name, text = read_source(source, "mapping")
        data = load_yaml(name, text) or {}
    if not isinstance(data, Mapping):
        raise SpecError(name, "must be a YAML mapping", f"use the sections {', '.join(_SECTIONS)}")
    unknown = sorted(set(data) - set(_SECTIONS))
    if unknown:
        raise SpecError(f"{name}: {unknown[0]}", "is not a mapping section",
                        f"use {', '.join(_SECTIONS)}")
    flavors = data.get("flavors") or {}
    if not isinstance(flavors, Mapping):
        raise SpecError(f"{name}: flavors", "must be a mapping", "write `flavor: {nodeLabels: {...}}`")
    m = SiteMapping(source=name)
    m.partitions = _str_map(f"{name}: partitions", data.get("partitions") or {})
    m.qos = _str_map(f"{name}: qos", data.get("qos") or {})
    m.constraints = {k: _str_map(f"{name}: constraints.{k}", v)
                     for k, v in (data.get("constraints") or {}).items()}
    if data.get("image") is not None:
        m.image = str(data["image"])
    for gtype, entry in (data.get("gres") or {}).items():
        where = f"{name}: gres.{gtype}"
        if isinstance(entry, str):
            entry = {"mig": entry} if MIG_RE.match(entry) else {"resource": entry}
        if not isinstance(entry, Mapping):
            raise SpecError(where, "must be a mapping", "use node_selector, flavor, mig, resource, tolerations")
        bad = set(entry) - {"node_selector", "flavor", "mig", "resource", "tolerations"}
        if bad:
            raise SpecError(where, f"unknown key {sorted(bad)[0]!r}",
                            "use node_selector, flavor, mig, resource, tolerations")
        selector = dict(_str_map(f"{where}.node_selector", entry.get("node_selector") or {}))
        if "flavor" in entry:
            fl = flavors.get(entry["flavor"])
            if fl is None:
                raise SpecError(f"{where}.flavor", f"flavor {entry['flavor']!r} is not in `flavors`",
                                "add it under flavors: with its nodeLabels")
            selector.update(_str_map(f"{name}: flavors.{entry['flavor']}.nodeLabels",
                                     (fl or {}).get("nodeLabels") or {}))
        resource = entry.get("resource")
        if "mig" in entry:
            resource = f"nvidia.com/mig-{entry['mig']}"
        tolerations = entry.get("tolerations") or ()
        if not isinstance(tolerations, (list, tuple)):
            raise SpecError(f"{where}.tolerations", "must be a list", "write a YAML list of tolerations")
        m.gres[str(gtype)] = GpuPlacement(resource, tuple(selector.items()), tuple(tolerations))
    return m
