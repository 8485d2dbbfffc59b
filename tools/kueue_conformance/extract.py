"""Turn cases of Kueue's scheduler unit tests into the data of tests/admission/conformance/.

    .venv/bin/python tools/kueue_conformance/extract.py /path/to/kueue.git v0.19.2 [out dir]

For one supported Kueue version (a row of gpujobs/admission/gates.py: v0.17.0, v0.19.2,
v0.20, read at the ref ``gates.REFS`` gives) it reads (``git show <ref>:<file>``) that
version's own scheduler unit tests (``SUITES``: the six suites, plus the overlap-recompute
suite where it exists; TestSchedule and TestPreemption at v0.17.0), checks the gate table's
row against ``pkg/features/kube_features.go`` at the same ref, interprets the fixture builders
(MakeClusterQueue, MakeWorkload, MakeAdmission, ...) into plain facts and writes one YAML
file per upstream test. A case using something the engine does not model (TAS, admission
checks, partial admission, fair sharing, feature gates, ...) is written with ``skip:`` and
the reason, so the data say what was left out and why. Re-running it reproduces the files;
the expectations come from the upstream test (wantWorkloads / wantAssignments / wantLeft),
never from gpujobs. A case that sets feature gates keeps them (``feature_gates``) when the
gate table knows them; the runner replays every case at its version's gate defaults.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).parent))
from fixtures import ADM, CONST, CQ, LQ, MAKERS, RES, WL, Unsupported  # noqa: E402
from gosyntax import parse_assignments  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from gpujobs.admission import gates as GATES  # noqa: E402

OUT = Path(__file__).resolve().parents[2] / "tests" / "admission" / "conformance"


def text(x) -> str:
    if x[0] == "id":
        return x[1]
    if x[0] == "sel":
        return text(x[1]) + "." + x[2]
    return "?"


class Evaluator:
    def __init__(self, env: dict):
        self.env = env
        self.cache: dict = {}

    def ev(self, x):
        k = x[0]
        if k == "lit":
            return x[1]
        if k in ("id", "sel") and text(x) in CONST:
            return CONST[text(x)]
        if k in ("id", "sel") and text(x) in RES:
            return RES[text(x)]
        if k == "sel" and x[1][0] == "id" and x[1][1] not in self.env:
            return text(x)  # a constant of another package: its name is enough
        if k == "id":
            if x[1] in self.env:
                if x[1] not in self.cache:
                    self.cache[x[1]] = self.ev(self.env[x[1]])
                return self.cache[x[1]]
            raise Unsupported(f"identifier {x[1]}")
        if k == "unary":
            v = self.ev(x[2])
            if x[1] == "-":
                return -v
            return v
        if k == "bin":
            a, b = self.ev(x[2]), self.ev(x[3])
            if x[1] == "*":
                return a * b
            if x[1] == "+":
                return a + b
            if x[1] == "-":
                return a - b
            if x[1] == "/":
                return a / b
            raise Unsupported(f"operator {x[1]}")
        if k == "comp":
            t = x[1]
            if t.startswith("[]") or (t == "" and all(kk is None for kk, _ in x[2])):
                return [self.ev(v) for _, v in x[2]]
            out = {}
            for kk, v in x[2]:
                key = kk[1] if kk[0] == "id" and text(kk) not in CONST and text(kk) not in RES else self.ev(kk)
                if isinstance(key, dict) and "Flavor" in key and "Resource" in key:
                    key = (key["Flavor"], key["Resource"])  # a resources.FlavorResource
                out[key] = self.ev(v)
            return out
        if k == "call":
            f = x[1]
            if f[0] == "index":  # a generic instantiation: ptr.To[int32](0)
                f = f[1]
            args = [self.ev(a[1]) if a[0] == "spread" else self.ev(a) for a in x[2]]
            spread = [a for a in x[2] if a[0] == "spread"]
            if spread:
                flat = []
                for a in x[2]:
                    v = self.ev(a[1] if a[0] == "spread" else a)
                    flat.extend(v if a[0] == "spread" else [v])
                args = flat
            if f[0] == "sel" and f[2] in MAKERS and f[1][0] == "id":
                return MAKERS[f[2]](*args)
            name = text(f)
            if f[0] == "id" and not args and f"{name}()" in self.env:  # a helper of the test file
                return self.ev(("id", f"{name}()"))
            if name in ("metav1.NewTime", "ptr.To", "new", "int32", "int64", "resource.MustParse",
                        "resources.NewAmount"):
                return args[0]
            if name == "NewStatus":
                return None
            if name == "sets.New":
                return list(args)
            if name == "targetKeyReason":
                return f"{args[0]}:{args[1]}"
            if name == "singlePodSetAssignment":
                return {"podsets": [{"name": "main", "flavors": args[0]}]}
            if f[0] == "sel":
                if f[1][0] == "id" and f[1][1] not in self.env and f[1][1] not in CONST:
                    raise Unsupported(f"call {name}")
                recv = self.ev(f[1])
                meth = f[2]
                if isinstance(recv, (int, float)) and meth == "Add":
                    return recv + args[0]
                if isinstance(recv, (int, float)) and meth in ("Truncate",):
                    return recv
                fn = getattr(recv, meth, None)
                if fn is None or meth.startswith("_"):
                    raise Unsupported(f"{type(recv).__name__}.{meth}")
                return fn(*args)
            raise Unsupported(f"call {name}")
        if k == "index":
            raise Unsupported("index expression")
        raise Unsupported(f"node {k}")


def git_ref(label: str) -> str:
    """The git ref of a version's label (``main@<sha>`` -> ``<sha>``)."""
    return label.split("@", 1)[1] if "@" in label else label


