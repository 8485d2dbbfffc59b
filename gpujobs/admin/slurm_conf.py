"""slurm.conf (NodeName / PartitionName lines) → a teams-and-quotas table.

Each partition becomes a team (ClusterQueue + LocalQueue of the partition's name); its quota
is the sum of its nodes' CPUs, RealMemory and GPUs, split into one flavor per GPU type
(``gpu`` for untyped GPUs, ``cpu`` for nodes without GPUs). Every partition joins one cohort
(``slurm`` by default) so idle quota can be borrowed, as idle nodes are shared in Slurm.
Partitions that share nodes double-count them: that is reported as a warning.
Not translated (and reported in the warning list): MaxTime, PriorityTier, QOS, AllowAccounts.
Flavors get no nodeLabels (slurm.conf does not know the Kubernetes node labels): print the table
with ``--table``, add them, and render again.
"""
from __future__ import annotations

import itertools
import re
import shlex
import warnings
from pathlib import Path
from typing import Any

from ..errors import SpecError
from ..spec import slug
from ..slurm.source import read_source
from ..slurm.units import ValueProblem, parse_mem_mib

_NOT_TRANSLATED = ("maxtime", "prioritytier", "qos", "allowaccounts", "allowqos", "defaulttime")


class SlurmConfWarning(UserWarning):
    """A slurm.conf setting with no Kueue equivalent."""


def expand_hostlist(expr: str) -> list[str]:
    """``gpu[01-03,07],login1`` → ['gpu01', 'gpu02', 'gpu03', 'gpu07', 'login1']."""
    items, depth, cur = [], 0, ""
    for ch in expr:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    items.append(cur)
    out: list[str] = []
    for item in filter(None, (i.strip() for i in items)):
        parts = re.split(r"(\[[^\]]*\])", item)
        choices: list[list[str]] = []
        for part in parts:
            if part.startswith("["):
                opts: list[str] = []
                for rng in part[1:-1].split(","):
                    m = re.fullmatch(r"(\d+)(?:-(\d+))?", rng.strip())
                    if not m:
                        raise ValueProblem(f"{item!r} is not a host list", "write e.g. gpu[01-16]")
                    lo, hi = m.group(1), m.group(2) or m.group(1)
                    width = len(lo)
                    if int(hi) < int(lo) or int(hi) - int(lo) > 100000:
                        raise ValueProblem(f"range {rng!r} in {item!r} is empty or huge", "write LOW-HIGH")
                    opts += [str(n).zfill(width) for n in range(int(lo), int(hi) + 1)]
                choices.append(opts)
            elif "[" in part or "]" in part:
                raise ValueProblem(f"{item!r} has unbalanced brackets", "write e.g. gpu[01-16]")
            else:
                choices.append([part])
        out += ["".join(c) for c in itertools.product(*choices)]
    return out


def _lines(text: str) -> list[tuple[int, str]]:
    out, buf, start = [], "", 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip()
        if not buf:
            start = n
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        if buf.strip():
            out.append((start, buf.strip()))
        buf = ""
    return out


def _pairs(where: str, line: str) -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        words = shlex.split(line)
    except ValueError as exc:
        raise SpecError(where, f"cannot be split ({exc})", "close the quote") from None
    for w in words:
        k, eq, v = w.partition("=")
        if not eq:
            raise SpecError(where, f"{w!r} is not KEY=VALUE", "write settings as Key=Value")
        out[k.lower()] = v
    return out


def _gpus(where: str, gres: str) -> dict[str, int]:
    """``gpu:a100:8,gpu:v100:2`` → {'a100': 8, 'v100': 2}; untyped → 'gpu'."""
    out: dict[str, int] = {}
    for item in filter(None, gres.split(",")):
        parts = item.split("(", 1)[0].split(":")
        if parts[0] != "gpu":
            continue
        if len(parts) == 2 and parts[1].isdigit():
            out["gpu"] = out.get("gpu", 0) + int(parts[1])
        elif len(parts) == 3 and parts[2].isdigit():
            out[parts[1]] = out.get(parts[1], 0) + int(parts[2])
        else:
            raise SpecError(where, f"Gres {item!r} has no GPU count", "write Gres=gpu:TYPE:N")
    return out


def _k8s_name(where: str, name: str) -> str:
    out = slug(name, 63)
    if not out:
        raise SpecError(where, f"{name!r} has no usable characters", "rename it")
    return out


