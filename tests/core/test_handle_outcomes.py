"""The Job handle opens each rank's result envelope once (issue 32): ``exception()`` then
``result()``, or ``result()`` twice, verify and unpickle each envelope one time and read the
backend's outcomes one time; the values and errors are those of the first call."""
from __future__ import annotations

import pytest

import gpujobs.handle as handle
from gpujobs.handle import Job
from gpujobs.payload import Outcome, new_key, seal
from gpujobs.status import JobStatus


class EndedBackend:
    """A job that has ended with one envelope per rank; counts the reads of its outcomes."""
    name = "fake"

    def __init__(self, outcomes: list[Outcome], phase: str):
        self.key = new_key()
        self.blobs = {o.rank: seal(o, self.key) for o in outcomes}
        self.phase = phase
        self.reads = 0

    def wait(self, job_id, timeout=None):
        return JobStatus(job_id=job_id, phase=self.phase, backend=self.name)

    def outcomes(self, job_id):
        self.reads += 1
        return dict(self.blobs)

    def job_key(self, job_id):
        return self.key

    def submit(self, spec): raise NotImplementedError  # noqa: E704
    def status(self, job_id): raise NotImplementedError  # noqa: E704
    def logs(self, job_id, rank=None, follow=False): raise NotImplementedError  # noqa: E704
    def cancel(self, job_id): raise NotImplementedError  # noqa: E704
    def jobs(self, queue=None): raise NotImplementedError  # noqa: E704
    def subscribe(self, job_id, callback): raise NotImplementedError  # noqa: E704
    def render(self, spec, kind=None): raise NotImplementedError  # noqa: E704


@pytest.fixture
def opened(monkeypatch) -> list[bytes]:
    """Every envelope the handle verifies and unpickles, in order."""
    seen: list[bytes] = []
    real = handle.open_envelope

    def counting(blob, key):
        seen.append(blob)
        return real(blob, key)
    monkeypatch.setattr(handle, "open_envelope", counting)
    return seen


def test_exception_then_result_twice_opens_each_envelope_once(opened):
    be = EndedBackend([Outcome.success(0, {"loss": 0.5}), Outcome.success(1, {"loss": 0.7})],
                      "succeeded")
    job = Job("exp-1", be)
    assert job.exception() is None
    assert job.result() == [{"loss": 0.5}, {"loss": 0.7}]
    assert job.result() == [{"loss": 0.5}, {"loss": 0.7}]
    assert sorted(opened) == sorted(be.blobs.values()) and be.reads == 1


def test_a_failed_job_raises_the_same_error_each_time_from_one_opening(opened):
    be = EndedBackend([Outcome.failure(0, KeyError("missing_key"))], "failed")
    job = Job("exp-2", be)
    assert isinstance(job.exception(), KeyError)
    for _ in range(2):
        with pytest.raises(KeyError, match="missing_key"):
            job.result()
    assert opened == [be.blobs[0]] and be.reads == 1

