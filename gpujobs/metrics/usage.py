"""Usage per queue and user over a period: GPU-hours requested vs used, utilisation, waiting.

Pure functions over JobStatus records and metrics samples, so the numbers are
testable without processes. Definitions (all clipped to ``[since, until]``):

- ``gpu_hours_requested``: gpus x running time (started_at .. finished_at or until).
- ``gpu_hours_used``: GPU busy % integrated over time from GPU samples (nvml/dcgm):
  each sample counts until the next one of its (rank, device), at most
  ``max_gap`` seconds, and never past the job's end. NaN when a group has no GPU samples: CPU (psutil)
  readings are never counted as GPU use; they feed ``mean_cpu_pct`` instead.
- ``mean_util``: mean GPU busy % of the GPU samples; ``mean_wait_s``/``max_wait_s``:
  submitted -> started of jobs that started in the period; ``queued`` counts jobs
  still waiting at ``until``.
"""
from __future__ import annotations

import math
import time
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Iterable, Mapping, Sequence

import pandas as pd

from ..errors import SpecError
from ..status import GpuSample, JobStatus

GROUP_KEYS = ("queue", "user", "backend", "name", "job_id")
COLUMNS = ["jobs", "running", "queued", "gpu_hours_requested", "gpu_hours_used", "efficiency",
           "mean_util", "mean_cpu_pct", "mean_wait_s", "max_wait_s", "metrics_source"]


def to_epoch(value, name: str, now: float | None = None) -> float | None:
    """None, epoch seconds, datetime/Timestamp, ISO string, or a timedelta meaning "that long ago"."""
    if value is None:
        return None
    now = time.time() if now is None else now
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, (timedelta, pd.Timedelta)):
        return now - pd.Timedelta(value).total_seconds()
    try:
        ts = pd.Timestamp(value)
    except (ValueError, TypeError):
        raise SpecError(name, f"cannot read {value!r} as a time",
                        "pass epoch seconds, a datetime, an ISO date or a timedelta") from None
    if ts.tzinfo is None:
        ts = ts.tz_localize(datetime.now().astimezone().tzinfo)
    return ts.timestamp()


def _overlap(a0: float | None, a1: float | None, b0: float, b1: float) -> float:
    if a0 is None:
        return 0.0
    a1 = b1 if a1 is None else a1
    return max(0.0, min(a1, b1) - max(a0, b0))


def _gpu_busy_seconds(samples: Sequence[GpuSample], since: float, until: float,
                      max_gap: float) -> tuple[float, list[float]]:
    """(busy GPU-seconds, utilisation values) of the GPU samples inside the period."""
    series: dict[tuple[int, int, str], list[GpuSample]] = defaultdict(list)
    for s in samples:
        if s.source != "psutil" and s.util is not None:
            series[(s.rank, s.device, s.host)].append(s)
    busy, utils = 0.0, []
    for ss in series.values():
        ss.sort(key=lambda s: s.time)
        for i, s in enumerate(ss):
            end = ss[i + 1].time if i + 1 < len(ss) else s.time + max_gap
            end = min(end, s.time + max_gap)
            span = _overlap(s.time, end, since, until)
            util = float(s.util or 0.0)  # never None here: those were left out above
            if since <= s.time <= until:
                utils.append(util)
            busy += span * util / 100.0
    return busy, utils


def usage_report(statuses: Iterable[JobStatus],
                 samples: Mapping[str, Sequence[GpuSample]] | None = None,
                 since: float | None = None, until: float | None = None,
                 by: Sequence[str] | str = ("queue", "user"), max_gap: float = 10.0,
                 now: float | None = None) -> pd.DataFrame:
    """One row per group (``by``), columns :data:`COLUMNS`. ``samples`` maps job id -> samples."""
    by = (by,) if isinstance(by, str) else tuple(by)
    bad = [k for k in by if k not in GROUP_KEYS]
    if not by or bad:
        raise SpecError("by", f"cannot group by {bad or by!r}", f"use some of {GROUP_KEYS}")
    now = time.time() if now is None else now
    until = now if until is None else until
    since = -math.inf if since is None else since
    if since > until:
        raise SpecError("since", f"the period starts after it ends ({since} > {until})",
                        "pass since < until")
    samples = samples or {}
    acc: dict[tuple, dict] = {}
    for st in statuses:
        end_of_life = st.finished_at if st.finished_at is not None else until
        start_of_life = st.submitted_at if st.submitted_at is not None else st.started_at
        if start_of_life is None or start_of_life > until or end_of_life < since:
            continue
        key = tuple(getattr(st, k) for k in by)
        a = acc.setdefault(key, {"jobs": 0, "running": 0, "queued": 0, "req": 0.0, "busy": 0.0,
                                 "utils": [], "cpu": [], "waits": [], "gpu_samples": 0})
        a["jobs"] += 1
        started = st.started_at if st.started_at is not None and st.started_at <= until else None
        if started is None:
            a["queued"] += 1
        elif st.finished_at is None or st.finished_at > until:
            a["running"] += 1
        a["req"] += st.gpus * _overlap(started, st.finished_at, since, until)
        if started is not None and since <= started and st.submitted_at is not None:
            a["waits"].append(started - st.submitted_at)
        job_samples = samples.get(st.job_id, ())
        job_end = until if st.finished_at is None else min(until, st.finished_at)
        busy, utils = _gpu_busy_seconds(job_samples, since, job_end, max_gap)
        a["busy"] += busy
        a["utils"] += utils
        a["gpu_samples"] += len(utils)
        a["cpu"] += [s.util for s in job_samples
                     if s.source == "psutil" and s.util is not None and since <= s.time <= until]
    rows = []
    for key, a in acc.items():
        used = a["busy"] / 3600.0 if a["gpu_samples"] else math.nan
        req = a["req"] / 3600.0
        source = ("gpu" if a["gpu_samples"] and not a["cpu"] else "cpu" if a["cpu"] and not
                  a["gpu_samples"] else "gpu+cpu" if a["cpu"] else "none")
        rows.append(dict(zip(by, key)) | {
            "jobs": a["jobs"], "running": a["running"], "queued": a["queued"],
            "gpu_hours_requested": req, "gpu_hours_used": used,
            "efficiency": used / req if req and not math.isnan(used) else math.nan,
            "mean_util": sum(a["utils"]) / len(a["utils"]) if a["utils"] else math.nan,
            "mean_cpu_pct": sum(a["cpu"]) / len(a["cpu"]) if a["cpu"] else math.nan,
            "mean_wait_s": sum(a["waits"]) / len(a["waits"]) if a["waits"] else math.nan,
            "max_wait_s": max(a["waits"]) if a["waits"] else math.nan,
            "metrics_source": source})
    df = pd.DataFrame(rows, columns=list(by) + COLUMNS)
    return df.sort_values(list(by), kind="stable").set_index(list(by))
