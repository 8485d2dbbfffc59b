"""Kueue's Go test-fixture builders, read as facts: one class per builder
(``utiltesting.MakeWorkload(...).Priority(...).Obj()``, MakeClusterQueue, MakeAdmission, ...),
a method per builder method the upstream tests call, each recording its fact in ``self.d``;
an upstream method a class does not have makes the case Unsupported (written with ``skip:`` and
the reason). ``extract.py`` evaluates the tests' expressions with these (see MAKERS) and writes
the facts as the YAML of tests/admission/conformance/. No Go code is reproduced.
"""
from __future__ import annotations

import re

_SUFFIX = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2 ** 10, "Mi": 2 ** 20,
           "Gi": 2 ** 30, "Ti": 2 ** 40}


class Unsupported(Exception):
    pass


def qty(s) -> float:
    if isinstance(s, (int, float)):
        return float(s)
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([a-zA-Z]*)", str(s))
    if not m or (m.group(2) and m.group(2) not in _SUFFIX):
        raise Unsupported(f"quantity {s!r}")
    v = float(m.group(1)) * _SUFFIX.get(m.group(2), 1)
    return int(v) if float(v).is_integer() else v


RES = {"corev1.ResourceCPU": "cpu", "corev1.ResourceMemory": "memory", "corev1.ResourcePods": "pods",
       "ResourceGPU": "example.com/gpu", "corev1.ResourceEphemeralStorage": "ephemeral-storage"}
CONST = {
    "kueue.PreemptionPolicyNever": "Never", "kueue.PreemptionPolicyLowerPriority": "LowerPriority",
    "kueue.PreemptionPolicyLowerOrNewerEqualPriority": "LowerOrNewerEqualPriority",
    "kueue.PreemptionPolicyAny": "Any", "kueue.BorrowWithinCohortPolicyNever": "Never",
    "kueue.BorrowWithinCohortPolicyLowerPriority": "LowerPriority",
    "kueue.StrictFIFO": "StrictFIFO", "kueue.BestEffortFIFO": "BestEffortFIFO",
    "kueue.TryNextFlavor": "TryNextFlavor", "kueue.MayStopSearch": "MayStopSearch",
    "kueue.Borrow": "MayStopSearch", "kueue.Preempt": "MayStopSearch",
    "kueue.DefaultPodSetName": "main", "kueue.WorkloadEvicted": "Evicted",
    "kueue.WorkloadPreempted": "Preempted", "kueue.WorkloadQuotaReserved": "QuotaReserved",
    "kueue.WorkloadAdmitted": "Admitted", "metav1.ConditionTrue": "True",
    "metav1.ConditionFalse": "False", "kueue.BorrowingOverPreemption": "BorrowingOverPreemption",
    "kueue.PreemptionOverBorrowing": "PreemptionOverBorrowing",
    "kueue.InClusterQueueReason": "InClusterQueue", "kueue.InCohortReclamationReason": "InCohortReclamation",
    "kueue.InCohortReclaimWhileBorrowingReason": "InCohortReclaimWhileBorrowing",
    "config.LessThanInitialShare": "LessThanInitialShare",
    "config.LessThanOrEqualToFinalShare": "LessThanOrEqualToFinalShare",
    "kueue.InCohortFairSharingReason": "InCohortFairSharing",
    "time.Second": 1, "time.Minute": 60, "time.Millisecond": 0.001, "time.Hour": 3600,
    "now": 0.0,
}


# Each Go fixture builder (MakeWorkload(...).Request(...).Obj(), ...) is a class below: a method per
# builder method the upstream tests call, each recording its fact in ``self.d``; an upstream method a
# class does not have makes the case Unsupported (skipped, with the reason).


def _sets(key, convert=None, on="d"):
    """A builder method that records its one argument as ``<on>[key]`` (through ``convert``)."""
    def method(self, value):
        getattr(self, on)[key] = convert(value) if convert else value
        return self
    return method


def _ignore(self, *a):
    """A builder method whose fact the engine does not use."""
    return self


def _clone(self):
    import copy
    c = copy.copy(self)
    c.d = copy.deepcopy(self.d)
    return c


def _fair_weight(w):
    return float(qty(w))


_EFFECT = {"corev1.TaintEffectNoSchedule": "NoSchedule", "corev1.TaintEffectNoExecute": "NoExecute",
           "corev1.TaintEffectPreferNoSchedule": "PreferNoSchedule"}


