"""Pod sets parse each resource quantity once (gpujobs.quantity), with exact amounts."""
from __future__ import annotations

from decimal import Decimal

import pytest

from gpujobs.backends.kubernetes.kinds import base as kinds_base
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
    real = kinds_base.parse_quantity

    def counting(value, field, **kw):
        calls.append(value)
        return real(value, field, **kw)

    monkeypatch.setattr(kinds_base, "parse_quantity", counting)  # where each kind's pod sets parse them
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


def test_appwrapper_pod_sets_carry_the_names_kueue_gives_them():
    """Kueue v0.17.0 names an AppWrapper's podSets "<appwrapper>-<index>" (seen on real Workloads,
    tests/realcp); plan()'s Workload named them "<component>-<podSet>"."""
    import gpujobs
    from gpujobs.backends.kubernetes.render.job import RenderOptions, render_job
    spec = gpujobs.job(print).ddp(nodes=2, gpus_per_node=1).options(
        volcano="appwrapper", volcano_queue="vq").queue("q").spec()
    job = render_job(spec, opts=RenderOptions(namespace="ml")).job
    name = job["metadata"]["name"]
    sets = podsets.pod_sets(job)
    assert [s.name for s in sets] == [f"{name}-{i}" for i in range(len(sets))]
