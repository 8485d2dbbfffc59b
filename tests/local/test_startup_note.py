"""#31 item 8: a gang whose ranks take long to reach the job's function (imports, a cold start
of a new agent's first gang, the rendezvous) says which ranks, long before a time limit or the
stall floor (60 s) shows anything. Seen once: a 4-rank sleep(25) job under heavy load ran into
its 60 s limit with no output, no stacks and no exit files."""
from __future__ import annotations

import time

import pytest

from gpujobs.backends.local.startup import not_started, note_after, startup_note


def test_note_names_the_ranks_that_have_not_reached_the_function(tmp_path):
    for r in (0, 2):
        (tmp_path / f"started-{r}").touch()
    assert not_started(tmp_path, range(4)) == [1, 3]
    assert startup_note(tmp_path, range(4), 100.0, 110.0, after=20) == ""  # too early to say
    note = startup_note(tmp_path, range(4), 100.0, 145.0, after=20)
    assert note.startswith("ranks 1, 3 have not started the job's function 45 s after launch"), note
    assert startup_note(tmp_path, [1], 100.0, 145.0, after=20).startswith("rank 1 has not")
    assert startup_note(tmp_path, range(4), 100.0, 145.0, after=0) == ""  # turned off
    for r in (1, 3):
        (tmp_path / f"started-{r}").touch()
    assert startup_note(tmp_path, range(4), 100.0, 145.0, after=20) == ""


def test_note_after_reads_the_jobs_env_then_the_process(monkeypatch):
    monkeypatch.delenv("GPUJOBS_STARTUP_NOTE_S", raising=False)
    assert note_after({}) == 20.0
    monkeypatch.setenv("GPUJOBS_STARTUP_NOTE_S", "7")
    assert note_after({}) == 7.0 and note_after({"GPUJOBS_STARTUP_NOTE_S": "3"}) == 3.0


class SlowToArrive:
    """Unpickling it (in the rank, before the function is called) takes 12 s in rank 1."""

    def __init__(self):
        self.label = "arrived"

    def __setstate__(self, state):
        import os
        import time as _time
        if os.environ.get("RANK") == "1":
            _time.sleep(12)
        self.__dict__.update(state)


def arrived(token):
    return token.label


@pytest.mark.slow
def test_a_rank_slow_to_start_is_named_in_the_status(gpujobs_home, monkeypatch, no_leftovers):
    import gpujobs
    monkeypatch.setenv("GPUJOBS_LOCAL_GPUS", "2")
    job = gpujobs.job(arrived, SlowToArrive()).env(GPUJOBS_STARTUP_NOTE_S="3").ddp(gpus=2).submit()
    seen = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        st = job.status()
        seen.append(st.message)
        if st.terminal or "has not started" in st.message:
            break
        time.sleep(0.5)
    # rank 0 waits for rank 1 in the rendezvous: neither has reached the function
    assert any("ranks 0, 1 have not started the job's function" in m for m in seen), seen
    assert job.result(timeout=120) == "arrived"
    final = job.status()
    assert "has not started" not in final.message, final.message
    no_leftovers(job.id)
