"""The simulated kubelet kills a pod process that starts while it is stopping."""
from __future__ import annotations

import sys
import time

from gpujobs.sim.apiserver import FakeApiServer
from gpujobs.sim.kubelet import Kubelet


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
