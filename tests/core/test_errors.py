"""One error per situation: every gpujobs error is rebuilt field for field across the local
agent's socket and by pickle, and the common ones are exported from ``gpujobs``."""
from __future__ import annotations

import inspect
import json
import pickle

import pytest

import gpujobs
from gpujobs import errors
from gpujobs.backends.local import protocol

# one instance of each error, built with every constructor field it has
SAMPLES = [
    errors.GpuJobsError("plain"),
    errors.SpecError("gpus", "must be >= 0", "pass gpus=1"),
    errors.SpecError("gpus", "must be >= 0", errors.Fix.set("gpus", 1, "pass {} or more")),
    errors.PayloadError("fn", "cannot pickle a lock", None),
    errors.JobNotFound("job_id", "no local job 'x'", "list jobs with gpujobs.jobs()"),
    errors.SubmitError("refused"),
    errors.PreflightError("LocalQueue ml/team-a", "does not exist: colon: inside"),
    errors.PreflightError("LocalQueue ml/team-a", "does not exist", errors.Fix.set("queue", "NAME", "pass {}")),
    errors.QuotaError("too big"),
    errors.BackendError("broke"),
    errors.BackendUnavailable("no agent"),
    errors.StateError("state.db corrupt"),
    errors.KubernetesError("forbidden", status=403, reason="Forbidden"),
    errors.BackendAPIError("gone", status=404, reason="NotFound"),
    errors.JobError("ended"),
    errors.JobFailedError("rank 1 exited 3", rank=1, exit_code=3),
    errors.JobCancelledError("cancelled"),
    errors.JobLostError("agent killed"),
    errors.RemoteError("mymod.Boom", "it broke", rank=2, remote_traceback="Traceback ...\n"),
    errors.JobStateError("not running"),
    errors.ResultAuthError("bad HMAC"),
    errors.WaitTimeout("waited 3 s"),
    errors.WaitTimeout("waited 3 s", errors.Fix.run("cancel", "j-1", "{} stops it")),
]


def fields(exc: BaseException) -> dict:
    return {k: v for k, v in vars(exc).items() if not k.startswith("__")}


def test_samples_cover_every_error_class():
    classes = {c for _, c in inspect.getmembers(errors, inspect.isclass)
               if issubclass(c, errors.GpuJobsError)}
    assert classes == {type(e) for e in SAMPLES}


@pytest.mark.parametrize("exc", SAMPLES, ids=lambda e: type(e).__name__)
def test_an_error_crosses_the_agent_socket_as_itself(exc):
    """Was: raise_reply rebuilt ``cls(message)``: a PreflightError raised a TypeError, a
    KubernetesError lost its status, a JobFailedError its rank and exit code."""
    reply = json.loads(json.dumps(protocol.error_reply(exc)))  # what the wire carries
    with pytest.raises(errors.GpuJobsError) as got:
        protocol.raise_reply(reply)
    assert type(got.value) is type(exc)
    assert str(got.value) == str(exc)
    assert fields(got.value) == fields(exc)


@pytest.mark.parametrize("exc", SAMPLES, ids=lambda e: type(e).__name__)
def test_an_error_pickles_as_itself(exc):
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is type(exc) and str(back) == str(exc) and fields(back) == fields(exc)


def test_a_foreign_exception_in_the_agent_arrives_as_a_backend_error():
    reply = json.loads(json.dumps(protocol.error_reply(KeyError("k"))))
    with pytest.raises(errors.BackendError, match="agent error: KeyError"):
        protocol.raise_reply(reply)


def test_a_reply_of_an_older_agent_still_rebuilds_a_spec_error():
    reply = {"ok": False, "error": "JobNotFound", "field": "job_id", "problem": "no local job 'x'",
             "fix": "list jobs", "message": "job_id: no local job 'x' (fix: list jobs)"}
    with pytest.raises(errors.JobNotFound) as got:
        protocol.raise_reply(reply)
    assert got.value.field == "job_id" and got.value.fix == "list jobs"


def test_job_not_found_is_a_lookup_error_and_exported():
    assert issubclass(errors.JobNotFound, LookupError)
    for name in ("GpuJobsError", "SpecError", "JobNotFound", "SubmitError", "PreflightError",
                 "BackendError", "BackendUnavailable", "JobError", "JobFailedError",
                 "JobCancelledError", "WaitTimeout"):
        assert getattr(gpujobs, name) is getattr(errors, name)
        assert name in gpujobs.__all__


def test_kubernetes_error_is_the_kubernetes_case_of_a_generic_api_error():
    """The core reads BackendAPIError's status; ``except gpujobs.errors.KubernetesError`` still works."""
    exc = errors.KubernetesError("forbidden", status=403, reason="Forbidden")
    assert isinstance(exc, errors.BackendAPIError) and isinstance(exc, errors.BackendError)
    with pytest.raises(errors.KubernetesError):
        raise exc
    assert (exc.status, exc.reason) == (403, "Forbidden")
