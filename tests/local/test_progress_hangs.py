"""What a researcher needs once a local job runs: progress, stalls, live stacks, crash stacks,
real remote tracebacks with the peers' noise folded. Real rank processes (slow)."""
from __future__ import annotations

import time

import pytest

import gpujobs
from gpujobs.errors import JobFailedError
from tests.support import fails_on_rank_one, goes_quiet_then_moves, train, user_module

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def fast_rounds(monkeypatch):
    monkeypatch.setenv("GPUJOBS_METRICS_INTERVAL", "0.3")  # the agent's sampling round
    monkeypatch.setenv("GPUJOBS_LOCAL_GPUS", "4")


def poll(job, until, timeout=90.0, every=0.15):
    """Statuses until ``until(st)`` holds (returns that status) or the job ends (None)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = job.status()
        if until(st):
            return st
        if st.terminal:
            return None
        time.sleep(every)
    return None


# ------------------------------------------------------------------ progress
def test_progress_seen_while_running_and_in_the_final_status(no_leftovers):
    job = gpujobs.submit(train, 60, 0.05, gpus=1)
    live = poll(job, lambda st: st.phase == "running" and st.progress is not None
                and st.progress.step < 60)
    assert live is not None, "no progress reached JobStatus.progress while the job ran"
    assert live.progress.total == 60 and "loss" in live.progress.metrics
    later = poll(job, lambda st: st.progress is not None and st.progress.rate is not None
                 and not st.terminal)
    if later is not None:  # two reports seen while running: rate and time left
        assert 2 < later.progress.rate < 40 and later.progress.expected_end > later.progress.updated
    assert job.result(timeout=120) == 60
    final = job.status()
    assert final.progress.step == 60 and final.progress.total == 60  # the flushed last report
    assert final.progress.metrics["loss"] == pytest.approx(1 / 60)
    df = job.progress()
    assert len(df) >= 2 and df["step"].iloc[-1] == 60 and "loss" in df.columns
    assert df["step"].is_monotonic_increasing
    no_leftovers(job.id)


def cli(capsys, *argv):
    from gpujobs.cli import main
    capsys.readouterr()
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_status_and_queue_show_progress(capsys):
    job = gpujobs.submit(train, 6, 0.4, gpus=1)
    st = poll(job, lambda s: s.phase == "running" and s.progress is not None)
    assert st is not None
    _, queue, _ = cli(capsys, "queue")
    _, status, _ = cli(capsys, "status", job.id)
    job.result(timeout=120)
    assert "PROGRESS" in queue.splitlines()[0]
    row = next(line for line in queue.splitlines() if line.startswith(job.id))
    assert "/6" in row, queue
    assert "Progress:" in status and "/6" in status, status


# --------------------------------------------------------------------- stalls


def test_stalled_rank_is_flagged_then_unflagged(no_leftovers):
    job = (gpujobs.job(goes_quiet_then_moves, 6.0, 4.0).ddp(gpus=1)
           .env(GPUJOBS_STALL_FLOOR_S="1.5", GPUJOBS_STALL_FACTOR="1",
                GPUJOBS_PROGRESS_INTERVAL="0.2").submit())
    flagged = poll(job, lambda st: st.stalled_since is not None)
    assert flagged is not None, "the quiet rank was never flagged"
    stall = flagged.extra["stall"]
    assert "rank 0" in stall and "quiet_phase" in stall, stall  # where it sits, from its stack
    assert flagged.message == stall  # the flag comes with its message
    assert flagged.phase == "running"  # flagged, never killed
    moving = poll(job, lambda st: st.stalled_since is None)
    assert moving is not None and moving.phase == "running", "never unflagged while it ran"
    assert job.result(timeout=120) > 3
    flags = [e.kind for e in job.status().events if e.kind in ("stalled", "moving")]
    # One event when the flag is raised, one when it clears: never one per sampling round
    # (0.3 s here: about 20 rounds in the quiet phase). A loaded machine may add an episode
    # (a slow start-up is quiet too), each raised and cleared once.
    assert flags[:2] == ["stalled", "moving"] and flags == ["stalled", "moving"] * (len(flags) // 2), flags
    assert len(flags) <= 6, flags
    no_leftovers(job.id)


# --------------------------------------------------------------------- stacks
def sleeping_in_a_named_function(seconds):
    import time as t
    t.sleep(seconds)


def sleeper():
    sleeping_in_a_named_function(120)


def test_stacks_of_a_three_rank_job_name_the_function_on_every_rank(no_leftovers, capsys):
    job = gpujobs.job(sleeper).ddp(gpus=3).submit()
    try:
        assert poll(job, lambda st: st.phase == "running") is not None
        stacks: dict = {}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # ranks register their handler as they start
            stacks = job.stacks(timeout=5)
            if len(stacks) == 3 and all("sleeping_in_a_named_function" in s for s in stacks.values()):
                break
            time.sleep(0.3)
        assert sorted(stacks) == [0, 1, 2]
        for rank, text in stacks.items():
            assert "sleeping_in_a_named_function" in text and "sleeper" in text, (rank, text)
        one = job.stacks(rank=1, timeout=5)
        assert list(one) == [1]
        code, out, err = cli(capsys, "stack", job.id, "--rank", "2")
        assert code == 0, err
        assert "=== rank 2 ===" in out and "sleeping_in_a_named_function" in out
        assert "=== rank 0" not in out
        assert job.status().phase == "running"  # a dump does not disturb the ranks
    finally:
        job.cancel()
    no_leftovers(job.id)


# ------------------------------------------------------------------- crashes
def crash_here():
    import ctypes
    ctypes.string_at(0)


def segfaults():
    crash_here()


def test_a_segfaulting_rank_leaves_its_python_stack_in_its_log(no_leftovers):
    job = gpujobs.submit(segfaults, gpus=1)
    with pytest.raises(JobFailedError, match="SIGSEGV"):
        job.result(timeout=120)
    logs = job.logs()
    assert "Fatal Python error: Segmentation fault" in logs
    assert "in crash_here" in logs and "in segfaults" in logs, logs
    no_leftovers(job.id)


# ----------------------------------------------------------------- tracebacks
def test_remote_traceback_names_the_users_file_and_shows_the_line(tmp_path, monkeypatch):
    """cloudpickle ships the function by value as "<dynamic-code>" without its lines; the
    rank's traceback reads File ".../train.py", line 11, in step with the source line, even
    though the file is gone by the time the rank runs."""
    with user_module(tmp_path, monkeypatch, "train") as (train_mod, src):
        job = gpujobs.submit(train_mod.fit, 5, gpus=1)
        src.unlink()  # the rank cannot read it from disk
        with pytest.raises(ValueError, match="loss is NaN at step 3") as info:
            job.result(timeout=120)
    tb = info.value.remote_traceback
    assert f'File "{src}", line 11, in step' in tb, tb
    assert 'raise ValueError(f"loss is NaN at step {i}")' in tb
    assert f'File "{src}", line 17, in fit' in tb and "step(i)" in tb
    assert "<dynamic-code>" not in tb
    assert f'File "{src}", line 11, in step' in job.logs()


def test_the_cause_comes_first_and_the_peers_noise_is_one_line(no_leftovers):
    job = gpujobs.job(fails_on_rank_one).ddp(gpus=3).submit()
    with pytest.raises(KeyError, match="label column missing") as info:
        job.result(timeout=180)
    exc = info.value
    assert exc.rank == 1
    notes = "\n".join(getattr(exc, "__notes__", []))
    assert "raised in rank 1" in notes
    folded = [n for n in notes.splitlines() if "because a peer went away" in n]
    assert len(folded) <= 1
    logs0 = job.logs(rank=0)
    assert "Traceback" not in logs0, logs0  # the peer's collateral error: one line, no traceback
    if folded:  # the peers lived long enough to report their collateral error
        assert "rank" in folded[0] and "then failed" in folded[0]
        assert "stopped because a peer rank failed" in logs0
    assert "Traceback" in job.logs(rank=1) and "label column missing" in job.logs(rank=1)
    assert "rank 1" in job.status().message
    no_leftovers(job.id)


# ----------------------------------------------------------- waiting with a bar
def test_wait_with_progress_shows_the_reports(capsys):
    from gpujobs.views.terminal import ProgressDisplay, wait_with_bar
    import io
    job = (gpujobs.job(train, 40, 0.1).ddp(gpus=1).env(GPUJOBS_PROGRESS_INTERVAL="0.2").submit())
    out = io.StringIO()
    st = wait_with_bar(job.backend, job.id, timeout=120, display=ProgressDisplay(out, live=False))
    assert st.phase == "succeeded"
    text = out.getvalue()
    assert "running" in text and "%" in text and "100%" in text, text
    assert job.wait(progress=True, timeout=30).phase == "succeeded"  # done: returns at once


SCRIPT = '''\
import time

import gpujobs


def main(n):
    ctx = gpujobs.context()
    for i in range(int(n)):
        ctx.progress(i + 1, total=int(n))
        time.sleep(0.1)
    return int(n)
'''


def test_cli_submit_wait_shows_progress(capsys, tmp_path, monkeypatch):
    (tmp_path / "prog_script.py").write_text(SCRIPT)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GPUJOBS_PROGRESS_INTERVAL", "0.2")
    code, out, err = cli(capsys, "submit", "prog_script.py:main", "20", "--gpus", "1", "--wait",
                         "--progress", "plain")
    assert code == 0, err
    assert "result: 20" in out
    assert "100%" in err and "succeeded" in err, err
