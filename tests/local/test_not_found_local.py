"""An unknown job is JobNotFound on the local backend, through the agent's socket too (the
Kubernetes side: tests/k8s_submit/test_not_found.py)."""
from __future__ import annotations

import pytest

from gpujobs.backends.local import LocalBackend
from gpujobs.errors import JobNotFound

pytestmark = pytest.mark.slow


def test_an_unknown_job_is_not_found_with_and_without_an_agent(gpujobs_home):
    be = LocalBackend(gpujobs_home)
    with pytest.raises(JobNotFound):
        be.status("no-such-job")  # no agent yet: read from the state directory
    with pytest.raises(JobNotFound) as err:
        be.cancel("no-such-job")  # starts the agent: the error crosses its socket
    assert isinstance(err.value, LookupError) and err.value.field == "job_id"
    with pytest.raises(JobNotFound):
        be.status("no-such-job")  # asked of the running agent
