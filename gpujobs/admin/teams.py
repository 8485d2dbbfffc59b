"""The teams-and-quotas table an administrator writes (YAML), read and checked.

::

    cohort: research                 # cohort of every team unless a team says otherwise
    flavors:                         # ResourceFlavors
      a100: {nodeLabels: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB}}
      cpu-nodes: {}
    priorities:                      # WorkloadPriorityClasses (name: value, or a mapping)
      low: 100
      high: {value: 1000, description: deadline work}
    preemption:                      # default for every team (these are the defaults)
      reclaimWithinCohort: Any
      withinClusterQueue: LowerPriority
    teams:
      team-a:
        namespace: team-a            # where the LocalQueue lives (default: the team name)
        queue: team-a                # LocalQueue name (default: the team name)
        quota:                       # per flavor: resource -> nominal quota, or a mapping
          a100: {gpu: 16, cpu: 128, memory: 1Ti}
          cpu-nodes: {cpu: {nominal: 64, borrowingLimit: 64, lendingLimit: 32}, memory: 256Gi}
        borrowingLimit: {gpu: 8}     # shorthand: this limit in every flavor that lists the resource
        queueingStrategy: BestEffortFIFO

Resource names: ``gpu`` means ``nvidia.com/gpu``; ``cpu``, ``memory`` and any full name
(``nvidia.com/mig-1g.10gb``) are taken as written.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..errors import SpecError
from ..quantity import parse_quantity
from ..slurm.source import load_yaml, read_source

NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
RESOURCE_ALIASES = {"gpu": "nvidia.com/gpu", "gpus": "nvidia.com/gpu", "cpus": "cpu", "mem": "memory"}
RECLAIM = ("Never", "LowerPriority", "Any")
WITHIN = ("Never", "LowerPriority", "LowerOrNewerEqualPriority")
STRATEGIES = ("BestEffortFIFO", "StrictFIFO")
DEFAULT_PREEMPTION = {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}


@dataclass
class Quota:
    nominal: int | str
    borrowing_limit: int | str | None = None
    lending_limit: int | str | None = None


@dataclass
class Team:
    name: str
    namespace: str
    queue: str
    cohort: str | None
    quota: dict[str, dict[str, Quota]]            # flavor -> resource -> Quota
    preemption: dict[str, Any]
    queueing_strategy: str = "BestEffortFIFO"


@dataclass
class QueueTable:
    flavors: dict[str, dict[str, Any]] = field(default_factory=dict)
    priorities: dict[str, tuple[int, str | None]] = field(default_factory=dict)
    teams: list[Team] = field(default_factory=list)


def _name(where: str, value: Any) -> str:
    if not isinstance(value, str) or not NAME_RE.match(value) or len(value) > 63:
        raise SpecError(where, f"{value!r} is not a valid Kubernetes name",
                        "use lowercase letters, digits and '-'")
    return value


def _qty(where: str, value: Any) -> int | str:
    """A quota as written (an int, or quantity text); checked by :mod:`gpujobs.quantity`."""
    parse_quantity(value, where, example="64Gi")
    if isinstance(value, float):
        return int(value) if value.is_integer() else str(value)
    return value


def _mapping(where: str, value: Any) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(where, f"must be a mapping, got {type(value).__name__}", "write `key: value` lines")
    return value


def resource_name(name: str) -> str:
    return RESOURCE_ALIASES.get(name, name)


def _preemption(where: str, value: Any, base: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in _mapping(where, value).items():
        if k == "reclaimWithinCohort" and v not in RECLAIM:
            raise SpecError(f"{where}.{k}", f"{v!r} is not allowed", f"use one of {', '.join(RECLAIM)}")
        if k == "withinClusterQueue" and v not in WITHIN:
            raise SpecError(f"{where}.{k}", f"{v!r} is not allowed", f"use one of {', '.join(WITHIN)}")
        if k not in ("reclaimWithinCohort", "withinClusterQueue", "borrowWithinCohort"):
            raise SpecError(f"{where}.{k}", "is not a preemption setting",
                            "use reclaimWithinCohort, withinClusterQueue or borrowWithinCohort")
        out[k] = v
    if out.get("reclaimWithinCohort") == "Never" and "borrowWithinCohort" in out:
        raise SpecError(f"{where}.borrowWithinCohort", "needs reclaimWithinCohort other than Never "
                        "(a Kueue rule)", "set reclaimWithinCohort: LowerPriority or Any")
    return out


def parse_table(data: Any, source: str = "table") -> QueueTable:
    """Check a table (already loaded from YAML) and return its model. Errors name the key."""
    top = _mapping(source, data)
    unknown = sorted(set(top) - {"cohort", "flavors", "priorities", "preemption", "teams",
                                 "queueingStrategy"})
    if unknown:
        raise SpecError(f"{source}: {unknown[0]}", "is not a table section",
                        "use cohort, flavors, priorities, preemption, queueingStrategy, teams")
    table = QueueTable()
    for fname, fdef in _mapping(f"{source}: flavors", top.get("flavors")).items():
        where = f"{source}: flavors.{fname}"
        _name(where, fname)
        fdef = dict(_mapping(where, fdef))
        bad = set(fdef) - {"nodeLabels", "nodeTaints", "tolerations", "topologyName"}
        if bad:
            raise SpecError(f"{where}.{sorted(bad)[0]}", "is not a ResourceFlavor field",
                            "use nodeLabels, nodeTaints, tolerations, topologyName")
        for k, v in _mapping(f"{where}.nodeLabels", fdef.get("nodeLabels")).items():
            fdef.setdefault("nodeLabels", {})[k] = str(v)
        table.flavors[fname] = fdef
    for pname, pdef in _mapping(f"{source}: priorities", top.get("priorities")).items():
        where = f"{source}: priorities.{pname}"
        _name(where, pname)
        desc = None
        if isinstance(pdef, Mapping):
            desc = pdef.get("description")
            pdef = pdef.get("value")
        if isinstance(pdef, bool) or not isinstance(pdef, int) or not -2**31 <= pdef < 2**31:
            raise SpecError(where, f"value {pdef!r} is not a 32-bit integer", "write e.g. high: 1000")
        table.priorities[pname] = (pdef, None if desc is None else str(desc))
    default_pre = _preemption(f"{source}: preemption", top.get("preemption"), DEFAULT_PREEMPTION)
    strategy = top.get("queueingStrategy", "BestEffortFIFO")
    teams = _mapping(f"{source}: teams", top.get("teams"))
    if not teams:
        raise SpecError(f"{source}: teams", "lists no team", "add teams: {team-a: {quota: {...}}}")
    seen_queues: set[tuple[str, str]] = set()
    for tname, tdef in teams.items():
        where = f"{source}: teams.{tname}"
        _name(where, tname)
        tdef = _mapping(where, tdef)
        bad = set(tdef) - {"namespace", "queue", "cohort", "quota", "borrowingLimit", "lendingLimit",
                           "preemption", "queueingStrategy"}
        if bad:
            raise SpecError(f"{where}.{sorted(bad)[0]}", "is not a team setting",
                            "use namespace, queue, cohort, quota, borrowingLimit, lendingLimit, "
                            "preemption, queueingStrategy")
        ns = _name(f"{where}.namespace", tdef.get("namespace", tname))
        queue = _name(f"{where}.queue", tdef.get("queue", tname))
        if (ns, queue) in seen_queues:
            raise SpecError(f"{where}.queue", f"LocalQueue {ns}/{queue} is defined twice", "give it another name")
        seen_queues.add((ns, queue))
        cohort = tdef.get("cohort", top.get("cohort"))
        if cohort is not None:
            _name(f"{where}.cohort", cohort)
        st = tdef.get("queueingStrategy", strategy)
        if st not in STRATEGIES:
            raise SpecError(f"{where}.queueingStrategy", f"{st!r} is not allowed", f"use {' or '.join(STRATEGIES)}")
        shorthand = {k: {resource_name(r): _qty(f"{where}.{k}.{r}", v)
                         for r, v in _mapping(f"{where}.{k}", tdef.get(k)).items()}
                     for k in ("borrowingLimit", "lendingLimit")}
        quota: dict[str, dict[str, Quota]] = {}
        qdef = _mapping(f"{where}.quota", tdef.get("quota"))
        if not qdef:
            raise SpecError(f"{where}.quota", "is empty", "give at least one flavor: {gpu: N}")
        for flavor, resources in qdef.items():
            fw = f"{where}.quota.{flavor}"
            if flavor not in table.flavors:
                raise SpecError(fw, f"flavor {flavor!r} is not defined",
                                f"add it under flavors: ({flavor}: {{nodeLabels: {{...}}}})")
            quota[flavor] = {}
            if not _mapping(fw, resources):
                raise SpecError(fw, "lists no resources", "give quotas such as {gpu: 8, cpu: 64, memory: 512Gi}")
            for rname, rdef in _mapping(fw, resources).items():
                rw = f"{fw}.{rname}"
                if isinstance(rdef, Mapping):
                    extra = set(rdef) - {"nominal", "borrowingLimit", "lendingLimit"}
                    if extra or "nominal" not in rdef:
                        raise SpecError(rw, "needs nominal (and optionally borrowingLimit, lendingLimit)",
                                        "write e.g. {nominal: 16, borrowingLimit: 8}")
                    q = Quota(_qty(f"{rw}.nominal", rdef["nominal"]),
                              None if rdef.get("borrowingLimit") is None else _qty(f"{rw}.borrowingLimit", rdef["borrowingLimit"]),
                              None if rdef.get("lendingLimit") is None else _qty(f"{rw}.lendingLimit", rdef["lendingLimit"]))
                else:
                    q = Quota(_qty(rw, rdef))
                rn = resource_name(rname)
                if q.borrowing_limit is None:
                    q.borrowing_limit = shorthand["borrowingLimit"].get(rn)
                if q.lending_limit is None:
                    q.lending_limit = shorthand["lendingLimit"].get(rn)
                if (q.borrowing_limit is not None or q.lending_limit is not None) and cohort is None:
                    raise SpecError(rw, "borrowing and lending limits need a cohort (a Kueue rule)",
                                    f"set cohort: for {tname}, or drop the limits")
                quota[flavor][rn] = q
        pre = _preemption(f"{where}.preemption", tdef.get("preemption"), default_pre)
        table.teams.append(Team(tname, ns, queue, cohort, quota, pre, st))
    return table


def load_table(source: str | Path | Mapping[str, Any]) -> QueueTable:
    """Read a table from a path, YAML text or a dict."""
    if isinstance(source, Mapping):
        return parse_table(source)
    name, text = read_source(source, "table")
    return parse_table(load_yaml(name, text), name)
