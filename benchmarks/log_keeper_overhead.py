"""What the log keeper (gpujobs/backends/kubernetes/status/log_keeper.py) adds to a status hub
flush: 1,000 admitted jobs with Kueue's maximumExecutionTimeSeconds (each arms its deadline once),
4,000 running pods, nothing about to be deleted (the common case: no log is read), timed without
and with the keeper as the hub's observer. Caches are filled directly (no API server).

    .venv/bin/python benchmarks/log_keeper_overhead.py [--jobs 1000] [--repeat 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from gpujobs.backends.kubernetes.naming import LABEL_JOB  # noqa: E402
from gpujobs.backends.kubernetes.status.hub import INDEXERS, PODS, WL, StatusHub  # noqa: E402
from gpujobs.backends.kubernetes.status.informer import Informer  # noqa: E402
from gpujobs.backends.kubernetes.status.log_keeper import LogKeeper  # noqa: E402


def one_flush(n: int, keeper: bool) -> float:
    hub = StatusHub(None, "default", flush_interval=0.0)
    k = LogKeeper(None, lambda job_id, text: None)
    if keeper:
        hub.observers.append(k.observe)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    jobs, wls, pods = {}, {}, {}
    for i in range(n):
        name, uid = f"job-{i:04d}", f"uid-{i:04d}"
        jobs[name] = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {
            "name": name, "uid": uid, "resourceVersion": "1", "labels": {LABEL_JOB: name}},
            "spec": {"runPolicy": {"activeDeadlineSeconds": 86400},
                     "pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 3}}},
            "status": {"conditions": [{"type": "Running", "status": "True"}]}}
        wls[f"wl-{name}"] = {"metadata": {"name": f"wl-{name}", "resourceVersion": "1",
                                          "ownerReferences": [{"uid": uid}]},
                             "spec": {"maximumExecutionTimeSeconds": 95040},
                             "status": {"conditions": [{"type": "QuotaReserved", "status": "True"},
                                                       {"type": "Admitted", "status": "True",
                                                        "lastTransitionTime": now}]}}
        for r in range(4):
            pods[f"{name}-{r}"] = {"metadata": {"name": f"{name}-{r}", "uid": f"{uid}-{r}", "resourceVersion": "1",
                                                "labels": {LABEL_JOB: name}}, "status": {"phase": "Running"}}
    for res, cb, items in ((("kubeflow.org", "v1", "pytorchjobs"), hub._on_job, jobs),
                           (WL, hub._on_workload, wls), (PODS, hub._on_pod, pods)):
        inf = Informer(None, *res, "default", cb, lock=hub._lock, indexers=INDEXERS.get(res))
        hub._informers[res] = inf
        with hub._lock:
            inf._apply_list(items)
    hub._wake.set()
    t0 = time.perf_counter()
    hub._flush_once()
    took = time.perf_counter() - t0
    k.stop()
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    for keeper in (False, True):
        times = [one_flush(a.jobs, keeper) * 1000 for _ in range(a.repeat)]
        print(f"flush of {a.jobs} jobs, keeper {'on ' if keeper else 'off'}: median {statistics.median(times):.1f} ms "
              f"(min {min(times):.1f}, max {max(times):.1f}, {a.repeat} runs)")


if __name__ == "__main__":
    main()
