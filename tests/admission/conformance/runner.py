"""Replay the YAML cases of this folder against gpujobs.admission.Engine (see README.md)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpujobs.admission import ClusterQueue, Cohort, Engine, PodSet, ResourceFlavor, Workload
from gpujobs.errors import GpuJobsError

HERE = Path(__file__).parent


def load() -> list[tuple[str, dict, dict]]:
    """(file name, fixtures, case) for every case of every data file, one folder per Kueue
    version (``<version>/<file>.yaml``); each case gets its file's ``kueue_version``."""
    out = []
    for path in sorted(HERE.glob("*/*.yaml")):
        doc = yaml.safe_load(path.read_text())
        for case in doc["cases"]:
            case["kueue_version"] = doc["kueue_version"]
            out.append((f"{path.parent.name}/{path.name}", doc.get("fixtures") or {}, case))
    return out


def differences() -> dict[str, str]:
    """'<version>/<test>/<case>' -> why the engine is expected to differ (docs/admission.md
    lists them); an entry names the versions whose case it is."""
    doc = yaml.safe_load((HERE / "differences.yaml").read_text()) or {}
    return {f"{v}/{d['test']}/{d['case']}": d["why"] for d in doc.get("differences", []) for v in d["versions"]}


def case_id(case: dict) -> str:
    return f"{case['kueue_version']}/{case['source']['test']}/{case['source']['case']}"


def _queue(d: dict) -> ClusterQueue:
    groups, blim, llim = [], {}, {}
    for rg in d.get("resource_groups", []):
        group = {}
        for fq in rg:
            group[fq["flavor"]] = {r: q["nominal"] for r, q in fq["resources"].items()}
            for r, q in fq["resources"].items():
                if "borrowing_limit" in q:
                    blim.setdefault(fq["flavor"], {})[r] = q["borrowing_limit"]
                if "lending_limit" in q:
                    llim.setdefault(fq["flavor"], {})[r] = q["lending_limit"]
        groups.append(group)
    return ClusterQueue(
        d["name"], None, resource_groups=groups, cohort=d.get("cohort"),
        borrowing_limit=blim or None, lending_limit=llim or None,
        strategy=d.get("strategy", "BestEffortFIFO"), within_queue=d.get("within", "Never"),
        reclaim_within_cohort=d.get("reclaim", "Never"),
        borrow_within_cohort=d.get("borrow_within_cohort") or "Never",
        max_priority_threshold=d.get("max_priority_threshold"),
        when_can_borrow=d.get("when_can_borrow", "MayStopSearch"),
        when_can_preempt=d.get("when_can_preempt", "TryNextFlavor"),
        preference=d.get("preference"), fair_weight=float(d.get("fair_weight", 1.0)))


def _workload(d: dict, queue: str) -> Workload:
    return Workload(d["name"], queue, [PodSet(p["name"], int(p["count"]), p["requests"],
                                              node_selector=p.get("node_selector") or {},
                                              tolerations=tuple(p.get("tolerations") or ()))
                                       for p in d["podsets"]],
                    priority=int(d.get("priority") or 0), created=float(d.get("created") or 0.0))


