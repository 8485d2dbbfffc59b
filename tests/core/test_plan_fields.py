"""The public surface of [plan-eta]: JobStatus forecast fields, gpujobs.Plan, .max_runtime(),
.plan() on Kubernetes with no cluster configured."""
from __future__ import annotations

import pytest

import gpujobs
from gpujobs.backends.local.store import status_from_dict
from gpujobs.errors import BackendUnavailable, SpecError
from gpujobs.status import JobStatus


def f():
    return 1


def test_status_forecast_fields_default_empty_and_survive_json():
    st = JobStatus("j", "queued")
    assert (st.reason, st.blocked_by, st.expected_start, st.expected_start_basis) == ("", (), None, "")
    st = st.with_(blocked_by=("a", "b"), expected_start=123.0, expected_start_basis="declared limit")
    back = status_from_dict(st.to_dict())  # to_dict turns the tuple into a list
    assert back.blocked_by == ("a", "b") and back == st


def test_max_runtime_sets_the_spec_field_and_is_checked():
    assert gpujobs.job(f).max_runtime(3600).spec().max_runtime_s == 3600
    with pytest.raises(SpecError, match="max_runtime_s"):
        gpujobs.job(f).max_runtime(-1).spec()


def test_plan_is_exported_and_kubernetes_without_a_cluster_says_how_to_configure_one(monkeypatch):
    assert gpujobs.Plan.__name__ == "Plan" and "Plan" in gpujobs.__all__
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(BackendUnavailable, match="no Kubernetes configuration") as err:
        gpujobs.job(f).on("kubernetes").plan()
    assert "export KUBECONFIG=" in str(err.value)


def test_start_text_is_coarse_so_progress_lines_do_not_change_every_second():
    from gpujobs.status import start_text
    now = 1_000_000.0
    assert start_text(None) == "start unknown"
    assert start_text(now + 10, now) == "starts in ~10 s"  # never "now" for a later time
    assert {start_text(now + s, now) for s in (11.0, 12.4)} == {"starts in ~10 s"}
    texts = {start_text(now + s, now).split(" (")[0] for s in range(61, 89)}
    assert texts == {"starts in ~1 min"}  # not '61 s', '62 s', …
    assert start_text(now + 720, now).startswith("starts in ~12 min (")
    assert start_text(now + 3 * 3600, now).startswith("starts in ~3.0 h")


def test_one_start_text_in_every_view(monkeypatch):
    """summary(), the widget header, the DataFrame, `gpujobs queue`/`status`/`plan` all say the
    start the same way: never "now" beside a later time; overdue: "any moment (was due ...)";
    no forecast but a bound later than now: "not before ..."."""
    import time as _t

    from gpujobs.cli import output
    from gpujobs.status import JobStatus, Plan, start_when
    from gpujobs.views.frames import jobs_frame
    from gpujobs.views.html import header_html
    # local noon today: "now + 50 min" is the same day (near midnight the view adds the date,
    # "not before Dec 03 00:20", and the test failed at 23:30)
    now = _t.mktime(_t.localtime()[:3] + (12, 0, 0, 0, 0, -1))
    # the views read the clock themselves: hold it still, or a slow step says "in ~24 s" (seen
    # under load)
    monkeypatch.setattr(_t, "time", lambda: now)
    due = _t.strftime("%H:%M", _t.localtime(now - 120))
    later = _t.strftime("%H:%M", _t.localtime(now + 3000))
    cases = [(dict(expected_start=now + 25), "in ~25 s"),
             (dict(expected_start=now - 120), f"any moment (was due {due})"),
             (dict(expected_start=None, not_before=now + 3000, expected_start_basis="unknown: x"),
              f"not before {later}")]
    for fields, words in cases:
        assert start_when(fields["expected_start"], now, fields.get("not_before")) == words
        st = JobStatus("j", "queued", queue="a", queue_position=1, submitted_at=now - 5, **fields)
        assert f"starts {words}" in st.summary()
        assert f"starts {words}" in header_html(st)
        assert jobs_frame([st], now=now)["start"][0] == words
        _, rows = output.job_rows([st], wide=False, now=now)
        assert words in rows[0]
        assert f"starts {words}" in output.status_lines(st)
        p = Plan(False, 1, (), fields["expected_start"], "r", not_before=fields.get("not_before"), queue="a")
        assert f"starts {words}" in p.summary() and f"starts {words}" in output.plan_lines("j", p)
        for text in (st.summary(), header_html(st), output.status_lines(st), output.plan_lines("j", p)):
            assert "starts now" not in text and "Start:      now" not in text, text


def test_range_from_json_is_a_tuple():
    from gpujobs.status import JobStatus
    st = JobStatus("j", "queued", expected_start_range=[10.0, 20.0], not_before=5.0)  # as JSON gives it
    assert st.expected_start_range == (10.0, 20.0) and st.to_dict()["not_before"] == 5.0
