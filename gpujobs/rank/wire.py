"""The pod -> client wire format: every marker line a rank or its launcher writes to the pod log.

A pod's log is the one channel the client reads on Kubernetes (it needs no permission beyond
reading logs); the local backend reads the same lines from files. Each line starts with a
marker (after an optional ``[rank R] `` prefix):

- ``GPUJOBS-RESULT <rank> <base64>``: a rank's sealed outcome (:mod:`.runner`).
- ``GPUJOBS-STACKS <rank> <nonce> <base64>``: a rank's sealed thread stacks (``job.stacks()``).
- ``GPUJOBS-PHASE <text>``: what the rank does before the function runs (Ray starting);
  ``GPUJOBS-PHASE -``: done.
- ``GPUJOBS-PROGRESS {json}``: a ``ctx.progress`` report (:func:`format_progress_line`).
- ``GPUJOBS-METRICS {json}``: one sampling round of the pod's launcher
  (:func:`format_metrics_line`).
- ``GPUJOBS-EARLIER-RUN [rank R] <line>``: an earlier run's line, replayed (:mod:`.runner.runlogs`).

Progress line (one JSON object; keys kept short)::

    GPUJOBS-PROGRESS {"v":1,"r":0,"t":1764431100.5,"s":40,"n":100,"m":{"loss":0.31}}

``r`` rank, ``t`` epoch seconds of the report, ``s`` step, ``n`` total (absent when
unknown), ``m`` the keyword metrics (numbers, or their ``repr`` cut to 200 characters).

Metrics line, one per sampling round, written by the launcher (not the training process)::

    GPUJOBS-METRICS {"v":1,"t":1764431100.5,"h":"train-worker-0","s":"nvml",
                     "g":[{"r":0,"d":0,"u":97,"mu":73400320000,"mt":85899345920,
                           "p":612.3,"c":71,"pm":70123000000}]}

Keys: ``v`` format version, ``t`` epoch seconds, ``h`` host/pod, ``s`` source
(nvml | psutil | dcgm), ``g`` one object per (rank, device): ``r`` rank, ``d``
device (-1 = CPU), ``u`` percent, ``mu``/``mt`` bytes used/total, optional
``p`` watts, ``c`` °C, ``pm`` bytes held by the rank's processes, ``sm`` percent of
SMs busy over the round (NVML GPM, Hopper and later). Readings
with no value are left out. A round with nothing to report writes
``"g":null`` and a ``"reason"``. The whole line stays well under 4 KiB for 8
GPUs, so one ``write`` keeps it whole.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable

MARKER_PREFIX = "GPUJOBS-"
"""Every marker starts so: a line starting so is gpujobs' own, not the user's output."""
RESULT_MARKER = "GPUJOBS-RESULT"
STACKS_MARKER = "GPUJOBS-STACKS"
PHASE_MARKER = "GPUJOBS-PHASE"
PROGRESS_MARKER = "GPUJOBS-PROGRESS"
METRICS_MARKER = "GPUJOBS-METRICS"
EARLIER_MARKER = "GPUJOBS-EARLIER-RUN"
FORMAT_VERSION = 1
"""``"v"`` of the progress and metrics lines."""


def is_marker_line(text: str) -> bool:
    """Whether ``text`` is one of gpujobs' marker lines (leading blanks ignored)."""
    return text.lstrip().startswith(MARKER_PREFIX)


@dataclass(frozen=True)
class GpuSample:
    """One reading of one device of one rank. ``source`` is nvml, psutil (CPU!) or dcgm."""
    time: float
    rank: int
    device: int
    util: float | None  # percent
    mem_used: float | None  # bytes
    mem_total: float | None  # bytes
    power_w: float | None = None
    temp_c: float | None = None
    source: str = "nvml"
    host: str = ""
    proc_mem: float | None = None  # bytes this rank's processes hold on the device (NVML)
    sm_util: float | None = None  # percent of SMs busy over the round (NVML GPM, DCGM SM_ACTIVE)

    @property
    def is_cpu(self) -> bool:
        return self.source == "psutil"


#: ``GpuSample.device`` of a CPU (psutil) reading: it is not a GPU index.
CPU_DEVICE = -1


# ------------------------------------------------------------------ progress lines
def _jsonable(v: Any) -> Any:
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, (int, float)):
        return v if v == v else None  # NaN -> null
    if isinstance(v, str):
        return v[:200]
    try:  # numpy / torch scalars (item(): no autograd warning, no sync beyond the value)
        return float(v.item() if hasattr(v, "item") else v)
    except (TypeError, ValueError):
        return repr(v)[:200]