def build(fixtures: dict, case: dict) -> tuple[Engine, list[str], list[str]]:
    """The engine with the case's queues and admitted workloads, its pending workloads added;
    also returns the ids that could not be queued (unknown queue: Kueue keeps them out of every
    ClusterQueue) and those ``add`` refused as never fitting (QuotaError; Kueue keeps them
    inadmissible in their queue, so they count as left in the queue)."""
    cqs = case["cluster_queues"]
    cqs = fixtures[cqs] if isinstance(cqs, str) else cqs
    cqs = list(cqs) + list(case.get("extra_cluster_queues", []))
    lqs = case.get("local_queues", [])
    lqs = list(fixtures[lqs] if isinstance(lqs, str) else lqs) + list(case.get("extra_local_queues", []))
    cohorts = []
    for c in case.get("cohorts", []):
        quota, blim, llim = {}, {}, {}
        for rg in c.get("resource_groups", []):
            for fq in rg:
                quota[fq["flavor"]] = {r: q["nominal"] for r, q in fq["resources"].items()}
                for r, q in fq["resources"].items():
                    if "borrowing_limit" in q:
                        blim.setdefault(fq["flavor"], {})[r] = q["borrowing_limit"]
                    if "lending_limit" in q:
                        llim.setdefault(fq["flavor"], {})[r] = q["lending_limit"]
        cohorts.append(Cohort(c["name"], quota, parent=c.get("parent"),
                              borrowing_limit=blim or None, lending_limit=llim or None,
                              fair_weight=float(c.get("fair_weight", 1.0))))
    names = {c["name"] for c in cqs}
    queues = []
    for d in cqs:
        spec = _queue(d)
        spec.local_queues = tuple(q["name"] for q in lqs if q["cluster_queue"] == d["name"])
        queues.append(spec)
    oracle = None
    if case["source"]["test"] == "TestAssignFlavors":
        # the upstream test mocks the preemption simulation: "Preempt" (borrowing 0) unless
        # its simulationResult says otherwise for a flavor/resource
        sim = {(s["flavor"], s["resource"]): (s["possibility"], int(s["borrow"] or 0))
               for s in case.get("simulation", [])}

        def oracle(cq, fr, amount):
            return sim.get(tuple(fr), ("Preempt", 0))
    flavors = None
    if "resourceFlavors" in fixtures:  # the test's ResourceFlavor objects (labels, taints)
        flavors = [ResourceFlavor(f["name"], f.get("node_labels") or {}, tuple(f.get("node_taints") or ()),
                                  tuple(f.get("tolerations") or ())) for f in fixtures["resourceFlavors"]]
    # the case's Kueue version decides the feature gates' defaults, the case may set some
    eng = Engine(queues, cohorts, priorities={}, default_priority=0, preemption_oracle=oracle,
                 kueue_version=case["kueue_version"], feature_gates=case.get("feature_gates"),
                 flavors=flavors, fair_sharing=bool(case.get("fair_sharing")),
                 fair_sharing_strategies=tuple(case.get("strategies") or
                                               ("LessThanOrEqualToFinalShare", "LessThanInitialShare")))
    for cq_name, items in (case.get("usage") or {}).items():  # usage put on the queue directly
        for i, u in enumerate(items):
            w = Workload(f"usage-{cq_name}-{i}", cq_name, [PodSet("main", 1, {u["resource"]: u["amount"]})],
                         priority=1 << 30)
            eng.restore_admitted(w, {"main": {u["resource"]: u["flavor"]}}, check=False)
    for d in case.get("admitted", []):
        w = _workload(d, d["cluster_queue"])
        eng.restore_admitted(w, d.get("flavors"), reserved_at=d.get("reserved_at"), check=False)
        if d.get("evicted"):
            eng.evict(w.id)
    unqueued: list[str] = []
    never: list[str] = []
    incoming = case.get("incoming")
    pending = list(case.get("pending", [])) + ([incoming] if incoming else [])
    for d in pending:
        queue = d.get("queue") or d.get("cluster_queue")
        lq = next((q for q in lqs if q["name"] == queue), None)
        if queue not in names and (lq is None or lq["cluster_queue"] not in names):
            unqueued.append(d["name"])
            continue
        try:  # TestPreemption's incoming workload: the test gives its assignment, no fit check
            eng.add(_workload(d, queue), check=d is not incoming)
        except GpuJobsError:
            never.append(d["name"])  # can never fit: Kueue keeps it inadmissible
    return eng, unqueued, never


