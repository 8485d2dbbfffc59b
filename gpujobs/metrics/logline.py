"""The ``GPUJOBS-METRICS`` pod-log line: how a pod's launcher reports its samples.

One line per sampling round, written by the launcher (not the training process)::

    GPUJOBS-METRICS {"v":1,"t":1764431100.5,"h":"train-worker-0","s":"nvml",
                     "g":[{"r":0,"d":0,"u":97,"mu":73400320000,"mt":85899345920,
                           "p":612.3,"c":71,"pm":70123000000}]}

Keys: ``v`` format version, ``t`` epoch seconds, ``h`` host/pod, ``s`` source
(nvml | psutil | dcgm), ``g`` one object per (rank, device): ``r`` rank, ``d``
device (-1 = CPU), ``u`` percent, ``mu``/``mt`` bytes used/total, optional
``p`` watts, ``c`` °C, ``pm`` bytes held by the rank's processes. Readings
with no value are left out. A round with nothing to report writes
``"g":null`` and a ``"reason"``. The whole line stays well under 4 KiB for 8
GPUs, so one ``write`` keeps it whole.
"""
from __future__ import annotations

import json
from typing import Iterable

from ..status import GpuSample

METRICS_MARKER = "GPUJOBS-METRICS"
FORMAT_VERSION = 1
_FIELDS = (("u", "util"), ("mu", "mem_used"), ("mt", "mem_total"), ("p", "power_w"),
           ("c", "temp_c"), ("pm", "proc_mem"))


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
                power_w=num(g, "p"), temp_c=num(g, "c"), proc_mem=num(g, "pm"),
                source=g.get("s", doc.get("s", "nvml")), host=g.get("h", doc.get("h", ""))))
    except (KeyError, TypeError, ValueError):
        return None
    return out


def metrics_reason(line: str) -> str | None:
    """The ``reason`` of a "nothing to report" line (e.g. "NVML not available"), else None."""
    doc = _marker_json(line)
    return doc.get("reason") if isinstance(doc, dict) and doc.get("g") is None else None
