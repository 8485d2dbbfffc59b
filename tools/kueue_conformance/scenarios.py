"""Read scenarios of Kueue's integration tests (Ginkgo specs) into steps, as data.

A spec is the statements of its Describe's ``BeforeEach``, its When's ``BeforeEach`` and its
``It``, read with the Go-expression reader of ``gosyntax.py`` and the fixture builders of
``fixtures.py``. Each statement becomes a step: an object created or deleted (the suite's
helpers ``createCohort`` / ``createQueue`` (a ClusterQueue and a LocalQueue of the same name) /
``createWorkload[WithPriority]``, ``util.MustCreate``, ``util.ExpectObjectToBeDeleted``), an
eviction finished, or an expectation (``util.ExpectWorkloadsToBeAdmitted``, the admission and
pending metrics, weighted shares, ...). A statement this reader does not know makes the spec
Unsupported (written with ``skip:`` and the reason), so no step is guessed. The expectations
come from the upstream spec, never from gpujobs; ``runner.py`` replays the steps.
"""
from __future__ import annotations

import re

from fixtures import CQ, COH, LQ, RF, WL, Unsupported
from gosyntax import Parser, tokenize

# the specs the issue names (kueue-0.20): (file, When, It or None for every It of the When)
FAIR = "test/integration/singlecluster/scheduler/fairsharing/fair_sharing_test.go"
SCHED = "test/integration/singlecluster/scheduler/scheduler_test.go"
SPECS = (
    (FAIR, "RecomputeAssignmentUponPreemptionTargetsOverlap with multiple flavors",
     "hero workload sticks to preferred flavor if overlap resolved"),
    (FAIR, "using hierarchical cohorts with several flavors", None),
    (FAIR, "ClusterQueue head is ineligible for admission due to DominantResourceShare", None),
    (SCHED, "Deleting ClusterQueue should update cohort borrowable resources", None),
    (SCHED, "Deleting child Cohort should update borrowable resources for parent Cohort", None),
)
# the suites' manager configuration (their suite_test.go): fair sharing on in fairsharing/
FAIR_SHARING = {FAIR: True, SCHED: False}


class _Obj:
    """A Go value with fields (``ns.Name``)."""
    def __init__(self, **kw):
        self.__dict__.update(kw)


def _body(src: str, start: int) -> tuple[str, int]:
    """The text inside the braces of the first ``func(...) {`` at or after ``start``, and the
    index just after its closing brace."""
    i = src.index("func(", start)
    j = src.index("{", src.index(")", i))
    depth = 0
    for k in range(j, len(src)):
        c = src[k]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return src[j + 1:k], k + 1
    raise SyntaxError("unbalanced braces")


def _block_of(src: str, call: str, name: str, start: int = 0) -> tuple[str, int]:
    i = src.index(f'{call}("{name}"', start)
    return _body(src, i)[0], i


def _before_each(body: str, indent: str) -> list[str]:
    """The BeforeEach bodies directly inside ``body`` (at ``indent``)."""
    out = []
    for m in re.finditer(rf"\n{indent}ginkgo\.BeforeEach\(", body):
        out.append(_body(body, m.start())[0])
    return out


def statements(text: str) -> list:
    """Go statements of a function body: ("assign", name, expr) / ("expr", expr) /
    ("for", count, [statements]) / ("block", [statements])."""
    p = Parser(tokenize(text))
    out = _stmts(p)
    if p.peek()[0] != "eof":
        raise Unsupported(f"statement at {p.peek()[1]!r}")
    return out


def _stmts(p: Parser) -> list:
    out: list = []
    while p.peek()[0] != "eof" and p.peek()[1] != "}":
        v = p.peek()[1]
        if v == "for":
            p.take()
            p.take("range")
            n = p.expr()
            p.take("{")
            body = _stmts(p)
            p.take("}")
            out.append(("for", n, body))
        elif v == "{":
            p.take()
            body = _stmts(p)
            p.take("}")
            out.append(("block", body))
        elif v in ("if", "switch", "select", "go", "return", "var", "defer"):
            raise Unsupported(f"Go statement {v!r}")
        else:
            e = p.expr()
            if p.peek()[1] in (":=", "="):
                p.take()
                if e[0] != "id":
                    raise Unsupported("assignment to a field")
                out.append(("assign", e[1], p.expr()))
            else:
                out.append(("expr", e))
        if p.peek()[1] == ";":
            p.take()
    return out