def git_show(repo: str, tag: str, path: str) -> str:
    return subprocess.run(["git", "-C", repo, "show", f"{git_ref(tag)}:{path}"], check=True,
                          capture_output=True, text=True).stdout


def check_gate_table(repo: str, version: str) -> None:
    """Fail unless every row of gates.GATES for ``version`` says what kube_features.go at
    that ref says: the default of the spec in effect at that version, at that line (line 0:
    the gate is not in the file)."""
    import re
    src = git_show(repo, GATES.REFS[version], GATES.SOURCE)
    start = src.index("defaultVersionedFeatureGates")
    minor = tuple(int(x) for x in version.lstrip("v").split(".")[:2])
    found = {}
    for m in re.finditer(r"\n\t(\w+): \{\n((?:\t\t\{.*\n)+)\t\}", src[start:]):
        line = src[:start + m.start()].count("\n") + 2
        specs = re.findall(r'MustParse\("(\d+)\.(\d+)"\), Default: (\w+)', m.group(2))
        eff = [d for a, b, d in specs if (int(a), int(b)) <= minor] or [specs[0][2]]
        found[m.group(1)] = (eff[-1] == "true", line)
    for g in GATES.GATES:
        want = found.get(g.name)
        got = (g.defaults[version], g.lines[version])
        if (want is None and got[1] != 0) or (want is not None and got != want):
            raise SystemExit(f"gates.py row {g.name} at {version}: table says {got}, "
                             f"{GATES.SOURCE} at {GATES.REFS[version]} says {want}")


def func_src(src: str, name: str) -> str:
    i = src.index(f"\nfunc {name}(")
    j = src.index("\n}\n", i)
    return src[i:j + 3]


def helpers(src: str) -> dict:
    """``name()`` -> the returned expression, for the file's helpers without parameters that
    only return a literal (e.g. ``func defaultCohorts() []kueue.Cohort { return ... }``)."""
    import re
    out = {}
    for m in re.finditer(r"\nfunc (\w+)\(\) [^{\n]*\{\n(?:\s*//[^\n]*\n)*\s*return ", src):
        body = "\n\t" + m.group(1) + "() := " + src[m.end():]
        got = parse_assignments(body.replace(m.group(1) + "() :=", "x__ :="))
        if "x__" in got:
            out[m.group(1) + "()"] = got["x__"]
    return out


