"""Files the agent and the ranks write are 0600 whatever the umask (issue 27: metrics.log and
rank-written files took the umask's modes)."""
from __future__ import annotations

import os
import stat

import pytest

from gpujobs.rank import contract


@pytest.fixture
def open_umask():
    old = os.umask(0)
    yield
    os.umask(old)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_rank_written_files_are_private_under_an_open_umask(tmp_path, monkeypatch, open_umask):
    from gpujobs.rank import runner
    from gpujobs.payload import Outcome
    from gpujobs.rank.progress import ProgressReporter
    monkeypatch.setenv(contract.RESULT_SINK, contract.dir_sink(tmp_path))
    runner.write_outcome(b"sealed", 0)
    runner._write_failure_marker(Outcome.failure(1, ValueError("x")))
    reporter = ProgressReporter(0, tmp_path / contract.PROGRESS.name(0), interval=0)
    reporter.report(1, 10)
    runner.enable_faulthandler(2)
    made = {p.name: _mode(p) for p in tmp_path.iterdir()}
    assert {"outcome-0.bin", "failure-1.json", "progress-0.log", "stacks-2.txt",
            "stackpid-2.json"} <= set(made), made
    assert set(made.values()) == {0o600}, made


def test_the_metrics_log_is_private_under_an_open_umask(tmp_path, open_umask):
    from gpujobs.metrics.tracker import JobMetrics
    jm = JobMetrics({}, path=tmp_path / contract.METRICS_LOG)
    jm._write("a line")
    assert _mode(tmp_path / contract.METRICS_LOG) == 0o600
