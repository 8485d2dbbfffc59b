"""Replay the YAML cases of this folder against gpujobs.admission.Engine (see README.md)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpujobs.admission import ClusterQueue, Cohort, Engine, PodSet, ResourceFlavor, Workload
from gpujobs.admission.gates import REQUEUE_BATCH_S
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


def _groups(d: dict) -> tuple[list[dict], dict, dict]:
    """A queue's or cohort's resource groups as ({flavor: {resource: nominal}} per group,
    borrowing limits, lending limits)."""
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
    return groups, blim, llim


def _queue(d: dict) -> ClusterQueue:
    groups, blim, llim = _groups(d)
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


def _cohort(c: dict) -> Cohort:
    groups, blim, llim = _groups(c)
    quota = {f: res for g in groups for f, res in g.items()}
    return Cohort(c["name"], quota, parent=c.get("parent"), borrowing_limit=blim or None,
                  lending_limit=llim or None, fair_weight=float(c.get("fair_weight", 1.0)))


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
    cohorts = [_cohort(c) for c in case.get("cohorts", [])]
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


class Scenario:
    """Replays the steps of an integration spec (Kueue's manager running between steps:
    before each expectation or finished eviction, ``schedule()`` runs until nothing changes).
    Objects created or deleted rebuild the engine from what exists then, with the admitted
    workloads restored where they were and the pending ones queued again (Kueue's cache and
    queue manager after such an event); a workload whose LocalQueue points nowhere waits in
    no queue."""

    def __init__(self, case: dict):
        self.case = case
        self.cohorts: dict[str, dict] = {}
        self.cqs: dict[str, dict] = {}
        self.lqs: dict[str, str] = {}
        self.wls: dict[str, Workload] = {}   # creation order
        self.eng: Engine | None = None
        self.dirty = True
        self.admitted_total: dict[str, int] = {}
        self.ever_preempted: set[str] = set()
        self.diffs: list[str] = []
        self.clock = 0.0  # the engine's: each batch period's end, as Kueue's manager reaches it

    def rebuild(self) -> None:
        old = self.eng
        queues = []
        for d in self.cqs.values():
            spec = _queue(d)
            spec.local_queues = tuple(lq for lq, cq in self.lqs.items() if cq == d["name"] and lq != d["name"])
            queues.append(spec)
        eng = Engine(queues, [_cohort(c) for c in self.cohorts.values()], priorities={}, default_priority=0,
                     fair_sharing=bool(self.case.get("fair_sharing")), kueue_version=self.case["kueue_version"],
                     feature_gates=self.case.get("feature_gates"), requeue_delay_s=REQUEUE_BATCH_S,
                     clock=lambda: self.clock)
        for wid, w in self.wls.items():
            if self.lqs.get(w.queue) not in self.cqs:
                continue  # its LocalQueue's ClusterQueue is not there: in no queue
            state = old.state(wid) if old is not None and wid in old else "pending"
            if state in ("admitted", "evicting"):
                adm = old.admission(wid)
                if adm.cluster_queue not in self.cqs:
                    raise AssertionError(f"{adm.cluster_queue} deleted while {wid} holds its quota")
                eng.restore_admitted(w, adm.flavors, reserved_at=adm.order, check=False)
                if state == "evicting":
                    eng.evict(wid)
            else:
                eng.add(w, check=False)
        self.eng, self.dirty = eng, False

    def settle(self) -> Engine:
        if self.dirty:
            self.rebuild()
        assert self.eng is not None
        d = self.eng.schedule()
        while (due := self.eng.requeue_due()) is not None:  # Kueue's manager runs on: the batch period passes
            self.clock = due
            more = self.eng.schedule()
            d.admitted += more.admitted
            d.preempted += more.preempted
        for a in d.admitted:
            self.admitted_total[a.cluster_queue] = self.admitted_total.get(a.cluster_queue, 0) + 1
        self.ever_preempted.update(v for v, _ in d.preempted)
        return self.eng

    def want(self, ok: bool, what: str) -> None:
        if not ok:
            self.diffs.append(what)

    def run(self) -> list[str]:
        for i, step in enumerate(self.case["steps"]):
            (kind, arg), = step.items()
            getattr(self, kind)(arg, i)
        return self.diffs

    # objects
    def create_cohort(self, c, i):
        self.cohorts[c["name"]] = c
        self.dirty = True

    def create_cluster_queue(self, d, i):
        self.cqs[d["name"]] = d
        self.dirty = True

    def create_local_queue(self, q, i):
        self.lqs[q["name"]] = q["cluster_queue"]
        self.dirty = True

    def delete_cohort(self, name, i):
        self.cohorts.pop(name)
        self.dirty = True  # queues naming it now form an implicit cohort of that name

    def delete_cluster_queue(self, name, i):
        self.cqs.pop(name)
        self.dirty = True

    def create_workload(self, d, i):
        w = _workload(dict(d, created=float(i)), d["queue"])  # created one after another
        self.wls[w.id] = w
        if not self.dirty and self.lqs.get(w.queue) in self.cqs:
            self.eng.add(w, check=False)  # type: ignore[union-attr]

    # what the spec expects
    def expect_admitted(self, ids, i):
        eng = self.settle()
        for wid in ids:
            self.want(eng.state(wid) == "admitted", f"step {i}: {wid} admitted, is {eng.state(wid)}")

    def expect_admitted_as(self, a, i):
        eng = self.settle()
        adm = eng.admission(a["workload"])
        got = None if adm is None else {"cluster_queue": adm.cluster_queue,
                                        "flavors": {ps: dict(fl) for ps, fl in adm.flavors.items()}}
        want = {"cluster_queue": a["cluster_queue"], "flavors": a["flavors"]}
        self.want(got == want, f"step {i}: {a['workload']} admitted as {want}, is {got}")

    def expect_pending(self, ids, i):
        eng = self.settle()
        for wid in ids:
            self.want(eng.state(wid) in ("pending", None) and wid not in self.eng_admitted(eng),
                      f"step {i}: {wid} pending, is {eng.state(wid)}")

    @staticmethod
    def eng_admitted(eng: Engine) -> set:
        return set(eng.admitted())

    def expect_preempted(self, ids, i):
        eng = self.settle()
        for wid in ids:
            self.want(eng.state(wid) == "evicting", f"step {i}: {wid} preempted, is {eng.state(wid)}")

    def expect_not_preempted(self, ids, i):
        self.settle()
        for wid in ids:
            self.want(wid not in self.ever_preempted, f"step {i}: {wid} was preempted")

    def finish_eviction(self, ids, i):
        eng = self.settle()
        for wid in ids:
            self.want(eng.state(wid) == "evicting", f"step {i}: {wid} being evicted, is {eng.state(wid)}")
            eng.requeue(wid)

    def finish_eviction_in_cq(self, a, i):
        eng = self.settle()
        evicting = [w for w in eng.admitted(a["cluster_queue"]) if eng.state(w) == "evicting"]
        self.want(len(evicting) == a["count"], f"step {i}: {a['count']} evicted in {a['cluster_queue']}, "
                                               f"are {len(evicting)}")
        for wid in evicting:
            eng.requeue(wid)

    def expect_admitted_total(self, a, i):
        self.settle()
        got = self.admitted_total.get(a["cluster_queue"], 0)
        self.want(got == a["count"], f"step {i}: {a['count']} admitted in total in {a['cluster_queue']}, are {got}")

    def expect_reserving(self, a, i):
        got = len(self.settle().admitted(a["cluster_queue"]))
        self.want(got == a["count"], f"step {i}: {a['count']} reserving in {a['cluster_queue']}, are {got}")

    def expect_pending_metric(self, a, i):
        got = self.settle().pending_counts(a["cluster_queue"])
        want = (a["active"], a["inadmissible"])
        self.want(got == want, f"step {i}: pending (active, inadmissible) in {a['cluster_queue']} {want}, is {got}")

    def expect_weighted_share(self, a, i):
        name = a.get("cluster_queue") or a["cohort"]
        got = self.settle().weighted_share(name)
        self.want(abs(got - a["value"]) <= 1e-6 * max(1.0, abs(a["value"])),
                  f"step {i}: weighted share of {name} {a['value']}, is {got}")


def run_case(fixtures: dict, case: dict) -> dict[str, Any]:
    """One Kueue cycle on the case; what came out, in the shape of ``case['expect']``.
    TestPreemption cases are unit tests of Kueue's preemptor with an assignment chosen by the
    test: they go through :meth:`Engine.preemption_targets` with that same assignment."""
    if "steps" in case:
        return {"diffs": Scenario(case).run()}
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
    if "steps" in case:  # an integration spec
        return got["diffs"]
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