def run_case(fixtures: dict, case: dict) -> dict[str, Any]:
    """One Kueue cycle on the case; what came out, in the shape of ``case['expect']``.
    TestPreemption cases are unit tests of Kueue's preemptor with an assignment chosen by the
    test: they go through :meth:`Engine.preemption_targets` with that same assignment."""
    eng, unqueued, never = build(fixtures, case)
    if case["source"]["test"] == "TestAssignFlavors":
        return {"assignment": eng.flavor_assignment(case["incoming"]["name"])}
    if "incoming" in case:  # TestPreemption, TestHierarchicalPreemptions
        inc = case["incoming"]
        asg = {ps["name"]: {r: fa["flavor"] for r, fa in ps["flavors"].items()}
               for ps in case["upstream_assignment"]}
        need = [(fa["flavor"], r) for ps in case["upstream_assignment"] for r, fa in ps["flavors"].items()
                if fa["mode"] == "Preempt"]
        # one that can never fit (QuotaError) gets NoFit from Kueue's flavor assigner: no targets
        got = eng.preemption_targets(inc["name"], asg, need) if inc["name"] in eng else {}
        return {"preempted": sorted(got), "reasons": got, "admitted": []}
    d = eng.schedule(cycles=1)
    out: dict[str, Any] = {"preempted": sorted(v for v, _ in d.preempted),
                           "admitted": sorted(a.id for a in d.admitted)}
    out["assignments"] = {}
    for wid in eng.admitted():
        adm = eng.admission(wid)
        out["assignments"][wid] = {"cluster_queue": adm.cluster_queue, "flavors": {
            ps: dict(fl) for ps, fl in adm.flavors.items()}}
    out["pending"] = sorted(eng.pending() + never)  # ``unqueued`` ones are in no queue
    out["reasons"] = dict(d.reasons)
    return out


def compare(case: dict, got: dict[str, Any]) -> list[str]:
    """Differences between the upstream expectation and what the engine did ([] = same)."""
    exp = case["expect"]
    diffs = []
    if case["source"]["test"] == "TestAssignFlavors":
        got_a = got["assignment"]
        if got_a["mode"] != exp["mode"]:
            diffs.append(f"mode: want {exp['mode']}, got {got_a['mode']}")
        if exp["mode"] != "NoFit":
            if int(exp.get("borrowing") or 0) != got_a["borrowing"]:
                diffs.append(f"borrowing: want {exp.get('borrowing')}, got {got_a['borrowing']}")
            want_ps = {ps: fl for ps, fl in exp["podsets"].items() if fl}
            if want_ps != got_a["podsets"]:
                diffs.append(f"flavors: want {want_ps}, got {got_a['podsets']}")
        return diffs
    if sorted(exp.get("preempted", [])) != got["preempted"]:
        diffs.append(f"preempted: want {sorted(exp.get('preempted', []))}, got {got['preempted']}")
    if "incoming" in case:  # TestPreemption, TestHierarchicalPreemptions
        if got["admitted"]:
            diffs.append(f"admitted {got['admitted']}: upstream's incoming workload needs preemption")
        for v, r in (exp.get("reasons") or {}).items():
            if got["reasons"].get(v) not in (None, r):
                diffs.append(f"reason of {v}: want {r}, got {got['reasons'].get(v)}")
        return diffs
    want = {k: {"cluster_queue": v["cluster_queue"], "flavors": {ps: dict(fl) for ps, fl in v["flavors"].items()}}
            for k, v in (exp.get("assignments") or {}).items()}
    if want != got["assignments"]:
        for k in sorted(set(want) | set(got["assignments"])):
            if want.get(k) != got["assignments"].get(k):
                diffs.append(f"assignment of {k}: want {want.get(k)}, got {got['assignments'].get(k)}")
    if "left" in exp or "inadmissible_left" in exp:
        left = {w for key in ("left", "inadmissible_left") for ws in (exp.get(key) or {}).values() for w in ws}
        if left != set(got["pending"]):
            diffs.append(f"left in queues: want {sorted(left)}, got {sorted(got['pending'])}")
    return diffs
