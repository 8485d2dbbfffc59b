"""The local archive of ended Kubernetes jobs: their final status, result/exception envelopes and
logs, kept by the client so that ``status``, ``logs``, ``result()`` and ``queue -a`` still work once
the job object or its pods are gone (``cancel`` deletes the job; pods get garbage-collected or
evicted; an operator's TTL removes finished jobs).

Where: ``<state dir>/k8s-archive/<namespace>/<name>.json`` (the state dir is ``$GPUJOBS_HOME``,
default ``~/.gpujobs``), one private file (0600) per job, written when a process of this user sees
the job end (status, wait, a watch callback, logs, cancel), so a job followed by any process of the
same user is archived. Bounded: each job keeps the last :data:`MAX_LOG_BYTES` of its logs, and the
archive keeps the newest :data:`MAX_JOBS` jobs and at most :data:`MAX_TOTAL_BYTES` in all (oldest
files removed first). The envelopes are HMAC-sealed as the pods wrote them: they are opened with
the job's key, as before.
"""
from __future__ import annotations

import base64
import json
import os
import threading
from dataclasses import fields
from pathlib import Path
from typing import Any

from ....status import GpuSample, JobEvent, JobStatus
from .. import keys, naming

MAX_LOG_BYTES = 256 * 1024
MAX_JOBS = 500
MAX_TOTAL_BYTES = 64 * 1024 * 1024

_STATUS_FIELDS = {f.name for f in fields(JobStatus)}
_WRITING = threading.Lock()
"""One read-modify-write of an entry at a time in this process (the log keeper's threads, one per
pod, and the status reads save into the same entry)."""


def _root(home: Path) -> Path:
    return Path(home) / "k8s-archive"


def path_of(home: Path, namespace: str, name: str) -> Path:
    return _root(home) / namespace / f"{name}.json"


def has(home: Path, job_id: str) -> bool:
    """Whether the job's final status is archived (kept earlier runs' logs alone are not)."""
    ns, name = naming.parse_job_id(job_id)
    return "status" in (_read(path_of(home, ns, name)) or {})


def save(home: Path, st: JobStatus, logs: str | None = None, outcomes: dict[int, bytes] | None = None) -> None:
    """Archive ``st`` (an ended job) with its logs (the tail is kept) and outcome envelopes; an
    existing entry keeps the logs/outcomes this call does not give."""
    ns, name = naming.parse_job_id(st.job_id)
    with _WRITING:
        _save(path_of(home, ns, name), st, logs, outcomes)
    _trim(home)


def _save(path: Path, st: JobStatus, logs: str | None, outcomes: dict[int, bytes] | None) -> None:
    old = _read(path) or {}
    doc: dict[str, Any] = {"status": _status_dict(st)}
    text = logs if logs is not None else old.get("logs")
    if text is not None:
        raw = text.encode()
        if len(raw) > MAX_LOG_BYTES:
            cut = raw[-MAX_LOG_BYTES:]
            text = "[gpujobs: earlier log lines were not archived]\n" + cut[cut.find(b"\n") + 1:].decode(
                "utf-8", "replace")
        doc["logs"] = text
    outs = ({str(r): base64.b64encode(b).decode() for r, b in outcomes.items()} if outcomes
            else old.get("outcomes"))
    if outs:
        doc["outcomes"] = outs
    if old.get("earlier_runs"):
        doc["earlier_runs"] = old["earlier_runs"]
    keys.write_private(path, json.dumps(doc))


def save_earlier_run(home: Path, job_id: str, text: str) -> None:
    """Keep the logs of a run whose pods are gone (a preempted run's, as a watcher last read
    them) for ``logs``, before the job's current ones; the newest :data:`MAX_LOG_BYTES` kept."""
    ns, name = naming.parse_job_id(job_id)
    path = path_of(home, ns, name)
    with _WRITING:
        doc = _read(path) or {}
        runs = (doc.get("earlier_runs") or "") + text
        raw = runs.encode()
        if len(raw) > MAX_LOG_BYTES:
            cut = raw[-MAX_LOG_BYTES:]
            runs = cut[cut.find(b"\n") + 1:].decode("utf-8", "replace")
        doc["earlier_runs"] = runs
        keys.write_private(path, json.dumps(doc))


def earlier_runs(home: Path, job_id: str) -> str:
    """The logs of the job's earlier runs (see save_earlier_run), '' when none were kept."""
    ns, name = naming.parse_job_id(job_id)
    return (_read(path_of(home, ns, name)) or {}).get("earlier_runs") or ""


def _status_dict(st: JobStatus) -> dict:
    d = st.to_dict()
    d["metrics"] = []  # samples are not archived (job.metrics() reads them while the pods live)
    return d


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def status(home: Path, job_id: str) -> JobStatus | None:
    ns, name = naming.parse_job_id(job_id)
    doc = _read(path_of(home, ns, name))
    if not doc or "status" not in doc:
        return None
    d = {k: v for k, v in doc["status"].items() if k in _STATUS_FIELDS}
    d["events"] = tuple(JobEvent(**e) for e in d.get("events") or ())
    d["metrics"] = tuple(GpuSample(**m) for m in d.get("metrics") or ())
    d["extra"] = dict(d.get("extra") or {}, archived=True)
    try:
        return JobStatus(**d)
    except (TypeError, ValueError):
        return None


def logs(home: Path, job_id: str) -> str | None:
    ns, name = naming.parse_job_id(job_id)
    return (_read(path_of(home, ns, name)) or {}).get("logs")


def outcomes(home: Path, job_id: str) -> dict[int, bytes]:
    ns, name = naming.parse_job_id(job_id)
    outs = (_read(path_of(home, ns, name)) or {}).get("outcomes") or {}
    return {int(r): base64.b64decode(b) for r, b in outs.items()}


def all_statuses(home: Path, namespace: str) -> list[JobStatus]:
    d = _root(home) / namespace
    out = []
    for p in sorted(d.glob("*.json")) if d.exists() else []:
        st = status(home, f"{namespace}/{p.stem}")
        if st is not None:
            out.append(st)
    return out


def _trim(home: Path) -> None:
    """Keep the newest MAX_JOBS files and at most MAX_TOTAL_BYTES (oldest removed first)."""
    files = []
    for p in _root(home).glob("*/*.json"):
        try:
            s = p.stat()
        except OSError:
            continue
        files.append((s.st_mtime, s.st_size, p))
    files.sort(reverse=True)
    total = 0
    for i, (_, size, p) in enumerate(files):
        total += size
        if i >= MAX_JOBS or total > MAX_TOTAL_BYTES:
            try:
                os.unlink(p)
            except OSError:
                pass
