"""Each zygote records how long it took to be ready in its home, so that the next agent's
forecast of a job held for a loading zygote says when, not only "any moment"."""
from __future__ import annotations

import json

from gpujobs.backends.local.zygote import LOAD_TIMES, load_times, record_load_time, start_zygote


def test_load_times_are_recorded_per_zygote_and_read_back(tmp_path):
    assert load_times(tmp_path) == {}
    record_load_time(tmp_path / LOAD_TIMES, False, 4.234)
    record_load_time(tmp_path / LOAD_TIMES, True, 0.61)
    record_load_time(tmp_path / LOAD_TIMES, False, 3.5)  # the last load counts
    assert load_times(tmp_path) == {False: 3.5, True: 0.61}
    assert json.loads((tmp_path / LOAD_TIMES).read_text()) == {"torch": 3.5, "lean": 0.61}
    assert [p.name for p in tmp_path.iterdir()] == [LOAD_TIMES]  # no temporary file left


def test_a_file_that_cannot_be_read_gives_no_load_time(tmp_path):
    (tmp_path / LOAD_TIMES).write_text("[1, 2")
    assert load_times(tmp_path) == {}
    (tmp_path / LOAD_TIMES).write_text('{"torch": "soon"}')
    assert load_times(tmp_path) == {}
    (tmp_path / LOAD_TIMES).write_text("[]")
    record_load_time(tmp_path / LOAD_TIMES, True, 1.0)  # best effort: not a dict, left alone
    assert load_times(tmp_path) == {}


def test_a_real_lean_zygote_records_its_load_before_it_says_ready(tmp_path):
    z, _ = start_zygote(tmp_path, lambda msg: None, lean=True)
    assert z is not None
    try:
        assert z.ready(60), "the lean zygote did not warm up"
        seconds = load_times(tmp_path)[True]
        assert 0.0 < seconds < 60.0
        assert False not in load_times(tmp_path)  # the torch zygote never started here
    finally:
        z.close()
        z.proc.wait(30)


def test_both_zygotes_recording_at_once_keep_both_times(tmp_path):
    """The torch and the lean zygote's reader threads may be ready together."""
    import threading

    for _ in range(20):
        (tmp_path / LOAD_TIMES).unlink(missing_ok=True)
        go = threading.Barrier(2)

        def rec(lean: bool) -> None:
            go.wait()
            record_load_time(tmp_path / LOAD_TIMES, lean, 2.0 if lean else 5.0)
        ts = [threading.Thread(target=rec, args=(lean,)) for lean in (False, True)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(10)
        assert load_times(tmp_path) == {False: 5.0, True: 2.0}
