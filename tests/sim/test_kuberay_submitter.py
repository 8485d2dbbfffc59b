"""The simulated KubeRay's submitter Job, on hand-written RayJobs (not gpujobs' renderer): its
backoffLimit is spec.submitterConfig.backoffLimit, else 2 (kuberay@v1.7.0 rayjob_controller.go);
a failed submitter pod is replaced by one that follows the job's log again from the start."""
from __future__ import annotations

import pytest
from tests.support import wait_for

from gpujobs_sim import SimCluster


def rayjob(name: str, backoff: int | None) -> dict:
    pod = {"spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.52.0"}]}}
    spec: dict = {"entrypoint": "python -c 'raise SystemExit(1)'", "shutdownAfterJobFinishes": True,
                  "submitterPodTemplate": {"metadata": {"annotations": {
                      "sim.gpujobs.dev/logs": "driver output\n", "sim.gpujobs.dev/exit-code": "1"}},
                      "spec": {"restartPolicy": "Never", "containers": [{"name": "ray-job-submitter",
                                                                       "image": "rayproject/ray:2.52.0"}]}},
                  "rayClusterSpec": {"headGroupSpec": {"rayStartParams": {}, "template": pod},
                                     "workerGroupSpecs": []}}
    if backoff is not None:
        spec["submitterConfig"] = {"backoffLimit": backoff}
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": name, "namespace": "default"},
            "spec": spec}


@pytest.mark.parametrize("backoff, pods", [(None, 3), (0, 1)])
def test_a_failed_submitter_is_retried_up_to_its_backoff_limit_each_printing_the_output_again(backoff, pods):
    with SimCluster(gpus=None, cpus=None, run_seconds=0.1) as sim:
        sim.store.create(rayjob("r", backoff))
        st = wait_for(lambda: ((sim.store.get("ray.io/v1", "RayJob", "r", "default") or {}).get("status") or {})
                      .get("jobDeploymentStatus") == "Failed" and True, timeout=30)
        assert st
        subs = sim.store.list("v1", "Pod", "default", "batch.kubernetes.io/job-name=r")
        assert len(subs) == pods and all(p["status"]["phase"] == "Failed" for p in subs)
        assert sim.store.get("batch/v1", "Job", "r", "default")["spec"]["backoffLimit"] == (2 if backoff is None else 0)
        for p in subs:
            data, _ = sim.server.logs.read("default", p["metadata"]["name"])
            assert data.count(b"driver output") >= 1
