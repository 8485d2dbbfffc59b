"""Status fan-out: gpujobs' shared watches vs per-job polling, 1,000 jobs in one namespace.

The fake apiserver runs in a child process with N PyTorchJobs; a driver there flips job
statuses (Created <-> Running) at a steady rate and stamps each change with its time.
In this process, in one run:

1. gpujobs: one StatusHub (shared informers per kind) subscribed to every job;
2. polling: one GET per job per ``--interval`` seconds, mapped with the same status_map.

Reported for each: requests per minute in steady state, event-to-JobStatus latency
(p50/p95), client CPU seconds per minute and memory (RSS growth), then the ratios.

    .venv/bin/python benchmarks/status_fanout.py            # 1,000 jobs, 20 s windows
    .venv/bin/python benchmarks/status_fanout.py --quick    # 300 jobs, 8 s windows
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import psutil  # noqa: E402

API = "kubeflow.org/v1"


def server_main(n: int, rate: float, conn) -> None:
    from gpujobs_sim import FakeApiServer

    srv = FakeApiServer(crds=["kubeflow.org"], history_limit=50000).start()
    for i in range(n):
        srv.store.create({"apiVersion": API, "kind": "PyTorchJob", "metadata": {
            "name": f"job-{i:04d}", "labels": {"gpujobs.dev/job": f"job-{i:04d}"}},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 1}}},
            "status": {"conditions": [{"type": "Created", "status": "True", "reason": "PyTorchJobCreated"}]}})
    conn.send(srv.port)
    stop = threading.Event()

    def drive() -> None:
        i = 0
        while not stop.is_set():
            name = f"job-{i % n:04d}"
            running = (i // n) % 2 == 0

            def flip(o: dict, running: bool = running) -> None:
                conds = [{"type": "Created", "status": "True", "reason": "PyTorchJobCreated"}]
                if running:
                    conds.append({"type": "Running", "status": "True", "reason": "PyTorchJobRunning"})
                o["status"] = {"conditions": conds, "benchTs": time.time()}
            srv.store.mutate(API, "PyTorchJob", name, "default", flip)
            i += 1
            time.sleep(1.0 / rate)

    t = threading.Thread(target=drive, daemon=True)
    while True:
        cmd = conn.recv()
        if cmd == "drive":
            t.start()
        elif cmd == "counts":
            conn.send(dict((k, v) for k, v in srv.counts.items() if isinstance(k, str)))
        elif cmd == "stop":
            stop.set()
            srv.stop()
            conn.send("bye")
            return


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def total(counts: dict) -> int:
    return sum(counts.values())


def measure(conn, window: float, run) -> dict:
    proc = psutil.Process()
    conn.send("counts")
    before = total(conn.recv())
    cpu0 = proc.cpu_times()
    t0 = time.monotonic()
    lat = run(window)
    dt = time.monotonic() - t0
    cpu1 = proc.cpu_times()
    conn.send("counts")
    after = total(conn.recv())
    cpu = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
    return {"req_per_min": (after - before) * 60 / dt, "p50": pct(lat, 0.5), "p95": pct(lat, 0.95),
            "events": len(lat), "cpu_s_per_min": cpu * 60 / dt}


def bench_hub(port: int, n: int, window: float, conn) -> dict:
    from kubernetes import client

    from gpujobs.backends.kubernetes.status.hub import StatusHub

    rss0 = psutil.Process().memory_info().rss
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{port}"
    hub = StatusHub(client.ApiClient(cfg), "default").start()
    hub.track_kind("PyTorchJob")
    hub.wait_synced(60)
    lat: list[float] = []
    recording = threading.Event()

    def cb_for(name: str):
        def cb(st) -> None:
            if recording.is_set():
                ts = ((hub._jobs.get(name) or {}).get("status") or {}).get("benchTs")
                if ts:
                    lat.append(time.time() - ts)
        return cb
    for i in range(n):
        hub.subscribe(f"job-{i:04d}", cb_for(f"job-{i:04d}"))
    time.sleep(2.0)  # initial flush of 1,000 statuses

    def run(w: float) -> list[float]:
        recording.set()
        time.sleep(w)
        recording.clear()
        return list(lat)
    out = measure(conn, window, run)
    out["rss_mb"] = (psutil.Process().memory_info().rss - rss0) / 2**20
    out["statuses"] = len(hub.all())
    hub.stop()
    return out


def bench_poll(port: int, n: int, window: float, interval: float, conn) -> dict:
    from kubernetes import client

    from gpujobs.backends.kubernetes.status.mapping import job_status

    rss0 = psutil.Process().memory_info().rss
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{port}"
    api = client.CustomObjectsApi(client.ApiClient(cfg))
    last: dict[str, float] = {}
    phase: dict[str, str] = {}

    def run(w: float) -> list[float]:
        lat: list[float] = []
        end = time.monotonic() + w
        while time.monotonic() < end:
            start = time.monotonic()
            for i in range(n):
                name = f"job-{i:04d}"
                obj = api.get_namespaced_custom_object("kubeflow.org", "v1", "default", "pytorchjobs", name)
                st = job_status(f"default/{name}", obj)
                ts = (obj.get("status") or {}).get("benchTs")
                if ts and ts != last.get(name):
                    if name in last:
                        lat.append(time.time() - ts)
                    last[name] = ts
                phase[name] = st.phase
                if time.monotonic() > end:
                    break
            time.sleep(max(0.0, interval - (time.monotonic() - start)))
        return lat
    run(interval)  # warm: learn every job's current stamp
    out = measure(conn, window, run)
    out["rss_mb"] = (psutil.Process().memory_info().rss - rss0) / 2**20
    out["statuses"] = len(phase)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--window", type=float, default=20.0)
    ap.add_argument("--rate", type=float, default=50.0, help="status changes per second (all jobs)")
    ap.add_argument("--interval", type=float, default=5.0, help="polling interval per job")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.jobs, a.window = 300, 8.0
    parent, child = mp.Pipe()
    p = mp.get_context("spawn").Process(target=server_main, args=(a.jobs, a.rate, child), daemon=True)
    p.start()
    port = parent.recv()
    parent.send("drive")
    print(f"{a.jobs} jobs, {a.rate:g} status changes/s, {a.window:g} s windows, polling every {a.interval:g} s")
    hub = bench_hub(port, a.jobs, a.window, parent)
    poll = bench_poll(port, a.jobs, a.window, a.interval, parent)
    parent.send("stop")
    parent.recv()
    p.join(10)
    rows = [("requests/min", "req_per_min", "{:,.0f}"), ("latency p50 (s)", "p50", "{:.3f}"),
            ("latency p95 (s)", "p95", "{:.3f}"), ("client CPU s/min", "cpu_s_per_min", "{:.1f}"),
            ("client memory (MB)", "rss_mb", "{:.1f}"), ("changes seen", "events", "{:,}"),
            ("jobs with status", "statuses", "{:,}")]
    print(f"{'':22}{'gpujobs watches':>18}{'per-job polling':>18}")
    for label, key, fmt in rows:
        print(f"{label:22}{fmt.format(hub[key]):>18}{fmt.format(poll[key]):>18}")
    req_ratio = (f"{poll['req_per_min'] / hub['req_per_min']:,.0f}x" if hub["req_per_min"] >= 1 else
                 f">= {poll['req_per_min']:,.0f}x (gpujobs made no request in the window: its watches stay open)")
    print(f"ratio polling/gpujobs: requests {req_ratio}, p95 latency {poll['p95'] / hub['p95']:.1f}x, "
          f"client CPU {poll['cpu_s_per_min'] / hub['cpu_s_per_min']:.1f}x")
    ok = hub["p95"] < 0.5 and hub["rss_mb"] < 50
    print(f"targets (p95 < 0.5 s, < 50 MB): {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
