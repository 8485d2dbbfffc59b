"""Pod sets parse each resource quantity once (gpujobs.quantity), with exact amounts."""
from __future__ import annotations

from decimal import Decimal

import pytest

from gpujobs.backends.kubernetes.render import podsets
from gpujobs.errors import SpecError


def _pod(requests: dict, limits: dict, sidecar: dict | None = None) -> dict:
    containers = [{"name": "main", "resources": {"requests": requests, "limits": limits}}]
    if sidecar:
        containers.append({"name": "side", "resources": {"requests": sidecar}})
    return {"spec": {"containers": containers}}


JOB = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "spec": {"pytorchReplicaSpecs": {
    "Master": {"replicas": 1, "template": _pod({"cpu": "500m", "memory": "1.5Gi"},
                                               {"memory": "1.5Gi", "nvidia.com/gpu": 1})},
    "Worker": {"replicas": 3, "template": _pod({"cpu": 2, "memory": "1e9"}, {"nvidia.com/gpu": "2"},
                                               sidecar={"cpu": "250m", "memory": "64Mi"})},
}}}


def test_each_quantity_is_parsed_once(monkeypatch):
    calls = []
    real = podsets.parse_quantity

    def counting(value, field, **kw):
        calls.append(value)
        return real(value, field, **kw)

    monkeypatch.setattr(podsets, "parse_quantity", counting)
    sets = podsets.pod_sets(JOB)
    total = podsets.total_requests(sets)
    # master: cpu, memory (request wins over the limit), gpu; worker: cpu, memory, gpu + sidecar cpu, memory
    assert len(calls) == 8
    assert total == {"cpu": Decimal("0.5") + 3 * Decimal("2.25"),
                     "memory": Decimal(3 * 2**29) + 3 * (10**9 + 64 * 2**20),
                     "nvidia.com/gpu": 1 + 3 * 2}
    assert len(calls) == 8  # total_requests reuses the parsed amounts
    assert all(isinstance(v, Decimal) for ps in sets for v in ps.requests.values())


def test_a_bad_quantity_names_the_container():
    bad = _pod({"memory": "lots"}, {})
    with pytest.raises(SpecError) as err:
        podsets.container_requests(bad["spec"]["containers"])
    assert "containers[0] (main) resources memory" == err.value.field and "lots" in str(err.value)
