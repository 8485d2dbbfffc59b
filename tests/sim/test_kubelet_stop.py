"""The simulated kubelet kills a pod process that starts while it is stopping."""
from __future__ import annotations

import sys
import time

import pytest

from gpujobs_sim.apiserver import FakeApiServer
from gpujobs_sim.kubelet import Kubelet


def test_process_started_after_stop_took_its_list_is_killed():
    server = FakeApiServer()  # not started: the kubelet only needs its store and log buffer
    kubelet = Kubelet(server)
    try:
        kubelet.stopping.set()  # stop() has begun and already collected the processes
        t0 = time.monotonic()
        code = kubelet._exec("ns", "late-pod", [sys.executable, "-c", "import time; time.sleep(60)"],
                             {})
        assert time.monotonic() - t0 < 10
        assert code != 0
        proc = kubelet.procs[("ns", "late-pod")]
        assert proc.poll() is not None  # nothing survives
    finally:
        kubelet.stop()


def test_a_pod_whose_volume_source_vanished_waits_instead_of_failing():
    """Like the real kubelet (FailedMount, retried): the pod stays Pending until it can mount."""
    from gpujobs_sim.volumes import MissingSource, volume_files

    server = FakeApiServer()
    kubelet = Kubelet(server)
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "ns", "labels": {"gpujobs.dev/job": "j"}},
           "spec": {"containers": [{"name": "c", "command": ["true"],
                                    "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}]}],
                    "volumes": [{"name": "cfg", "configMap": {"name": "gone"}}]},
           "status": {"phase": "Pending"}}
    try:
        created = server.store.create(pod)
        kubelet._threads[created["metadata"]["uid"]] = None
        kubelet._run(created)  # the ConfigMap vanished after _volumes_ready said yes
        st = server.store.get("v1", "Pod", "p", "ns")
        assert st["status"]["phase"] == "Pending"
        assert created["metadata"]["uid"] not in kubelet._threads  # the next tick tries again
        with pytest.raises(MissingSource, match="'missing' of cm"):
            volume_files(pod, {"name": "v", "configMap": {"name": "cm", "items": [
                {"key": "missing", "path": "x"}]}}, lambda kind, name: {"data": {"other": "1"}})
    finally:
        kubelet.stop()


def test_a_ray_driver_that_ends_after_its_pod_was_deleted_marks_nothing():
    """The CI run of stop 43: the RayJob (and its submitter pod) went while the driver was still
    printing; its end patched the gone pod and the kubelet's thread died with NotFound."""
    from gpujobs_sim.kubelet import ANN_RAY_JOB_STATUS

    server = FakeApiServer()
    kubelet = Kubelet(server)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sub", "namespace": "ns"},
           "spec": {"containers": [{"name": "c", "command": ["true"]}]}, "status": {"phase": "Running"}}
    try:
        created = server.store.create(pod)
        server.store.delete("v1", "Pod", "sub", "ns", now=True)
        kubelet._ray_job_ended(created, 0)  # no error: the pod is gone
        again = server.store.create(pod)  # a new pod of the same name is not the old one's
        kubelet._ray_job_ended(created, 0)
        assert ANN_RAY_JOB_STATUS not in (server.store.get("v1", "Pod", "sub", "ns")["metadata"]
                                          .get("annotations") or {})
        kubelet._ray_job_ended(again, 1)
        assert server.store.get("v1", "Pod", "sub", "ns")["metadata"]["annotations"][ANN_RAY_JOB_STATUS] == "FAILED"
    finally:
        kubelet.stop()
