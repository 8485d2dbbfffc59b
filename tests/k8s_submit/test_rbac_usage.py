"""Every request a submit makes is covered by docs/rbac.yaml (or open to all users)."""
from __future__ import annotations

import pytest

from gpujobs.backends.kubernetes.submit.rbac import verbs_by_resource

from .test_submit import SPECS

# plural -> API group, for what the fake server counts
_GROUPS = {"trainjobs": "trainer.kubeflow.org", "pytorchjobs": "kubeflow.org", "mpijobs": "kubeflow.org",
           "rayjobs": "ray.io", "appwrappers": "workload.codeflare.dev", "configmaps": "",
           "secrets": "", "localqueues": "kueue.x-k8s.io"}
# cluster-scoped reads: optional (skipped with a warning on 403), not in the namespaced Role
_OPTIONAL = {"clusterqueues", "workloadpriorityclasses", "clustertrainingruntimes", "queues",
             "customresourcedefinitions"}  # the TrainJob CRD: which Trainer API (preflight.check_trainer_api)


@pytest.mark.parametrize("kind", list(SPECS))
def test_submit_uses_only_role_verbs(server, backend, kind):
    server.reset_counts()
    backend.submit(SPECS[kind]())
    allowed = verbs_by_resource()
    used = {k for k in server.counts if isinstance(k, tuple)}
    assert used, "the fake server counted no resource requests"
    for verb, plural in used:
        if plural in _OPTIONAL:
            assert verb == "get"
            continue
        group = "batch.volcano.sh" if plural == "jobs" else _GROUPS[plural]
        assert verb in allowed[(group, plural)], (verb, group, plural)