def cases_of(fsrc: str):
    env = parse_assignments(fsrc)
    cases = env.pop("cases")
    return env, cases


def workload_record(w: WL, queue_of_cq: dict | None = None) -> dict:
    d = w.d
    rec = {"name": d["name"], "priority": d["priority"], "created": d["created"],
           "podsets": [{k: v for k, v in p.items() if k in ("name", "count", "requests", "tolerations",
                                                             "node_selector")} for p in d["podsets"]]}
    if d["ns"]:
        rec["name"] = f"{d['ns']}/{d['name']}"
    if d["admission"] is not None:
        rec["cluster_queue"] = d["admission"]["cq"]
        rec["flavors"] = {ps["name"]: ps["flavors"] for ps in d["admission"]["podsets"]}
        rec["reserved_at"] = d["reserved_at"] if d["reserved_at"] is not None else 0.0
        if d["evicted"]:
            rec["evicted"] = True
    if d["queue"]:
        rec["queue"] = d["queue"]
    if not d["active"]:
        raise Unsupported("inactive workload")
    return rec


CQ_DEFAULTS = {"fair_weight": 1.0, "cohort": None, "strategy": "BestEffortFIFO", "within": "Never", "reclaim": "Never",
               "borrow_within_cohort": None, "max_priority_threshold": None,
               "when_can_borrow": "MayStopSearch", "when_can_preempt": "TryNextFlavor", "preference": None}


def cq_record(c: CQ) -> dict:
    """The queue's facts, leaving out Kueue's defaults (see CQ_DEFAULTS)."""
    return {k: v for k, v in c.d.items() if CQ_DEFAULTS.get(k, object()) != v}


UNSUPPORTED_FIELDS = {
    "featureGates": "feature gates", "enableFairSharing": "fair sharing", "objects": "extra objects",
    "admissionError": "API error injection", "cohorts": None, "wantEvents": None,
    "eventCmpOpts": None, "wantSkippedPreemptions": None, "wantWorkloadUseMergePatch": None,
}


def lq_record(q: LQ) -> dict:
    return {"name": f"{q.d['ns']}/{q.d['name']}", "cluster_queue": q.d["cq"]}


FIXTURES: dict[str, dict] = {}


def case_gates(case: dict, ev: Evaluator, literal) -> None:
    """The case's featureGates, kept as ``feature_gates`` when the gate table knows them
    (PartialAdmission only matters for pod sets with a minimum count, which are not
    extracted); another gate makes the case Unsupported."""
    out = {}
    for k, v in literal[2]:
        name = text(k).removeprefix("features.")
        if name not in GATES.BY_NAME:
            raise Unsupported(f"feature gate features.{name}")
        if name != "PartialAdmission":
            out[name] = bool(ev.ev(v))
    if out:
        case["feature_gates"] = out


def _replay(env: dict, cases, tag: str, path: str, test: str,
            extract: Callable[[dict, Evaluator, dict], None], *, lenient: bool) -> list[dict]:
    """One record per upstream case: its source, then what ``extract(case, evaluator, fields)``
    reads from it, or ``skip`` with the reason when it uses what the engine does not model
    (``lenient``: also when a fixture of it could not be interpreted)."""
    out = []
    for key, body in cases[2]:
        case = {"source": {"repo": "kubernetes-sigs/kueue", "ref": tag, "file": path,
                           "test": test, "case": key[1]}}
        try:
            extract(case, Evaluator(env), {kk[1]: vv for kk, vv in body[2]})
        except Unsupported as exc:
            case["skip"] = f"not extracted: uses {exc}"
        except (KeyError, TypeError, AttributeError, IndexError) as exc:
            if not lenient:
                raise
            case["skip"] = f"not extracted: {type(exc).__name__} {exc}"
        out.append(case)
    return out


