"""The simulated Kueue names Workloads and AppWrapper podSets as Kueue v0.17.0 does. The vectors
were read from real Kueue v0.17.0 Workloads (tests/realcp, 2026-12-02); the simulator used the
uid's first 5 characters as the hash and "<component>-<podSet>" as AppWrapper podSet names."""
from __future__ import annotations

import pytest

from gpujobs_sim import rules
from gpujobs_sim.kueue import workload_name

REAL = [  # (kind, apiVersion, job name, uid, the Workload name real Kueue gave it)
    ("AppWrapper", "workload.codeflare.dev/v1beta2", "double-2c2e62",
     "5c02721e-f0f0-4122-a524-c02f2255b60c", "appwrapper-double-2c2e62-2315c"),
    ("MPIJob", "kubeflow.org/v2beta1", "double-0bf2ba",
     "f7e562b6-6ae4-4d81-a17f-f9db1bd2bafd", "mpijob-double-0bf2ba-1ab24"),
    ("TrainJob", "trainer.kubeflow.org/v1alpha1", "double-7fc993",
     "08265922-47de-4218-a4e6-0bdbc8624306", "trainjob-double-7fc993-3fa3b"),
]


@pytest.mark.parametrize("kind,api_version,name,uid,expected", REAL, ids=[r[0] for r in REAL])
def test_workload_name_is_kueues(kind, api_version, name, uid, expected):
    assert workload_name(kind, api_version, name, uid) == expected


def test_appwrapper_pod_sets_are_named_after_the_appwrapper_in_order():
    comp = {"template": {"spec": {"tasks": [{"template": {"spec": {"containers": []}}}] * 2}}}
    aw = {"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
          "metadata": {"name": "aw"},
          "spec": {"components": [
              {**comp, "podSets": [{"path": "template.spec.tasks[0].template", "replicas": 2},
                                   {"path": "template.spec.tasks[1].template"}]},
              {**comp, "podSets": [{"path": "template.spec.tasks[0].template", "replicas": 3}]}]}}
    assert [(p.name, p.count) for p in rules.pod_sets(aw)] == [("aw-0", 2), ("aw-1", 1), ("aw-2", 3)]
