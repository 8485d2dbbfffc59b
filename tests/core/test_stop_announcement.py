"""Announcing a stop (SIGTERM: preemption or cancel) to the function a rank runs.

A rank can get SIGTERM twice (the launcher's announcement and the process group's, or a cancel
during a preemption). The handler ran ``threading.Event.set``; the second signal arriving while
the first handler held the Event's lock deadlocked the rank: it never returned, never printed
its traceback, and was SIGKILLed at the end of the grace period (the flaky
tests/k8s_status/test_deadlines_and_kept_logs.py run of session 10).
"""
from __future__ import annotations

from pathlib import Path

from gpujobs.rank.context import JobContext
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
