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
    assert start_text(now + 10, now) == "starts now"
    texts = {start_text(now + s, now).split(" (")[0] for s in range(61, 89)}
    assert texts == {"starts in ~1 min"}  # not '61 s', '62 s', …
    assert start_text(now + 720, now).startswith("starts in ~12 min (")
    assert start_text(now + 3 * 3600, now).startswith("starts in ~3.0 h")
