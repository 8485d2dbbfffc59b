"""A job's local submit record leads status, cancel and jobs() to the right kind."""
from __future__ import annotations

import pytest

from gpujobs.backends.kubernetes import KubernetesBackend, keys
from gpujobs.backends.kubernetes.status import live
from gpujobs.backends.kubernetes.kinds import KINDS


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_recorded_kind_is_found_again(kind, tmp_path):
    """Regression: a VolcanoJob (object kind "Job") was recorded but never recognised, so its
    status said "not found", cancel() did nothing and jobs() left it out."""
    info = KINDS[kind]
    keys.save_record(keys.JobRecord("ns", "j", kind, info.api_version, info.plural), tmp_path)
    backend = KubernetesBackend(host="http://127.0.0.1:9", namespace="ns", home=tmp_path)
    assert live.kind_of(backend, "ns", "j") == kind
