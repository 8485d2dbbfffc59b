"""Job lists as data: one pandas row per job (:func:`jobs_frame`), its HTML and text forms.
Read by the tables (:mod:`.table`) and the live queue widget (:mod:`.widgets`)."""
from __future__ import annotations

import time
from typing import Any, Iterable

from ..status import JobStatus, start_when
from .html import esc, phase_badge
from .text import fmt_duration

COLUMNS = ["position", "job_id", "name", "user", "queue", "priority", "gpus", "gang", "phase",
           "age", "waited", "start", "reason", "message"]
_PHASE_ORDER = {"running": 0, "starting": 1, "admitted": 2, "queued": 3, "preempted": 4}


def sort_key(s: JobStatus) -> tuple:
    """Queued jobs by position, active ones first, finished ones newest first."""
    return (s.terminal, _PHASE_ORDER.get(s.phase, 5),
            s.queue_position if s.queue_position is not None else 1 << 30,
            -(s.submitted_at or 0.0))


def jobs_frame(statuses: Iterable[JobStatus], now: float | None = None):
    """A pandas DataFrame with one row per job (columns: :data:`COLUMNS`)."""
    import pandas as pd
    now = time.time() if now is None else now
    rows = []
    for s in sorted(statuses, key=sort_key):
        rows.append({
            "position": s.queue_position if s.phase == "queued" else None,
            "job_id": s.job_id, "name": s.name, "user": s.user, "queue": s.queue,
            "priority": s.priority or "default", "gpus": s.gpus,
            "gang": f"{s.gang_ready}/{s.gang_size}" if s.gang_size else "",
            "phase": s.phase,
            "age": fmt_duration(now - s.submitted_at) if s.submitted_at else "",
            "waited": fmt_duration(s.waited),
            "start": _start(s, now) if s.phase == "queued" else _started(s),
            "reason": s.reason, "message": s.message,
        })
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame["position"] = frame["position"].astype("Int64")
    return frame


def _start(s: JobStatus, now: float) -> str:
    """Expected start of a queued job (:func:`~gpujobs.status.start_when`: 'in ~12 min (14:05)',
    'any moment (was due 10:02)', 'unknown' with nothing to go on), ''."""
    if s.phase != "queued":
        return ""
    if s.expected_start is None and not s.expected_start_basis:
        return ""
    return start_when(s.expected_start, now, s.not_before)


def _started(s: JobStatus) -> str:
    """When a job that left the queue started (its clock time), '' before it did."""
    return time.strftime("%H:%M:%S", time.localtime(s.started_at)) if s.started_at else ""


#: cells that never wrap (ids, names, times) and free-text cells cut to one line (full text
#: on hover), so a table stays one line per job
_NOWRAP = "white-space:nowrap"
_BOUNDED = "max-width:22em;overflow:hidden;text-overflow:ellipsis;white-space:nowrap"
_CELL_STYLE = {"job_id": _NOWRAP, "name": _NOWRAP, "age": _NOWRAP, "waited": _NOWRAP,
               "start": _NOWRAP, "priority": _NOWRAP, "reason": _BOUNDED, "message": _BOUNDED}


def frame_html(frame: Any, title: str = "") -> str:
    """The DataFrame as an HTML table with phase badges (escaped), one line per job."""
    head = "".join(f"<th>{esc(c)}</th>" for c in frame.columns)
    body = []
    for _, row in frame.iterrows():
        cells = []
        for c in frame.columns:
            v = row[c]
            if c == "phase":
                cells.append(f"<td>{phase_badge(str(v))}</td>")
            elif c in _CELL_STYLE:
                text = _cell(v)
                hover = f' title="{text}"' if _CELL_STYLE[c] is _BOUNDED and text else ""
                cells.append(f'<td style="{_CELL_STYLE[c]}"{hover}>{text}</td>')
            else:
                cells.append(f"<td>{_cell(v)}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    caption = f"<caption style='text-align:left'><b>{esc(title)}</b></caption>" if title else ""
    empty = "" if body else f"<tr><td colspan='{len(frame.columns)}'><i>no jobs</i></td></tr>"
    return (f'<table class="gpujobs-queue" style="font-size:90%">{caption}<tr>{head}</tr>'
            f'{"".join(body)}{empty}</table>')


def _cell(value: Any) -> str:
    import pandas as pd
    try:
        missing = value is None or bool(pd.isna(value))
    except (TypeError, ValueError):
        missing = False
    return "" if missing else esc(value)


def _plain(frame: Any) -> str:
    """The frame as text, blanks instead of <NA>, long messages cut."""
    shown = frame.astype(object).where(frame.notna(), "")
    shown["message"] = shown["message"].map(lambda m: m if len(m) <= 40 else m[:39] + "…")
    return shown.to_string(index=False)
