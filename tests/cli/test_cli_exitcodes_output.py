"""Exit-code mapping and table formatting (in process, no jobs)."""
from __future__ import annotations

import io
import time

import pytest

from gpujobs.cli import exitcodes, output
from gpujobs.errors import (BackendAPIError, BackendUnavailable, JobFailedError, KubernetesError, PreflightError,
                            QuotaError, SpecError, StateError)
from gpujobs.status import JobStatus


@pytest.mark.parametrize("exc,code", [
    (KeyboardInterrupt(), 130), (SpecError("job_id", "no local job 'x'"), 4),
    (KubernetesError("gone", status=404), 4), (KubernetesError("boom", status=500), 3),
    (BackendAPIError("any backend's API: gone", status=404), 4), (BackendAPIError("boom", status=503), 3),
    (SpecError("gpus", "bad"), 2), (QuotaError("never fits"), 2), (BackendUnavailable("down"), 3),
    (ImportError("no kubernetes"), 3), (JobFailedError("rank 1 died"), 1), (StateError("corrupt"), 3),
    # refused: as submit's RBAC preflight (PreflightError, 2), not "try again later"
    (KubernetesError("you may not list workloads", status=403), 2),
    (KubernetesError("does not accept your credentials", status=401), 2),
    (PreflightError("rbac", "you may not create pytorchjobs"), 2),
])
def test_exit_codes(exc, code):
    assert exitcodes.exit_code_for(exc) == code


def test_age():
    assert [output.age(s) for s in (None, 5, 125, 7300, 200000)] == ["-", "5s", "2m", "2h", "2d"]


def test_queue_table_orders_queued_by_position():
    now = time.time()
    jobs = [JobStatus("r", "running", name="r", queue="a", submitted_at=now - 50, gpus=2),
            JobStatus("q2", "queued", name="q2", queue="a", queue_position=2, submitted_at=now - 10),
            JobStatus("q1", "queued", name="q1", queue="a", queue_position=1, submitted_at=now - 5)]
    ordered = output.sort_jobs(jobs)
    assert [j.job_id for j in ordered] == ["q1", "q2", "r"]
    headers, rows = output.job_rows(ordered, wide=True, now=now)
    text = output.table(rows, headers)
    first = text.splitlines()[1].split()
    assert first[:7] == ["q1", "q1", "-", "a", "0", "queued", "1"]
    assert "1st in a" in text and "PRIORITY" in text


def test_plain_progress_prints_changes_only():
    buf = io.StringIO()
    p = output.Progress(buf, live=False)
    st = JobStatus("j", "queued", name="j", queue="a", queue_position=2)
    p.update(st)
    p.update(st)
    p.update(st.with_(phase="running", queue_position=None))
    p.close()
    lines = buf.getvalue().splitlines()
    assert len(lines) == 2 and "2nd in a" in lines[0] and "running" in lines[1]
