"""Slurm value syntax: time limits, memory sizes, GPU requests, node ranges, array ranges."""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..quantity import format_quantity

_TIME_RE = re.compile(
    r"^(?:(?P<d>\d+)-(?P<dh>\d+)(?::(?P<dm>\d+)(?::(?P<ds>\d+))?)?"  # days-hours[:min[:sec]]
    r"|(?P<a>\d+)(?::(?P<b>\d+)(?::(?P<c>\d+))?)?)$")             # min | min:sec | h:min:sec
_MEM_RE = re.compile(r"^(\d+(?:\.\d+)?)([KMGT])?B?$", re.IGNORECASE)
_MEM_FACTOR_MIB = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


class ValueProblem(ValueError):
    """A value does not follow Slurm's syntax; ``problem`` and ``fix`` are for a SpecError."""

    def __init__(self, problem: str, fix: str):
        self.problem, self.fix = problem, fix
        super().__init__(problem)


def parse_time(value: str) -> float | None:
    """Slurm ``--time`` → seconds (None for UNLIMITED/INFINITE).

    Forms: ``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S``.
    """
    v = value.strip()
    if v.upper() in ("UNLIMITED", "INFINITE"):
        return None
    m = _TIME_RE.match(v)
    if not m:
        raise ValueProblem(f"{value!r} is not a Slurm time",
                           "use minutes (90), H:M:S (01:30:00) or D-H:M:S (1-12:00:00)")
    g = {k: int(x) for k, x in m.groupdict().items() if x is not None}
    if "d" in g:
        secs = g["d"] * 86400 + g["dh"] * 3600 + g.get("dm", 0) * 60 + g.get("ds", 0)
    elif "c" in g:
        secs = g["a"] * 3600 + g["b"] * 60 + g["c"]
    elif "b" in g:
        secs = g["a"] * 60 + g["b"]
    else:
        secs = g["a"] * 60
    if secs <= 0:
        raise ValueProblem(f"time limit {value!r} is zero", "give a positive limit such as 01:00:00")
    return float(secs)


def parse_mem_mib(value: str) -> float:
    """Slurm memory size (default unit MB; K/M/G/T are powers of 1024) → MiB."""
    m = _MEM_RE.match(value.strip())
    if not m:
        raise ValueProblem(f"{value!r} is not a memory size", "use a number with K, M, G or T, e.g. 64G")
    return float(m.group(1)) * _MEM_FACTOR_MIB[(m.group(2) or "M").upper()]


def mib_to_quantity(mib: float) -> str:
    """MiB → Kubernetes quantity (``16Gi``, ``1536Mi``, ``800Ki``; whole KiB, at most Gi)."""
    if not mib:
        return "0Mi"
    return format_quantity(round(mib * 1024) * 1024, ("Gi", "Mi", "Ki"))


@dataclass(frozen=True)
class GpuRequest:
    count: int
    type: str | None = None


def parse_gpu_count(value: str) -> GpuRequest:
    """``--gpus``/``--gpus-per-node``/``--gpus-per-task`` value: ``[type:]N``."""
    parts = value.strip().split(":")
    if len(parts) == 1 and parts[0].isdigit():
        return GpuRequest(int(parts[0]))
    if len(parts) == 2 and parts[0] and parts[1].isdigit():
        return GpuRequest(int(parts[1]), parts[0])
    raise ValueProblem(f"{value!r} is not a GPU count", "use N or TYPE:N, e.g. 8 or a100:8")


def parse_gres(value: str) -> tuple[GpuRequest | None, list[str]]:
    """``--gres`` list → (the GPU request, other gres names). ``gpu``, ``gpu:N``, ``gpu:type:N``."""
    gpu: GpuRequest | None = None
    others: list[str] = []
    for item in filter(None, (x.strip() for x in value.split(","))):
        item = item.split("(", 1)[0]  # drop socket binding such as gpu:a100:8(S:0-1)
        parts = item.split(":")
        if parts[0] != "gpu":
            others.append(item)
            continue
        if gpu is not None:
            raise ValueProblem(f"{value!r} asks for GPUs twice", "give one gpu entry, e.g. gpu:a100:8")
        if len(parts) == 1:
            gpu = GpuRequest(1)
        elif len(parts) == 2:
            gpu = GpuRequest(int(parts[1])) if parts[1].isdigit() else GpuRequest(1, parts[1])
        elif len(parts) == 3 and parts[1] and parts[2].isdigit():
            gpu = GpuRequest(int(parts[2]), parts[1])
        else:
            raise ValueProblem(f"{item!r} is not a GPU gres", "use gpu, gpu:N or gpu:TYPE:N")
    return gpu, others


def parse_int(value: str, what: str, minimum: int = 1) -> int:
    v = value.strip()
    if not v.isdigit() or int(v) < minimum:
        raise ValueProblem(f"{value!r} is not a {what}", f"use a whole number >= {minimum}")
    return int(v)


def parse_nodes(value: str) -> int:
    """``--nodes``: ``N`` or ``N-N`` (a real range cannot become a fixed gang)."""
    v = value.strip()
    if re.fullmatch(r"\d+-\d+", v):
        lo, hi = (int(x) for x in v.split("-"))
        if lo == hi and lo >= 1:
            return lo
        raise ValueProblem(f"node range {value!r} is elastic; a gang has a fixed size",
                           f"ask for a fixed count, e.g. --nodes={lo}")
    return parse_int(v, "node count")


@dataclass(frozen=True)
class ArraySpec:
    indices: tuple[int, ...]
    throttle: int | None = None


def parse_array(value: str, limit: int = 1000) -> ArraySpec:
    """``--array``: ``0-15``, ``1,3,5``, ``0-15:4``, with an optional ``%N`` throttle."""
    v, _, throttle = value.strip().partition("%")
    if throttle and not throttle.isdigit():
        raise ValueProblem(f"throttle {throttle!r} in {value!r} is not a number", "use e.g. 0-15%4")
    indices: list[int] = []
    for part in v.split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+)(?::(\d+))?)?", part.strip())
        if not m:
            raise ValueProblem(f"{part!r} in {value!r} is not an array range",
                               "use indices and ranges such as 0-15, 1,3,5 or 0-15:2")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        step = int(m.group(3)) if m.group(3) else 1
        if hi < lo or step < 1:
            raise ValueProblem(f"range {part!r} is empty", "write LOW-HIGH with LOW <= HIGH")
        if (hi - lo) // step + 1 + len(indices) > limit:
            raise ValueProblem(f"{value!r} makes more than {limit} tasks",
                               f"submit at most {limit} tasks per script")
        indices.extend(range(lo, hi + 1, step))
    out = tuple(sorted(set(indices)))
    return ArraySpec(out, int(throttle) if throttle else None)