def _toleration(t: dict) -> dict:
    op = {"corev1.TolerationOpExists": "Exists", "corev1.TolerationOpEqual": "Equal"}
    out = {"key": t.get("Key", ""), "operator": op.get(t.get("Operator"), "Equal"), "value": t.get("Value", "")}
    if t.get("Effect"):
        out["effect"] = _EFFECT.get(t["Effect"], t["Effect"])
    return out


def _add_request(podset: dict, r, q) -> None:
    podset["requests"][r] = qty(q)


def _add_toleration(podset: dict, t) -> None:
    podset.setdefault("tolerations", []).append(_toleration(t))


def _add_node_selector(podset: dict, m) -> None:
    podset.setdefault("node_selector", {}).update(m)


def _add_resource_group(d: dict, fqs) -> None:
    d["resource_groups"].append([f.d if isinstance(f, FQ) else f for f in fqs])


class WL:
    def __init__(self, name, ns):
        self.d = {"name": name, "ns": ns, "priority": 0, "queue": None, "created": 0.0,
                  "podsets": [{"name": "main", "count": 1, "requests": {}}],
                  "admission": None, "reserved_at": None, "evicted": None, "preempted_reason": None,
                  "active": True}

    def Request(self, r, q):
        _add_request(self.d["podsets"][0], r, q)
        return self

    def Toleration(self, t):
        _add_toleration(self.d["podsets"][0], t)
        return self

    def NodeSelector(self, m):
        _add_node_selector(self.d["podsets"][0], m)
        return self

    Priority, Queue, Creation = _sets("priority"), _sets("queue"), _sets("created")
    QuotaReservedTime, Admission = _sets("reserved_at"), _sets("admission")
    Active, Name = _sets("active"), _sets("name")

    def PodSets(self, *ps):
        self.d["podsets"] = [dict(p) for p in ps]
        return self

    def ReserveQuotaAt(self, adm, t):
        self.d["admission"], self.d["reserved_at"] = adm, t
        return self

    def ReserveQuota(self, adm):
        return self.ReserveQuotaAt(adm, 0.0)

    def SimpleReserveQuota(self, cq, flavor, t):
        ps = self.d["podsets"][0]
        return self.ReserveQuotaAt({"cq": cq, "podsets": [{"name": ps["name"], "flavors": {
            r: flavor for r in ps["requests"]}}]}, t)

    def Condition(self, c):
        if c.get("Type") == "Evicted" and c.get("Status") == "True":
            self.d["evicted"] = c.get("Reason") or "Evicted"
        if c.get("Type") == "Preempted" and c.get("Status") == "True":
            self.d["preempted_reason"] = c.get("Reason", "")
        return self

    def EvictedAt(self, t):
        self.d["evicted"] = "ByTest"
        return self

    Clone = _clone

    def Obj(self):
        return self

    UID = JobUID = Label = Generation = ResourceVersion = AdmittedAt = Admitted = _ignore
    SchedulingStatsEviction = ResourceRequests = PastAdmittedTime = Annotation = _ignore
    Finalizers = OwnerReference = PriorityClassSource = PriorityClassRef = Namespace = _ignore
    ControllerReference = Labels = _ignore


class PS:
    def __init__(self, name, count):
        self.d = {"name": name, "count": count, "requests": {}}

    def Request(self, r, q):
        _add_request(self.d, r, q)
        return self

    def Toleration(self, t):
        _add_toleration(self.d, t)
        return self

    def NodeSelector(self, m):
        _add_node_selector(self.d, m)
        return self

    def Obj(self):
        return self.d

    Image = Labels = Annotations = _ignore


class PSA:
    def __init__(self, name):
        self.d = {"name": name, "flavors": {}, "count": None}

    def Flavor(self, r, f):
        self.d["flavors"][r] = f
        return self

    def Assignment(self, r, f, v):
        return self.Flavor(r, f)

    Count = _sets("count")
    ResourceUsage = _ignore

    def Obj(self):
        return self.d


class ADM:
    def __init__(self, cq, *names):
        self.d = {"cq": cq, "podsets": [{"name": n, "flavors": {}, "count": None}
                                         for n in (names or ("main",))]}

    def PodSets(self, *ps):
        self.d["podsets"] = list(ps)
        return self

    def Obj(self):
        return self.d


class FQ:
    def __init__(self, name):
        self.d = {"flavor": name, "resources": {}}

    def Resource(self, r, *qs):
        q = {"nominal": qty(qs[0]) if qs else 0}
        if len(qs) > 1 and qs[1] != "":
            q["borrowing_limit"] = qty(qs[1])
        if len(qs) > 2 and qs[2] != "":
            q["lending_limit"] = qty(qs[2])
        self.d["resources"][r] = q
        return self

    def ResourceQuotaWrapper(self, r):
        return RQ(self, r)

    def Obj(self):
        return self.d

    def FlavorQuotas(self):
        return self.d