def table_from_slurm_conf(source: str | Path, namespace: str = "default",
                          cohort: str = "slurm") -> dict[str, Any]:
    """Read slurm.conf (path or text) and return a table for :func:`gpujobs.admin.parse_table`."""
    name, text = read_source(source, "slurm.conf")
    nodes: dict[str, dict[str, Any]] = {}
    node_default: dict[str, str] = {}
    part_default: dict[str, str] = {}
    partitions: list[tuple[int, dict[str, str]]] = []
    for ln, line in _lines(text):
        where = f"{name}:{ln}"
        head = line.split("=", 1)[0].strip().lower()
        if head not in ("nodename", "partitionname"):
            continue
        kv = _pairs(where, line)
        if head == "nodename":
            if kv["nodename"].upper() == "DEFAULT":
                node_default.update({k: v for k, v in kv.items() if k != "nodename"})
                continue
            attrs = {**node_default, **kv}
            try:
                hosts = expand_hostlist(kv["nodename"])
                mem = parse_mem_mib(attrs.get("realmemory", "1"))
            except ValueProblem as exc:
                raise SpecError(where, exc.problem, exc.fix) from None
            cpus = attrs.get("cpus") or attrs.get("procs")
            if cpus is None:
                s, c, t = (int(attrs.get(k, "1")) for k in ("sockets", "corespersocket", "threadspercore"))
                cpus = str(s * c * t)
            if not cpus.isdigit():
                raise SpecError(f"{where} CPUs", f"{cpus!r} is not a number", "write CPUs=N")
            info: dict[str, Any] = {"cpus": int(cpus), "mem_mib": mem, "gpus": _gpus(where, attrs.get("gres", ""))}
            for h in hosts:
                nodes[h] = info
        else:
            if kv["partitionname"].upper() == "DEFAULT":
                part_default.update({k: v for k, v in kv.items() if k != "partitionname"})
                continue
            partitions.append((ln, {**part_default, **kv}))
    if not partitions:
        raise SpecError(name, "has no PartitionName lines", "give the slurm.conf that defines the partitions")
    flavors: dict[str, dict] = {}
    teams: dict[str, Any] = {}
    members: dict[str, set[str]] = {}
    skipped: set[str] = set()
    for ln, kv in partitions:
        where = f"{name}:{ln}"
        pname = _k8s_name(where, kv["partitionname"])
        spec = kv.get("nodes", "")
        try:
            hosts = list(nodes) if spec.upper() == "ALL" else expand_hostlist(spec)
        except ValueProblem as exc:
            raise SpecError(f"{where} Nodes", exc.problem, exc.fix) from None
        unknown = [h for h in hosts if h not in nodes]
        if unknown:
            raise SpecError(f"{where} Nodes", f"node {unknown[0]} has no NodeName line",
                            "give the whole slurm.conf (NodeName lines too)")
        if not hosts:
            raise SpecError(f"{where} Nodes", f"partition {kv['partitionname']} has no nodes", "add Nodes=")
        members[pname] = set(hosts)
        quota: dict[str, dict[str, Any]] = {}
        for h in hosts:
            info = nodes[h]
            if info["gpus"]:
                for gtype, n in info["gpus"].items():
                    fl = _k8s_name(where, gtype)
                    q = quota.setdefault(fl, {"cpu": 0, "memory_mib": 0.0, "gpu": 0})
                    q["gpu"] += n
                share = len(info["gpus"])  # split a mixed node's CPUs/memory over its GPU types
                for gtype in info["gpus"]:
                    q = quota[_k8s_name(where, gtype)]
                    q["cpu"] += info["cpus"] // share
                    q["memory_mib"] += info["mem_mib"] / share
            else:
                q = quota.setdefault("cpu", {"cpu": 0, "memory_mib": 0.0})
                q["cpu"] += info["cpus"]
                q["memory_mib"] += info["mem_mib"]
        rendered = {}
        for fl, q in quota.items():
            flavors.setdefault(fl, {})
            from ..slurm.units import mib_to_quantity
            r = {"cpu": q["cpu"], "memory": mib_to_quantity(q["memory_mib"])}
            if "gpu" in q:
                r["gpu"] = q["gpu"]
            rendered[fl] = r
        teams[pname] = {"namespace": namespace, "queue": pname, "cohort": cohort, "quota": rendered}
        skipped |= {k for k in kv if k in _NOT_TRANSLATED}
    names = sorted(members)
    for a, b in itertools.combinations(names, 2):
        shared = members[a] & members[b]
        if shared:
            warnings.warn(f"{name}: partitions {a} and {b} share {len(shared)} node(s); their quotas "
                          "count those nodes twice (the cohort lets them borrow instead; consider "
                          "lowering one quota)", SlurmConfWarning, stacklevel=2)
    if skipped:
        warnings.warn(f"{name}: partition settings {', '.join(sorted(skipped))} have no Kueue ClusterQueue "
                      "equivalent and are not translated", SlurmConfWarning, stacklevel=2)
    return {"cohort": cohort, "flavors": flavors, "teams": teams}