class Spec:
    """Turns a spec's statements into steps (``self.steps``), evaluating builder chains with
    extract.Evaluator (handed in, so this module needs no import cycle)."""

    def __init__(self, evaluator_cls):
        self.vals: dict = {"ns": _Obj(Name="ns"), "ctx": None, "k8sClient": None}
        self.steps: list[dict] = []
        self.gates: dict[str, bool] = {}
        self.generated = 0
        spec = self

        class Ev(evaluator_cls):
            def ev(self, x):
                if x[0] == "id" and x[1] in spec.vals:
                    return spec.vals[x[1]]
                if x[0] == "sel" and x[2] == "Name":
                    obj = self.ev(x[1])
                    return obj.d["name"] if hasattr(obj, "d") else obj.Name
                if x[0] == "call":
                    f = x[1]
                    name = _text(f)
                    if f[0] == "sel" and f[2] == "GetName" and not x[2]:
                        return self.ev(f[1]).d["name"]
                    if name in ("kueue.CohortReference", "kueue.LocalQueueName", "kueue.ClusterQueueReference",
                                "kueue.ResourceFlavorReference"):
                        return self.ev(x[2][0])
                    if f[0] == "sel" and f[2] == "MakeWorkloadWithGeneratedName":
                        spec.generated += 1
                        return WL(f"{self.ev(x[2][0])}{spec.generated}", self.ev(x[2][1]))
                    if f[0] == "sel" and f[2] == "GeneratedName":
                        obj = self.ev(f[1])
                        obj.d["name"] = f"{self.ev(x[2][0])}generated"
                        return obj
                return super().ev(x)
        self.ev = Ev({})

    # ---------------------------------------------------------------- statements
    def run(self, stmts: list) -> None:
        for st in stmts:
            if st[0] == "assign":
                rhs = st[2]
                helper = rhs[0] == "call" and (_text(rhs[1]).startswith(("create", "util.")))
                self.vals[st[1]] = self.call(rhs) if helper else self.ev.ev(rhs)
            elif st[0] == "expr":
                if st[2:] or st[1][0] != "call":
                    raise Unsupported("expression statement")
                self.call(st[1])
            elif st[0] == "for":
                for _ in range(int(self.ev.ev(st[1]))):
                    self.run(st[2])
            elif st[0] == "block":
                self.run(st[1])

    def _names(self, args) -> list[str]:
        out = []
        for a in args:
            v = self.ev.ev(a[1] if a[0] == "spread" else a)
            out.extend(_wid(w) for w in (v if isinstance(v, list) else [v]))
        return out

    def _create(self, obj) -> None:
        if isinstance(obj, RF):
            return  # flavors without labels or taints here: every flavor admits every pod set
        if isinstance(obj, COH):
            self.steps.append({"create_cohort": dict(obj.d)})
        elif isinstance(obj, CQ):
            from extract import cq_record
            self.steps.append({"create_cluster_queue": cq_record(obj)})
        elif isinstance(obj, LQ):
            self.steps.append({"create_local_queue": {"name": obj.d["name"], "cluster_queue": obj.d["cq"]}})
        elif isinstance(obj, WL):
            from extract import workload_record
            rec = workload_record(obj)
            if "cluster_queue" in rec:
                raise Unsupported("a workload created with a quota reservation")
            self.steps.append({"create_workload": rec})
        else:
            raise Unsupported(f"creating a {type(obj).__name__}")

    def call(self, x):
        f, args = x[1], x[2]
        name = _text(f)
        ev = self.ev.ev
        if name == "createCohort":  # util.MustCreate + remember for cleanup
            obj = ev(args[0])
            self._create(obj)
            return obj
        if name == "createQueue":  # the ClusterQueue, then a LocalQueue of its name pointing at it
            obj = ev(args[0])
            self._create(obj)
            self.steps.append({"create_local_queue": {"name": obj.d["name"], "cluster_queue": obj.d["name"]}})
            return obj
        if name in ("createWorkload", "createWorkloadWithPriority"):
            self.generated += 1
            w = WL(f"workload-{self.generated}", "ns").Queue(ev(args[0])).Request("cpu", ev(args[1]))
            if name == "createWorkloadWithPriority":
                w.Priority(int(ev(args[2])))
            self._create(w)
            return w
        if name == "util.MustCreate":
            obj = ev(args[2])
            self._create(obj)
            return obj
        if name == "util.ExpectObjectToBeDeleted":
            obj = ev(args[2])
            kind = {COH: "delete_cohort", CQ: "delete_cluster_queue"}.get(type(obj))
            if kind is None:
                raise Unsupported(f"deleting a {type(obj).__name__}")
            self.steps.append({kind: obj.d["name"]})
            return None
        if name == "features.SetFeatureGateDuringTest":
            self.gates[_text(args[1]).removeprefix("features.")] = bool(ev(args[2]))
            return None
        simple = {"util.ExpectWorkloadsToBeAdmitted": "expect_admitted",
                  "util.ExpectWorkloadsToBePending": "expect_pending",
                  "util.ExpectWorkloadsToBePreempted": "expect_preempted",
                  "util.FinishEvictionForWorkloads": "finish_eviction"}
        if name in simple:
            self.steps.append({simple[name]: self._names(args[2:])})
            return None
        if name == "util.ExpectWorkloadToBeAdmittedAs":
            adm = ev(args[3])
            adm = adm.d if hasattr(adm, "d") else adm
            self.steps.append({"expect_admitted_as": {
                "workload": _wid(ev(args[2])), "cluster_queue": adm["cq"],
                "flavors": {ps["name"]: ps["flavors"] for ps in adm["podsets"]}}})
            return None
        if name == "util.FinishEvictionOfWorkloadsInCQ":
            self.steps.append({"finish_eviction_in_cq": {"cluster_queue": ev(args[2]).d["name"],
                                                         "count": int(ev(args[3]))}})
            return None
        if name in ("util.ExpectAdmittedWorkloadsTotalMetric", "util.ExpectReservingActiveWorkloadsMetric"):
            key = "expect_admitted_total" if "Total" in name else "expect_reserving"
            self.steps.append({key: {"cluster_queue": ev(args[0]).d["name"], "count": int(ev(args[-1]))}})
            return None
        if name == "util.ExpectPendingWorkloadsMetric":
            self.steps.append({"expect_pending_metric": {"cluster_queue": ev(args[0]).d["name"],
                                                         "active": int(ev(args[1])), "inadmissible": int(ev(args[2]))}})
            return None
        if name in ("util.ExpectClusterQueueWeightedShareMetric", "expectCohortWeightedShare"):
            node = ev(args[0])
            self.steps.append({"expect_weighted_share": {
                "cohort" if name.startswith("expect") else "cluster_queue": node if isinstance(node, str) else node.d["name"],
                "value": float(ev(args[1]))}})
            return None
        if name == "gomega.Consistently().Should" and f[1][2] and f[1][2][0][0] == "opaque":
            args = f[1][2]
            m = re.search(r"g\s*\.\s*Expect\s*\(\s*(\w+)\s*\.\s*Status\s*\.\s*Admission\s*\)\s*\.\s*ShouldNot\s*\(\s*"
                          r"gomega\s*\.\s*BeNil", args[0][1])
            if m:
                self.steps.append({"expect_admitted": [_wid(self.vals[m.group(1)])]})
                return None
            raise Unsupported("gomega.Consistently")
        if f[0] == "sel" and isinstance(f[1], tuple) and f[1][0] == "call" and _text(f[1][1]) == "gomega.Expect":
            return self._expectation(f[1][2][0], f[2], args)
        if name == "ginkgo.By":
            if len(args) > 1 and args[1][0] == "opaque":
                self.run(statements(_body(args[1][1], 0)[0]))
            return None
        if name in ("util.ExpectClusterQueuesToBeActive", "util.ExpectLocalQueuesToBeActive", "ginkgo.DeferCleanup",
                    "util.ExpectCohortSubtreeQuotaGaugeMetricCleaned", "fwk.StartManager"):
            return None  # waits for the cache / the manager, or cleanup after the spec
        if name in ("util.CreateNamespaceFromPrefixWithLog",):
            return _Obj(Name="ns")
        raise Unsupported(f"call {name}")

    def _expectation(self, subject, matcher: str, margs) -> None:
        text = _text(subject)
        if text == "k8sClient.Get" or (subject[0] == "call" and _text(subject[1]) == "k8sClient.Get"):
            return  # a refresh of the object
        m = re.fullmatch(r"(\w+)\.Status\.Conditions", text)
        if m and matcher == "NotTo" and "WorkloadPreempted" in repr(margs):
            self.steps.append({"expect_not_preempted": [_wid(self.vals[m.group(1)])]})
            return
        raise Unsupported(f"gomega.Expect({text}).{matcher}")


