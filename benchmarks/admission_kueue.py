"""Admission compared in one run with real Kueue on this machine: the same workload through real
Kueue (v0.17.0, built by ``make controlplane``, on a real kube-apiserver and etcd on loopback)
and through gpujobs' engine (gpujobs/admission), admissions per second of CPU of each.

    .venv/bin/python benchmarks/admission_kueue.py [--n 1500] [--queues 6] [--timeout 600]

Workload: ``--queues`` ClusterQueues in one cohort (nominal GPU quota each, no borrowing limit,
BestEffortFIFO, flavor ``bench-gpu``), one LocalQueue each; ``--n`` Workloads (kueue.x-k8s.io
v1beta2, created directly: Kueue admits a Workload without a job controller) of 1/2/4/8 GPUs
(70/15/10/5 %), priorities low/normal/high, spread unevenly over the queues (the first gets a
third, so it borrows from the others), plus ``OVERSIZED`` Workloads asking for more GPUs than the
whole cohort has. The quota is sized so that everything else fits at once: the set that can be
admitted is then the same whatever order either scheduler takes, and the two must agree on it.

(a) real Kueue: the control plane of tests/realcp (its ``ControlPlane`` and
``start_controlplane``, imported from tests/realcp/conftest.py) is started, the queues are
applied, then the Workloads are created (8 threads) while a watch records each admission (both
QuotaReserved and Admitted True). Measured from the first create to the last admission: wall
seconds and the CPU seconds (utime + stime, /proc/<pid>/stat) of the Kueue manager process, and
separately of kube-apiserver and etcd. Kueue's CPU includes its webhooks (defaulting and
validating each Workload at create) and its controllers: what admitting costs Kueue. Kueue logs at
``--zap-log-level=2``, as tests/realcp starts it and as Kueue's own manifest does
(config/components/manager/manager.yaml, v0.17.0).
(b) gpujobs' engine: the same queues and workloads added to :class:`gpujobs.admission.Engine`
and scheduled (median of ``--repeat`` runs): wall and CPU (process_time) seconds, the algorithm
alone, with no API server.

Prints admissions per CPU second of each and the ratio, and whether both admitted the same set
(exit 1 if not, or if Kueue admitted nothing: then there is nothing to compare). Every process it
starts is stopped by its pid on exit, also on error or SIGTERM/SIGINT. Needs no network. Without
the control-plane binaries it prints a line saying so and exits 0 (skipped).
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from gpujobs.admission import ClusterQueue, Engine, PodSet, Workload  # noqa: E402

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
NS = "bench"
COHORT = "bench"
FLAVOR = "bench-gpu"
GPU = "nvidia.com/gpu"
SIZES = [(1, 0.70), (2, 0.15), (4, 0.10), (8, 0.05)]             # GPUs, share
PRIORITIES = {"bench-low": 100, "bench-normal": 500, "bench-high": 1000}
OVERSIZED = 3
CLK = os.sysconf("SC_CLK_TCK")


# ----------------------------------------------------------------------------- the workload
@dataclass(frozen=True)
class Job:
    name: str
    queue: int          # index of its ClusterQueue / LocalQueue
    gpus: int
    priority: str
    order: int          # creation order


@dataclass
class Scenario:
    queues: int
    nominal: int        # GPUs per ClusterQueue
    jobs: list[Job] = field(default_factory=list)

    @property
    def admissible(self) -> set[str]:
        """What fits: the quota is sized so that every job but the oversized fits at once."""
        return {j.name for j in self.jobs if j.gpus <= self.nominal * self.queues}


def scenario(n: int, queues: int, seed: int = 0) -> Scenario:
    rng = random.Random(seed)
    weights = [3.0] + [1.0] * (queues - 1)            # queue 0 gets a third or so: it borrows
    jobs = []
    for i in range(n):
        r, acc = rng.random(), 0.0
        for gpus, share in SIZES:  # noqa: B007 - the row chosen is used after the break
            acc += share
            if r <= acc:
                break
        q = rng.choices(range(queues), weights)[0]
        jobs.append(Job(f"wl-{i:05d}", q, gpus, rng.choice(list(PRIORITIES)), i))
    total = sum(j.gpus for j in jobs)
    nominal = -(-total // queues) + 8                 # the cohort holds them all, with a margin
    for k in range(OVERSIZED):                        # never fits, even with the whole cohort
        jobs.append(Job(f"wl-big-{k}", k % queues, nominal * queues + 1, "bench-high", n + k))
    return Scenario(queues, nominal, jobs)


def kueue_objects(sc: Scenario) -> list[dict]:
    objs: list[dict] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}},
    ]
    for name, value in PRIORITIES.items():
        objs.append({"apiVersion": f"{GROUP}/{VERSION}", "kind": "WorkloadPriorityClass",
                     "metadata": {"name": name}, "value": value})
    for q in range(sc.queues):
        objs.append({"apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue",
                     "metadata": {"name": f"bench-cq-{q}"},
                     "spec": {"cohortName": COHORT, "namespaceSelector": {},
                              "queueingStrategy": "BestEffortFIFO",
                              "resourceGroups": [{"coveredResources": [GPU], "flavors": [
                                  {"name": FLAVOR, "resources": [
                                      {"name": GPU, "nominalQuota": str(sc.nominal)}]}]}]}})
        objs.append({"apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue",
                     "metadata": {"name": f"bench-lq-{q}", "namespace": NS},
                     "spec": {"clusterQueue": f"bench-cq-{q}"}})
    return objs


def workload_obj(j: Job) -> dict:
    res = {GPU: str(j.gpus)}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Workload",
            "metadata": {"name": j.name, "namespace": NS},
            "spec": {"queueName": f"bench-lq-{j.queue}",
                     "priorityClassRef": {"group": GROUP, "kind": "WorkloadPriorityClass",
                                          "name": j.priority},
                     "priority": PRIORITIES[j.priority],
                     "podSets": [{"name": "main", "count": 1, "template": {"spec": {
                         "restartPolicy": "Never",
                         "containers": [{"name": "main", "image": "bench",
                                         "resources": {"requests": res, "limits": res}}]}}}]}}


# ------------------------------------------------------------------------------ the engine
def run_engine(sc: Scenario, repeat: int = 3) -> dict:
    """The scenario through gpujobs' engine, ``repeat`` times: the median run's CPU and wall."""
    runs = []
    for _ in range(repeat):
        c0, w0 = time.process_time(), time.perf_counter()
        eng = Engine([ClusterQueue(f"bench-cq-{q}", {GPU: sc.nominal}, cohort=COHORT,
                                   within_queue="Never", local_queues=[f"bench-lq-{q}"])
                      for q in range(sc.queues)], priorities=PRIORITIES)
        for j in sc.jobs:
            eng.add(Workload(j.name, f"bench-lq-{j.queue}", [PodSet("main", 1, {GPU: j.gpus})],
                             priority=j.priority, created=float(j.order)), check=False)
        admitted = {a.id for a in eng.schedule().admitted}
        runs.append((time.process_time() - c0, time.perf_counter() - w0, admitted))
    runs.sort(key=lambda r: r[0])
    cpu, wall, admitted = runs[len(runs) // 2]
    return {"cpu_s": cpu, "wall_s": wall, "admitted": admitted}


# -------------------------------------------------------------------------- the comparison
class NothingToCompare(Exception):
    """One side admitted nothing or used no CPU: a ratio would be meaningless."""


def compare(expected: set[str], kueue: dict, engine: dict) -> dict:
    """Admissions per CPU second of each side, their ratio, and how the admitted sets differ
    (from each other and from ``expected``). Raises :class:`NothingToCompare` when a side
    admitted nothing or reports no CPU time."""
    for side, r in (("real Kueue", kueue), ("gpujobs engine", engine)):
        if not r["admitted"]:
            raise NothingToCompare(f"{side} admitted nothing (of {len(expected)} admissible): "
                                   "no admission rate to compare")
        if r["cpu_s"] <= 0:
            raise NothingToCompare(f"{side} used no measurable CPU time ({r['cpu_s']} s)")
    k_rate = len(kueue["admitted"]) / kueue["cpu_s"]
    e_rate = len(engine["admitted"]) / engine["cpu_s"]
    return {"kueue_rate": k_rate, "engine_rate": e_rate, "ratio": e_rate / k_rate,
            "same": kueue["admitted"] == engine["admitted"],
            "only_kueue": sorted(kueue["admitted"] - engine["admitted"]),
            "only_engine": sorted(engine["admitted"] - kueue["admitted"]),
            "kueue_missing": sorted(expected - kueue["admitted"]),
            "kueue_extra": sorted(kueue["admitted"] - expected)}


# ---------------------------------------------------------------------------- real Kueue
def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (proc(5): fields 14 and 15 of /proc/<pid>/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()      # after "pid (comm) ": field 3 onwards
    return (int(fields[11]) + int(fields[12])) / CLK


def _admitted(wl: dict) -> bool:
    conds = {c["type"]: c["status"] for c in (wl.get("status") or {}).get("conditions") or []}
    return conds.get("QuotaReserved") == "True" and conds.get("Admitted") == "True"


def run_kueue(cp, sc: Scenario, timeout: float) -> dict:
    """Push the scenario through the running control plane ``cp`` (see module doc)."""
    from kubernetes import client, watch

    from tests.realcp.conftest import _apply, _wait  # the realcp tests' own helpers

    api = cp.api()
    api.configuration.connection_pool_maxsize = 16
    custom = client.CustomObjectsApi(api)
    _apply(api, kueue_objects(sc))
    def active(q: int) -> bool:
        st = custom.get_cluster_custom_object_status(GROUP, VERSION, "clusterqueues",
                                                     f"bench-cq-{q}").get("status") or {}
        return any(c["type"] == "Active" and c["status"] == "True"
                   for c in st.get("conditions") or [])
    _wait(lambda: all(active(q) for q in range(sc.queues)), 60, "the ClusterQueues Active")
    pids = {name: cp.procs[name].pid for name in ("kueue", "kube-apiserver", "etcd")}
    expected = sc.admissible
    admitted: dict[str, float] = {}              # name -> when the watch saw it admitted
    done = threading.Event()
    cpu_at_last: dict[str, float] = {}
    errors: list[BaseException] = []

    def seen(obj: dict) -> None:
        name = obj["metadata"]["name"]
        if name not in admitted and _admitted(obj):
            admitted[name] = time.perf_counter()
            if expected <= admitted.keys():      # the last admissible one: sample the CPU now
                cpu_at_last.update({n: cpu_seconds(p) for n, p in pids.items()})
                done.set()

    def relist() -> str:
        lst = custom.list_namespaced_custom_object(GROUP, VERSION, NS, "workloads")
        for obj in lst["items"]:
            seen(obj)
        return lst["metadata"]["resourceVersion"]

    def watcher(rv: str) -> None:
        w = watch.Watch()
        while not done.is_set():
            try:
                for ev in w.stream(custom.list_namespaced_custom_object, GROUP, VERSION, NS,
                                   "workloads", resource_version=rv, timeout_seconds=30,
                                   allow_watch_bookmarks=True):
                    obj = ev["object"]
                    if ev["type"] == "ERROR":    # e.g. 410 Gone: resume from a fresh list
                        raise RuntimeError(f"watch error: {obj}")
                    rv = obj["metadata"]["resourceVersion"]
                    if ev["type"] != "BOOKMARK":
                        seen(obj)
                    if done.is_set():
                        w.stop()
                        break
            except Exception as exc:  # noqa: BLE001 - reported below; the main loop times out
                errors.append(exc)
                time.sleep(0.5)
                try:
                    rv = relist()
                except Exception as exc2:  # noqa: BLE001 - the apiserver may be busy: retried
                    errors.append(exc2)

    t = threading.Thread(target=watcher, args=(relist(),), daemon=True, name="bench-watch")
    t.start()
    cpu0 = {n: cpu_seconds(p) for n, p in pids.items()}
    t0 = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda j: custom.create_namespaced_custom_object(
            GROUP, VERSION, NS, "workloads", workload_obj(j)), sc.jobs))
    created = time.perf_counter() - t0
    if not done.wait(timeout):
        cpu_at_last.update({n: cpu_seconds(p) for n, p in pids.items()})
    done.set()
    t.join(timeout=35)
    end = max(admitted.values(), default=time.perf_counter())
    time.sleep(2)   # anything admitted after the last expected one shows up in the final list
    final = {w["metadata"]["name"] for w in custom.list_namespaced_custom_object(
        GROUP, VERSION, NS, "workloads")["items"] if _admitted(w)}
    api.close()
    cpu = {n: cpu_at_last[n] - cpu0[n] for n in pids}
    return {"admitted": final, "cpu_s": cpu["kueue"], "apiserver_cpu_s": cpu["kube-apiserver"],
            "etcd_cpu_s": cpu["etcd"], "wall_s": end - t0, "create_s": created,
            "timed_out": not expected <= admitted.keys(), "watch_errors": errors[-3:]}


def controlplane_bins():
    """The control plane's binaries and what the build could not make, or None (with why)."""
    try:
        import pytest

        from tests.realcp.conftest import _bin_dir
    except ImportError as exc:   # tests/realcp's control plane needs pytest, yaml, kubernetes
        return None, f"tests/realcp's control plane cannot be imported ({exc})"
    try:
        bin_dir, missing = _bin_dir()
    except (pytest.skip.Exception, pytest.fail.Exception) as exc:
        return None, str(exc).splitlines()[0]
    lacking = [n for n in ("etcd", "kube-apiserver", "kueue") if not (bin_dir / n).exists()]
    if lacking:
        return None, f"{', '.join(lacking)} not built in {bin_dir} ({missing})"
    return (bin_dir, missing), ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1500, help="admissible workloads")
    ap.add_argument("--queues", type=int, default=6)
    ap.add_argument("--repeat", type=int, default=3, help="engine runs (median)")
    ap.add_argument("--timeout", type=float, default=600,
                    help="seconds to wait for Kueue's admissions after the last create")
    args = ap.parse_args()
    bins, why = controlplane_bins()
    if bins is None:
        print(f"admission_kueue: skipped, the control-plane binaries are missing: {why} "
              "(build them with `make controlplane`)")
        return 0
    from tests.realcp.conftest import ControlPlane, start_controlplane

    sc = scenario(args.n, args.queues)
    print(f"scenario: {args.queues} ClusterQueues in one cohort (nominal {sc.nominal} GPUs each, "
          f"no borrowing limit), {len(sc.jobs)} Workloads of 1/2/4/8 GPUs, priorities "
          f"low/normal/high, {OVERSIZED} larger than the cohort; admissible: {len(sc.admissible)}")
    print(f"load before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} "
          f"{os.getloadavg()[2]:.2f} on {os.cpu_count()} CPUs")
    eng = run_engine(sc, args.repeat)

    run = Path(tempfile.mkdtemp(prefix="gpujobs-bench-kueue-"))
    cp = ControlPlane(bins[0], run, bins[1])

    def on_signal(signum, frame):
        raise SystemExit(128 + signum)
    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        t0 = time.perf_counter()
        start_controlplane(cp)
        print(f"control plane up in {time.perf_counter() - t0:.0f} s "
              f"(Kueue pid {cp.procs['kueue'].pid})")
        kq = run_kueue(cp, sc, args.timeout)
    except BaseException:
        print(f"(logs kept in {run})")
        run = Path()   # keep the logs
        raise
    finally:
        cp.stop()
        for s, h in old.items():
            signal.signal(s, h)
        left = [f"{n} (pid {p.pid})" for n, p in cp.procs.items() if p.poll() is None]
        if left:
            print(f"still running after stop: {left}")
        if run != Path():
            shutil.rmtree(run, ignore_errors=True)

    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"real Kueue v0.17.0: {len(kq['admitted'])} admitted in {kq['wall_s']:.1f} s wall "
          f"from the first create (creates took {kq['create_s']:.1f} s)"
          f"{' - TIMED OUT' if kq['timed_out'] else ''}; CPU: Kueue {kq['cpu_s']:.1f} s, "
          f"kube-apiserver {kq['apiserver_cpu_s']:.1f} s, etcd {kq['etcd_cpu_s']:.1f} s")
    print(f"real Kueue, per wall second: {len(kq['admitted']) / kq['wall_s']:.1f} admissions/s "
          "(its API client is limited to 20 requests/s by default: clientConnection.qps, "
          "apis/config/v1beta2/defaults.go v0.17.0; per CPU second is the comparable figure)")
    print(f"gpujobs engine: {len(eng['admitted'])} admitted in {eng['cpu_s']:.3f} s CPU, "
          f"{eng['wall_s']:.3f} s wall (median of {args.repeat})")
    if kq["watch_errors"]:
        print(f"watch errors: {kq['watch_errors']}")
    try:
        c = compare(sc.admissible, kq, eng)
    except NothingToCompare as exc:
        print(f"NO COMPARISON: {exc}")
        return 1
    print(f"real Kueue:     {c['kueue_rate']:,.1f} admissions per CPU second of the Kueue process")
    print(f"gpujobs engine: {c['engine_rate']:,.0f} admissions per CPU second")
    print(f"ratio engine/Kueue: {c['ratio']:,.0f}x (the engine is the algorithm alone; Kueue's "
          "CPU includes its webhooks, controllers and API client)")
    if c["same"]:
        print(f"admitted sets: the same ({len(eng['admitted'])} Workloads)")
    else:
        print(f"admitted sets DIFFER: only Kueue {len(c['only_kueue'])} {c['only_kueue'][:5]}, "
              f"only the engine {len(c['only_engine'])} {c['only_engine'][:5]}")
    if c["kueue_missing"] or c["kueue_extra"]:
        print(f"Kueue against the admissible set: missing {len(c['kueue_missing'])} "
              f"{c['kueue_missing'][:5]}, extra {len(c['kueue_extra'])} {c['kueue_extra'][:5]}")
    print(f"load after: {load}")
    return 0 if c["same"] and not kq["timed_out"] else 1


if __name__ == "__main__":
    sys.exit(main())