class RQ:
    def __init__(self, fq, r):
        self.fq, self.r, self.q = fq, r, {"nominal": 0}

    NominalQuota = _sets("nominal", qty, on="q")
    BorrowingLimit = _sets("borrowing_limit", qty, on="q")
    LendingLimit = _sets("lending_limit", qty, on="q")

    def Append(self):
        self.fq.d["resources"][self.r] = self.q
        return self.fq


class CQ:
    def __init__(self, name):
        self.d = {"name": name, "cohort": None, "strategy": "BestEffortFIFO", "resource_groups": [],
                  "within": "Never", "reclaim": "Never", "borrow_within_cohort": None,
                  "max_priority_threshold": None, "when_can_borrow": "MayStopSearch",
                  "when_can_preempt": "TryNextFlavor", "preference": None}

    Cohort, QueueingStrategy = _sets("cohort"), _sets("strategy")
    FairWeight = _sets("fair_weight", _fair_weight)

    def ResourceGroup(self, *fqs):
        _add_resource_group(self.d, fqs)
        return self

    def Preemption(self, p):
        self.d["within"] = p.get("WithinClusterQueue", "Never") or "Never"
        self.d["reclaim"] = p.get("ReclaimWithinCohort", "Never") or "Never"
        bwc = p.get("BorrowWithinCohort")
        if bwc:
            self.d["borrow_within_cohort"] = bwc.get("Policy", "Never")
            self.d["max_priority_threshold"] = bwc.get("MaxPriorityThreshold")
        return self

    def FlavorFungibility(self, f):
        if f.get("WhenCanBorrow"):
            self.d["when_can_borrow"] = f["WhenCanBorrow"]
        if f.get("WhenCanPreempt"):
            self.d["when_can_preempt"] = f["WhenCanPreempt"]
        if f.get("Preference"):
            self.d["preference"] = f["Preference"]
        return self

    NamespaceSelector = _ignore
    Clone = _clone

    def Obj(self):
        return self


class LQ:
    def __init__(self, name, ns):
        self.d = {"name": name, "ns": ns, "cq": None}

    ClusterQueue = _sets("cq")

    def Obj(self):
        return self


class COH:
    def __init__(self, name):
        self.d = {"name": name, "parent": None, "resource_groups": []}

    Parent = _sets("parent")
    FairWeight = _sets("fair_weight", _fair_weight)

    def ResourceGroup(self, *fqs):
        _add_resource_group(self.d, fqs)
        return self

    def Obj(self):
        return self

    def Cohort(self):
        return self


class RF:
    def __init__(self, name):
        self.d = {"name": name, "labels": {}, "taints": [], "tolerations": [], "topology": None}

    def NodeLabel(self, k, v):
        self.d["labels"][k] = v
        return self

    def Taint(self, t):
        self.d["taints"].append(t)
        return self

    def Toleration(self, t):
        self.d["tolerations"].append(t)
        return self

    TopologyName = _sets("topology")

    def Obj(self):
        return self

    def record(self) -> dict:
        out = {"name": self.d["name"]}
        if self.d["labels"]:
            out["node_labels"] = self.d["labels"]
        if self.d["taints"]:
            out["node_taints"] = [{"key": t.get("Key", ""), "value": t.get("Value", ""),
                                   "effect": _EFFECT.get(t.get("Effect"), t.get("Effect"))} for t in self.d["taints"]]
        if self.d["tolerations"]:
            out["tolerations"] = [_toleration(t) for t in self.d["tolerations"]]
        return out

    def untolerated(self) -> bool:
        """A NoSchedule/NoExecute taint the flavor's own tolerations do not cover (a pod
        without tolerations cannot use it)."""
        for t in self.d["taints"]:
            if t.get("Effect") in ("corev1.TaintEffectNoSchedule", "corev1.TaintEffectNoExecute") and not any(
                    tol.get("Key") == t.get("Key") and tol.get("Value", t.get("Value")) == t.get("Value")
                    for tol in self.d["tolerations"]):
                return True
        return False


MAKERS = {"MakeResourceFlavor": RF, "MakeWorkload": WL, "MakePodSet": PS, "MakePodSetAssignment": PSA, "MakeAdmission": ADM,
          "MakeFlavorQuotas": FQ, "MakeClusterQueue": CQ, "MakeLocalQueue": LQ, "MakeCohort": COH}