def preemption_cases(repo: str, tag: str, path: str = "pkg/scheduler/preemption/preemption_test.go",
                     test: str = "TestPreemption") -> list[dict]:
    src = func_src(git_show(repo, tag, path), test)
    env, cases = cases_of(src)
    ev0 = Evaluator(env)
    FIXTURES[test] = {"defaultClusterQueues": [cq_record(c) for c in ev0.ev(env["defaultClusterQueues"])]} \
        if "defaultClusterQueues" in env else {}

    def extract(case: dict, ev: Evaluator, fields: dict) -> None:
        for f in fields:
            if f not in ("clusterQueues", "cohorts", "admitted", "incoming", "targetCQ",
                         "assignment", "wantPreempted", "wantWorkloads", "flavors", "assignmentFlavor",
                         "strategies"):
                raise Unsupported(f"field {f}")
        fair = test == "TestFairPreemptions"
        if fair:
            case["fair_sharing"] = True
            if "strategies" in fields:
                case["strategies"] = ev.ev(fields["strategies"])
        cohorts = ev.ev(fields["cohorts"]) if "cohorts" in fields else []
        if cohorts:
            case["cohorts"] = [c.d for c in cohorts]
        if fields["clusterQueues"] == ("id", "defaultClusterQueues"):
            case["cluster_queues"] = "defaultClusterQueues"
        else:
            case["cluster_queues"] = [cq_record(c) for c in ev.ev(fields["clusterQueues"])]
        admitted = [workload_record(w) for w in ev.ev(fields.get("admitted", ("comp", "[]", [])))]
        inc = workload_record(ev.ev(fields["incoming"]))
        inc["cluster_queue"] = ev.ev(fields["targetCQ"])
        case["admitted"] = admitted
        case["incoming"] = inc
        if fair:  # the test assigns its one flavor to cpu, mode Preempt
            fl = ev.ev(fields["assignmentFlavor"]) if "assignmentFlavor" in fields else "default"
            case["upstream_assignment"] = [{"name": "main", "flavors": {"cpu": {"flavor": fl, "mode": "Preempt"}}}]
            want = sorted(ev.ev(fields.get("wantPreempted", ("comp", "[]", []))) or [])
            case["expect"] = {"preempted": sorted(w.split(":")[0].lstrip("/") for w in want),
                              "reasons": {w.split(":")[0].lstrip("/"): w.split(":")[1] for w in want}}
            return
        asg = ev.ev(fields["assignment"])
        case["upstream_assignment"] = _assignment(asg)
        want = ev.ev(fields.get("wantWorkloads", ("comp", "[]", [])))
        evicted_before = {a["name"] for a in admitted if a.get("evicted")}
        victims = sorted(w.d["name"] for w in want if w.d["evicted"])
        case["expect"] = {"preempted": victims,
                          "preempted_count": ev.ev(fields["wantPreempted"]) if "wantPreempted" in fields else len(victims),
                          "reasons": {w.d["name"]: w.d["preempted_reason"] for w in want
                                      if w.d["evicted"] and w.d["preempted_reason"]}}
        if evicted_before:
            case["note"] = f"already evicted before the call: {sorted(evicted_before)}"

    return _replay(env, cases, tag, path, test, extract, lenient=False)


def _assignment(asg) -> list:
    out = []
    if not isinstance(asg, dict):
        raise Unsupported("assignment literal")
    for ps in asg.get("podsets", asg.get("PodSets", [])):
        fl = {}
        for r, fa in (ps.get("flavors") or ps.get("Flavors") or {}).items():
            if isinstance(fa, dict):
                fl[r] = {"flavor": fa.get("Name"), "mode": fa.get("Mode")}
        out.append({"name": ps.get("name", ps.get("Name", "main")), "flavors": fl})
    if not out:
        raise Unsupported("assignment literal")
    return out


