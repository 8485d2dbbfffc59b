"""Announcing a stop (SIGTERM: preemption or cancel) to the function a rank runs.

A rank can get SIGTERM twice (the launcher's announcement and the process group's, or a cancel
during a preemption). The handler ran ``threading.Event.set``; the second signal arriving while
the first handler held the Event's lock deadlocked the rank: it never returned, never printed
its traceback, and was SIGKILLed at the end of the grace period (the flaky
tests/k8s_status/test_deadlines_and_kept_logs.py run of session 10).
"""
from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gpujobs.rank.context import JobContext
from gpujobs.rank.contract import GRACE_S, STOPPED_EXIT, RankEnv, stop_exit_after
from tests.support import interrupted_at_every_line


def a_context() -> JobContext:
    return JobContext(job_id="j", rank=0, world_size=1, local_rank=0, node_rank=0, device="cpu",
                      checkpoint_dir=Path("/nonexistent"), framework="ddp")


def test_a_stop_announced_inside_an_announcement_does_not_hang():
    ctx = a_context()
    assert not ctx.should_stop()
    assert interrupted_at_every_line(ctx.request_stop, ctx.request_stop), \
        "request_stop deadlocked when a second SIGTERM interrupted it"
    assert ctx.should_stop()


_RANK = """
import signal, sys, time
from pathlib import Path
from gpujobs.rank.context import JobContext
from gpujobs.rank.runner import exit_before_sigkill
ctx = JobContext(job_id="j", rank=3, world_size=4, local_rank=0, node_rank=0, device="cpu",
                 checkpoint_dir=Path("/nonexistent"), framework="ddp")
handler = sys.argv[1]
# "late": the Python-level handler has not run yet (the main thread waits in C: a rendezvous)
signal.signal(signal.SIGTERM, (lambda *_: None) if handler == "late" else (lambda *_: ctx.request_stop()))
exit_before_sigkill(ctx, 1.2)
if handler == "replaced":  # someone else's wakeup fd (an event loop's) replaces gpujobs'
    signal.set_wakeup_fd(-1)
print("ready", flush=True)
time.sleep(30)
print("returned", flush=True)
"""


@pytest.mark.parametrize("handler", ["late", "replaced"])
def test_a_stopped_rank_that_does_not_return_exits_143_before_its_grace_period_ends(handler):
    """On Kubernetes the kubelet SIGKILLs a rank at the end of its grace period, and the SIGKILL's
    137 matched a BatchJob's FailJob rule, failing a preempted job. The rank exits 143 (the
    STOPPED_EXIT its podFailurePolicy ignores) shortly before: from the signal's arrival even when
    the Python-level handler cannot run yet ("late"), and from the handler's flag when the wakeup
    fd is someone else's ("replaced")."""
    p = subprocess.Popen([sys.executable, "-c", _RANK, handler], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == STOPPED_EXIT == 143, (p.returncode, err)
    assert "returned" not in out
    assert "rank 3: still running near the end of its 1.2 s grace period after the stop: it exits 143 " \
           "before the SIGKILL" in err, err


def test_the_stop_exit_comes_a_third_of_the_grace_period_but_at_most_5_s_before_the_sigkill():
    assert stop_exit_after(3.0) == 2.0
    assert stop_exit_after(30.0) == 25.0
    assert stop_exit_after(0.0) == 0.0


def test_the_grace_period_travels_in_the_rank_contract():
    env = RankEnv(grace_s=2.5).to_env()
    assert env == {GRACE_S: "2.5"} and RankEnv.from_env(env).grace_s == 2.5