def format_progress_line(rank: int, step: float, total: float | None, metrics: dict,
                         now: float) -> str:
    doc: dict[str, Any] = {"v": FORMAT_VERSION, "r": rank, "t": round(now, 3), "s": _jsonable(step)}
    if total is not None:
        doc["n"] = _jsonable(total)
    if metrics:
        doc["m"] = {str(k): _jsonable(v) for k, v in metrics.items()}
    return f"{PROGRESS_MARKER} {json.dumps(doc, separators=(',', ':'))}"


def parse_progress_line(line: str) -> dict | None:
    """The report of a progress line (the marker may follow a ``[rank N]`` prefix), else None."""
    i = line.find(PROGRESS_MARKER + " ")
    if i < 0:
        return None
    try:
        doc = json.loads(line[i + len(PROGRESS_MARKER) + 1:].strip())
        return {"rank": int(doc.get("r", 0)), "time": float(doc["t"]), "step": float(doc["s"]),
                "total": None if doc.get("n") is None else float(doc["n"]),
                "metrics": dict(doc.get("m") or {})}
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


# ------------------------------------------------------------------- metrics lines
_FIELDS = (("u", "util"), ("mu", "mem_used"), ("mt", "mem_total"), ("p", "power_w"),
           ("c", "temp_c"), ("pm", "proc_mem"), ("sm", "sm_util"))


def _num(x: float) -> float | int:
    return int(x) if float(x).is_integer() else round(float(x), 3)


def format_metrics_line(samples: Iterable[GpuSample], reason: str = "",
                        now: float | None = None, host: str = "") -> str:
    """One log line (no trailing newline) for one sampling round."""
    samples = list(samples)
    if samples:
        t = max(s.time for s in samples) if now is None else now
        doc: dict = {"v": FORMAT_VERSION, "t": round(t, 3), "h": host or samples[0].host,
                     "s": samples[0].source, "g": []}
        for s in samples:
            g: dict = {"r": s.rank, "d": s.device}
            if s.source != doc["s"]:
                g["s"] = s.source
            if s.host and s.host != doc["h"]:
                g["h"] = s.host
            for short, name in _FIELDS:
                v = getattr(s, name)
                if v is not None:
                    g[short] = _num(v)
            doc["g"].append(g)
    else:
        import time
        doc = {"v": FORMAT_VERSION, "t": round(time.time() if now is None else now, 3),
               "h": host, "g": None, "reason": reason or "no device answered"}
    return f"{METRICS_MARKER} {json.dumps(doc, separators=(',', ':'))}"


def _marker_json(line: str):
    """The JSON after the metrics marker (anywhere in the line), or None."""
    i = line.find(METRICS_MARKER + " ")
    if i < 0:
        return None
    try:
        return json.loads(line[i + len(METRICS_MARKER) + 1:].strip())
    except ValueError:
        return None


def parse_metrics_line(line: str) -> list[GpuSample] | None:
    """Samples from a metrics line; [] for a "nothing to report" line; None for any other line.

    The marker may follow other text (a rank's unterminated output) or a
    ``[rank N]`` prefix; a marker with malformed JSON returns None.
    """
    doc = _marker_json(line)
    if not isinstance(doc, dict) or "t" not in doc:
        return None
    gpus = doc.get("g")
    if gpus is None:
        return []
    out = []

    def num(g: dict, key: str) -> float | None:
        v = g.get(key)
        return None if v is None else float(v)

    try:
        for g in gpus:
            out.append(GpuSample(
                time=float(doc["t"]), rank=int(g["r"]), device=int(g["d"]),
                util=num(g, "u"), mem_used=num(g, "mu"), mem_total=num(g, "mt"),
                power_w=num(g, "p"), temp_c=num(g, "c"), proc_mem=num(g, "pm"), sm_util=num(g, "sm"),
                source=g.get("s", doc.get("s", "nvml")), host=g.get("h", doc.get("h", ""))))
    except (KeyError, TypeError, ValueError):
        return None
    return out


def metrics_reason(line: str) -> str | None:
    """The ``reason`` of a "nothing to report" line (e.g. "NVML not available"), else None."""
    doc = _marker_json(line)
    return doc.get("reason") if isinstance(doc, dict) and doc.get("g") is None else None