CONST.update({"flavorassigner.Preempt": "Preempt", "flavorassigner.Fit": "Fit",
              "flavorassigner.NoFit": "NoFit", "Fit": "Fit", "Preempt": "Preempt", "NoFit": "NoFit",
              "DeferredFit": "DeferredFit", "preemptioncommon.Preempt": "Preempt",
              "preemptioncommon.Reclaim": "Reclaim", "preemptioncommon.NoCandidates": "NoCandidates",
              "utiltesting.Ki": 2 ** 10, "utiltesting.Mi": 2 ** 20, "utiltesting.Gi": 2 ** 30,
              "utiltesting.Ti": 2 ** 40})


def _amount(resource: str, v) -> float:
    """Kueue's internal resources.Amount: milli-units for CPU, plain units otherwise."""
    return v / 1000 if resource == "cpu" else v


def assign_cases(repo: str, tag: str) -> list[dict]:
    path = "pkg/scheduler/flavorassigner/flavorassigner_test.go"
    test = "TestAssignFlavors"
    src = func_src(git_show(repo, tag, path), test)
    env, cases = cases_of(src)
    FIXTURES[test] = {"resourceFlavors": [rf.record() for rf in Evaluator(env).ev(env["resourceFlavors"]).values()]}

    def extract(case: dict, ev: Evaluator, fields: dict) -> None:
        for f in fields:
            if f not in ("wlPods", "clusterQueue", "clusterQueueUsage", "secondaryClusterQueue",
                         "secondaryClusterQueueUsage", "wantRepMode", "wantAssignment", "simulationResult",
                         "enableFairSharing"):
                raise Unsupported(f"field {f}")
        if "enableFairSharing" in fields and ev.ev(fields["enableFairSharing"]):
            case["fair_sharing"] = True
        flavors = ev.ev(env["resourceFlavors"])
        cqs = [ev.ev(fields["clusterQueue"])]
        if "secondaryClusterQueue" in fields:
            cqs.append(ev.ev(fields["secondaryClusterQueue"]))
        for c in cqs:
            for rg in c.d["resource_groups"]:
                for fq in rg:
                    rf = flavors.get(fq["flavor"])
                    if rf is not None and rf.d["topology"]:
                        raise Unsupported("topology-aware flavor")
        case["cluster_queues"] = [cq_record(c) for c in cqs]
        usage = {}
        for fld, c in (("clusterQueueUsage", cqs[0]), ("secondaryClusterQueueUsage", cqs[-1])):
            if fld in fields:
                usage[c.d["name"]] = [{"flavor": f, "resource": r, "amount": _amount(r, v)}
                                      for (f, r), v in ev.ev(fields[fld]).items()]
        case["usage"] = usage
        pods = ev.ev(fields["wlPods"])
        case["incoming"] = {"name": "wl", "cluster_queue": cqs[0].d["name"], "priority": 0, "created": 0.0,
                            "podsets": [dict(p) for p in pods]}
        if "simulationResult" in fields:
            sim = []
            for (f, r), v in ev.ev(fields["simulationResult"]).items():
                if isinstance(v, list):  # positional {possibility, borrowing}
                    v = {"preemptionPossiblity": v[0], "borrowingAfterSimulation": v[1] if len(v) > 1 else 0}
                sim.append({"flavor": f, "resource": r, "possibility": v.get("preemptionPossiblity"),
                            "borrow": v.get("borrowingAfterSimulation", 0)})
            case["simulation"] = sim
        want = ev.ev(fields["wantAssignment"])
        exp = {"mode": ev.ev(fields["wantRepMode"]) if "wantRepMode" in fields else "NoFit", "borrowing": want.get("Borrowing", 0), "podsets": {}}
        for ps in want.get("PodSets") or []:
            exp["podsets"][ps.get("Name", "main")] = {
                r: {"flavor": fa.get("Name"), "mode": fa.get("Mode")} for r, fa in (ps.get("Flavors") or {}).items()}
        case["expect"] = exp

    return _replay(env, cases, tag, path, test, extract, lenient=True)