def _wid(w: WL) -> str:
    """A workload's id in the data: ``<namespace>/<name>`` (as extract.workload_record)."""
    return f"{w.d['ns']}/{w.d['name']}" if w.d["ns"] else w.d["name"]


def _text(x) -> str:
    if x[0] == "id":
        return x[1]
    if x[0] == "sel":
        return _text(x[1]) + "." + x[2]
    if x[0] == "call":
        return _text(x[1]) + "()"
    return "?"


def spec_cases(src: str, path: str, when: str, it: str | None, ref: str, evaluator_cls) -> list[dict]:
    """One case per It of ``when`` (or just ``it``): its source and steps, or ``skip``."""
    w_body, w_at = _block_of(src, "ginkgo.When", when)
    describe_at = src.rindex("\nvar _ = ginkgo.Describe(", 0, w_at)
    d_body = _body(src, describe_at)[0]
    names = [it] if it else re.findall(r'\n\t\tginkgo\.It\("([^"]+)"', w_body)
    out = []
    for name in names:
        case: dict = {"source": {"repo": "kubernetes-sigs/kueue", "ref": ref, "file": path,
                                 "test": f"{when} / It", "case": name}}
        spec = Spec(evaluator_cls)
        for block in re.findall(r"\n\tconst \(\n(.*?)\n\t\)", d_body, re.S):  # the Describe's constants
            spec.vals.update(re.findall(r'^\s*(\w+)\s*=\s*"([^"]*)"\s*$', block, re.M))
        try:
            for text in _before_each(d_body, "\t") + _before_each(w_body, "\t\t"):
                spec.run(statements(text))
            spec.run(statements(_block_of(w_body, "ginkgo.It", name)[0]))
            if FAIR_SHARING[path]:
                case["fair_sharing"] = True
            if spec.gates:
                case["feature_gates"] = spec.gates
            case["steps"] = spec.steps
        except Unsupported as exc:
            case["skip"] = f"not extracted: uses {exc}"
        out.append(case)
    return out
