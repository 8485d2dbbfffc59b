"""A pod deleted and created again under the same name (operators name pods by job and rank,
so a requeued job does this): the old pod's ending must not be written on the new pod, and
every process started is stopped, the replaced one too."""
from __future__ import annotations

import sys
import threading
import time

import psutil
from tests.support import wait_for

from gpujobs_sim import SimCluster
from gpujobs_sim.apiserver import FakeApiServer
from gpujobs_sim.kubelet import ANN_SECONDS, Kubelet


def pod(seconds: float) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default",
                                                           "annotations": {ANN_SECONDS: str(seconds)}},
            "spec": {"containers": [{"name": "main", "image": "x"}]}}


def test_old_pods_end_is_not_written_on_the_new_pod_of_its_name():
    with SimCluster(gpus=None, cpus=None) as sim:
        sim.store.create(pod(0.6))
        wait_for(lambda: sim.store.get("v1", "Pod", "p", "default")["status"].get("phase") == "Running")
        sim.store.delete("v1", "Pod", "p", "default")
        new = sim.store.create(pod(30))
        wait_for(lambda: sim.store.get("v1", "Pod", "p", "default")["status"].get("phase") == "Running")
        time.sleep(1.0)  # the old pod's 0.6 s are over
        cur = sim.store.get("v1", "Pod", "p", "default")
        assert cur["metadata"]["uid"] == new["metadata"]["uid"] and cur["status"]["phase"] == "Running"


def test_process_of_a_pod_deleted_while_starting_is_killed_and_stop_kills_replaced_ones():
    kubelet = Kubelet(FakeApiServer())  # not started: the kubelet only needs its store and log buffer
    try:
        t0 = time.monotonic()
        code = kubelet._exec("default", "gone", [sys.executable, "-c", "import time; time.sleep(60)"], {},
                             uid="no-such-pod")
        assert code != 0 and time.monotonic() - t0 < 10
        # two processes under one pod name: stop() kills both
        for _ in range(2):
            threading.Thread(target=kubelet._exec, args=("default", "same", [
                sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "time.sleep(60)"], {}), daemon=True).start()
        wait_for(lambda: len(kubelet.started_pids) == 3)
    finally:
        pids = kubelet.stop()
    alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert len(pids) == 3 and not alive