def schedule_cases(repo: str, tag: str, path: str = "pkg/scheduler/scheduler_test.go",
                   test: str = "TestSchedule") -> list[dict]:
    full = git_show(repo, tag, path)
    src = func_src(full, test)
    env, cases = cases_of(src)
    env.update(helpers(full))
    ev0 = Evaluator(env)
    FIXTURES[test] = {"resourceFlavors": [rf.record() for rf in ev0.ev(env["resourceFlavors"])],
                                "clusterQueues": [cq_record(c) for c in ev0.ev(env["clusterQueues"])],
                                "queues": [lq_record(q) for q in ev0.ev(env["queues"])]}

    def extract(case: dict, ev: Evaluator, fields: dict) -> None:
        for f in fields:
            if f in ("objects", "admissionError"):
                raise Unsupported(f"field {f}")
        if "enableFairSharing" in fields and ev.ev(fields["enableFairSharing"]):
            case["fair_sharing"] = True
        if "featureGates" in fields:
            case_gates(case, ev, fields["featureGates"])
        extra = ev.ev(fields["additionalClusterQueues"]) if "additionalClusterQueues" in fields else []
        lqs = ev.ev(fields["additionalLocalQueues"]) if "additionalLocalQueues" in fields else []
        cohorts = ev.ev(fields["cohorts"]) if "cohorts" in fields else []
        case["cluster_queues"] = "clusterQueues"
        if extra:
            case["extra_cluster_queues"] = [cq_record(c) for c in extra]
        case["local_queues"] = "queues"
        if lqs:
            case["extra_local_queues"] = [lq_record(q) for q in lqs]
        if cohorts:
            case["cohorts"] = [c.d for c in cohorts]
        wls = ev.ev(fields.get("workloads", ("comp", "[]", [])))
        admitted, pending = [], []
        for w in wls:
            rec = workload_record(w)
            if "cluster_queue" in rec:
                rec.pop("queue", None)
                admitted.append(rec)
            else:
                rec["queue"] = f"{w.d['ns']}/{w.d['queue']}"
                pending.append(rec)
        case["admitted"], case["pending"] = admitted, pending
        want_asg = ev.ev(fields.get("wantAssignments", ("comp", "map", [])))
        want_wls = ev.ev(fields.get("wantWorkloads", ("comp", "[]", [])))
        exp = {"assignments": {}}
        for k, v in want_asg.items():
            v = v.d if isinstance(v, ADM) else v
            pss = v.get("PodSetAssignments", v.get("podsets", []))
            exp["assignments"][k] = {"cluster_queue": v.get("ClusterQueue", v.get("cq")), "flavors": {
                (ps.get("name") or ps.get("Name")): (ps.get("flavors") or ps.get("Flavors") or {}) for ps in pss}}
        exp["preempted"] = sorted(f"{w.d['ns']}/{w.d['name']}" for w in want_wls if w.d["evicted"])
        if "wantLeft" in fields:
            exp["left"] = ev.ev(fields["wantLeft"])
        if "wantInadmissibleLeft" in fields:
            exp["inadmissible_left"] = ev.ev(fields["wantInadmissibleLeft"])
        case["expect"] = exp

    return _replay(env, cases, tag, path, test, extract, lenient=True)


