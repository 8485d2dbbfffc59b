"""An unknown job is JobNotFound (a LookupError) on Kubernetes as it is locally, for status,
wait and cancel. Was: status/wait raised KubernetesError(404) and cancel returned silently."""
from __future__ import annotations

import pytest

from gpujobs.errors import JobNotFound


@pytest.mark.parametrize("call", ["status", "wait", "cancel"])
def test_an_unknown_job_is_not_found(backend, call):
    with pytest.raises(JobNotFound) as err:
        getattr(backend, call)("ml/no-such-job")
    assert isinstance(err.value, LookupError)
    assert err.value.field == "job_id" and "ml/no-such-job" in str(err.value)
