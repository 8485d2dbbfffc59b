"""Stall flags of a running local gang (gpujobs.backends.local.liveness, .stacks): one event
when raised, one when cleared, a stable text that is also the status message, and the user's
own frame named (issue 27)."""
from __future__ import annotations

import sysconfig

from gpujobs.backends.local.liveness import GangWatch, stall_changes
from gpujobs.backends.local.records import Rec
from gpujobs.backends.local.stacks import where
from gpujobs.status import JobStatus


def test_the_stall_text_stays_the_same_while_the_same_ranks_are_quiet(tmp_path):
    (tmp_path / "results").mkdir()
    watch = GangWatch(tmp_path, {0: 2 ** 22 + 7}, {"GPUJOBS_STALL_FLOOR_S": "2",
                                                    "GPUJOBS_STALL_FACTOR": "1"}, now=1000.0)
    assert watch.observe(now=1001.0)[1] is None  # quiet for 1 s: under the floor
    texts = {watch.observe(now=t)[2] for t in (1005.0, 1006.0, 1030.0)}
    assert len(texts) == 1 and "rank 0" in texts.pop()


def test_one_stalled_event_when_raised_one_moving_when_cleared_and_the_message_follows():
    rec = Rec("j", 1, JobStatus(job_id="j", phase="running"), spec=None)
    rounds = [(None, None, "")] + [(None, 50.0, "stalled? rank 0 quiet since …")] * 30 + \
             [(None, None, "")] * 3
    messages = []
    for seen in rounds:
        changes: dict = {}
        stall_changes(rec, seen, changes, None)
        rec.status = rec.status.with_(**changes)
        messages.append(rec.status.message)
    kinds = [e.kind for e in rec.status.events]
    assert kinds == ["stalled", "moving"], kinds
    assert messages[1] == "stalled? rank 0 quiet since …" == messages[30]
    assert messages[-1] == "" and rec.status.stalled_since is None


def test_the_user_s_innermost_frame_is_named_not_torch_s():
    site = sysconfig.get_paths()["purelib"]
    dump = ("Current thread 0x00007f (most recent call first):\n"
            f'  File "{site}/torch/distributed/distributed_c10d.py", line 2501 in all_reduce\n'
            f'  File "{site}/torch/distributed/c10d_logger.py", line 83 in wrapper\n'
            '  File "/home/me/project/train.py", line 42 in step\n'
            '  File "/home/me/project/train.py", line 60 in main\n')
    assert where(dump) == "step (train.py:42)"
    only_libs = ("Current thread 0x00007f (most recent call first):\n"
                 f'  File "{site}/torch/distributed/distributed_c10d.py", line 2501 in all_reduce\n')
    assert where(only_libs) == "all_reduce (distributed_c10d.py:2501)"