def _suites() -> dict:
    """file name -> (test, how to extract it), every suite this tool knows."""
    sched, pre = "pkg/scheduler/", "pkg/scheduler/preemption/"
    return {
        "preemption_test.TestPreemption.yaml": ("TestPreemption", preemption_cases),
        "preemption_hierarchical_test.TestHierarchicalPreemptions.yaml": (
            "TestHierarchicalPreemptions", lambda r, t: preemption_cases(
                r, t, pre + "preemption_hierarchical_test.go", "TestHierarchicalPreemptions")),
        "scheduler_test.TestSchedule.yaml": ("TestSchedule", schedule_cases),
        "flavorassigner_test.TestAssignFlavors.yaml": ("TestAssignFlavors", assign_cases),
        "preemption_fair_test.TestFairPreemptions.yaml": ("TestFairPreemptions", lambda r, t: preemption_cases(
            r, t, pre + "preemption_fair_test.go", "TestFairPreemptions")),
        "scheduler_fs_test.TestScheduleForFairSharing.yaml": ("TestScheduleForFairSharing", lambda r, t: schedule_cases(
            r, t, sched + "scheduler_fs_test.go", "TestScheduleForFairSharing")),
        "scheduler_recompute_preemption_test.TestScheduleRecomputePreemptionTargets.yaml": (
            "TestScheduleRecomputePreemptionTargets", lambda r, t: schedule_cases(
                r, t, sched + "scheduler_recompute_preemption_test.go", "TestScheduleRecomputePreemptionTargets")),
    }


SIX = ("preemption_test.TestPreemption.yaml", "preemption_hierarchical_test.TestHierarchicalPreemptions.yaml",
       "scheduler_test.TestSchedule.yaml", "flavorassigner_test.TestAssignFlavors.yaml",
       "preemption_fair_test.TestFairPreemptions.yaml", "scheduler_fs_test.TestScheduleForFairSharing.yaml")
# each supported version's own suites (gates.VERSIONS)
SUITES = {"v0.17.0": ("scheduler_test.TestSchedule.yaml", "preemption_test.TestPreemption.yaml"),
          "v0.19.2": SIX,
          "v0.20": SIX + ("scheduler_recompute_preemption_test.TestScheduleRecomputePreemptionTargets.yaml",)}


# the versions whose integration specs (scenarios.SPECS) are extracted too
INTEGRATION = ("v0.19.2", "v0.20")


def main() -> None:
    import yaml
    repo, version = sys.argv[1], GATES.kueue_version(sys.argv[2])
    out = Path(sys.argv[3]) if len(sys.argv) > 3 else OUT / version
    out.mkdir(parents=True, exist_ok=True)
    check_gate_table(repo, version)
    ref = GATES.REFS[version]
    known = _suites()
    for fname in SUITES[version]:
        test, fn = known[fname]
        cases = fn(repo, ref)
        n_ok = sum("skip" not in c for c in cases)
        header = (f"# Extracted by tools/kueue_conformance/extract.py from kubernetes-sigs/kueue {ref}\n"
                  f"# ({cases[0]['source']['file']}, {test}); {n_ok} of {len(cases)} cases extracted,\n"
                  f"# the others say why under `skip`. Semantics of the fields: ../README.md.\n")
        doc = {"kueue_version": version, "fixtures": FIXTURES[test], "cases": cases}
        (out / fname).write_text(header + yaml.safe_dump(doc, sort_keys=False, width=110))
        print(fname, n_ok, "of", len(cases))
    if version in INTEGRATION:
        import scenarios
        by_file: dict[str, list] = {}
        for path, when, it in scenarios.SPECS:
            src = git_show(repo, ref, path)
            by_file.setdefault(path, []).extend(scenarios.spec_cases(src, path, when, it, ref, Evaluator))
        for path, cases in by_file.items():
            fname = f"integration.{Path(path).stem}.yaml"
            n_ok = sum("skip" not in c for c in cases)
            header = (f"# Extracted by tools/kueue_conformance/extract.py (scenarios.py) from kubernetes-sigs/kueue\n"
                      f"# {ref} ({path}, the Ginkgo specs scenarios.SPECS names); {n_ok} of {len(cases)} specs\n"
                      f"# extracted as steps, the others say why under `skip`. Semantics: ../README.md.\n")
            doc = {"kueue_version": version, "fixtures": {}, "cases": cases}
            (out / fname).write_text(header + yaml.safe_dump(doc, sort_keys=False, width=110))
            print(fname, n_ok, "of", len(cases))


if __name__ == "__main__":
    main()
