"""Ctrl-C while waiting stops the wait, not the job: one line names the job and the exact
call that cancels it, then KeyboardInterrupt goes on (Python); the CLI and the magic say the
same line (tests/cli/test_cli_jobs.py, tests/notebook/test_magic.py)."""
from __future__ import annotations

import pytest

import gpujobs
from gpujobs.handle import Job


class InterruptedBackend:
    """Only what Job.wait touches: a wait that is interrupted, and a cancel that records."""
    name = "fake"

    def __init__(self):
        self.cancelled = []

    def wait(self, job_id, timeout=None):
        raise KeyboardInterrupt

    def cancel(self, job_id):
        self.cancelled.append(job_id)

    def submit(self, spec): raise NotImplementedError  # noqa: E704
    def status(self, job_id): raise NotImplementedError  # noqa: E704
    def outcomes(self, job_id): raise NotImplementedError  # noqa: E704
    def job_key(self, job_id): raise NotImplementedError  # noqa: E704
    def logs(self, job_id, rank=None, follow=False): raise NotImplementedError  # noqa: E704
    def jobs(self, queue=None): raise NotImplementedError  # noqa: E704
    def subscribe(self, job_id, callback): raise NotImplementedError  # noqa: E704
    def render(self, spec, kind=None): raise NotImplementedError  # noqa: E704


@pytest.mark.parametrize("call", [lambda j: j.wait(), lambda j: j.result(), lambda j: j.exception()])
def test_ctrl_c_in_wait_or_result_says_the_job_keeps_running_and_how_to_cancel(call, capsys):
    be = InterruptedBackend()
    job = Job("exp-1-abc123", be)
    with pytest.raises(KeyboardInterrupt):
        call(job)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "job exp-1-abc123 keeps running" in err
    assert "gpujobs.attach('exp-1-abc123').cancel()" in err
    assert be.cancelled == []  # the job was not cancelled


def test_the_cancel_call_in_the_line_is_runnable(capsys, monkeypatch):
    be = InterruptedBackend()
    with pytest.raises(KeyboardInterrupt):
        Job("exp-1-abc123", be).wait()
    line = capsys.readouterr().err.strip()
    call = line.split("(cancel: ", 1)[1][:-1]
    monkeypatch.setattr(gpujobs, "attach", lambda job_id: Job(job_id, be))
    eval(call, {"gpujobs": gpujobs})  # the line's call, run as written
    assert be.cancelled == ["exp-1-abc123"]
