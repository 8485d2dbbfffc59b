"""Render Kueue (kueue.x-k8s.io/v1beta2) admin objects from a QueueTable."""
from __future__ import annotations

from typing import Any

from .teams import QueueTable, Quota, Team

API = "kueue.x-k8s.io/v1beta2"
MANAGED = {"app.kubernetes.io/managed-by": "gpujobs"}
_FIRST = ("cpu", "memory")


def _meta(name: str, namespace: str | None = None) -> dict[str, Any]:
    m: dict[str, Any] = {"name": name}
    if namespace:
        m["namespace"] = namespace
    m["labels"] = dict(MANAGED)
    return m


def resource_flavor(name: str, fdef: dict[str, Any]) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": API, "kind": "ResourceFlavor", "metadata": _meta(name)}
    spec = {k: fdef[k] for k in ("nodeLabels", "nodeTaints", "tolerations", "topologyName") if fdef.get(k)}
    if spec:
        obj["spec"] = spec
    return obj


def priority_class(name: str, value: int, description: str | None) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": API, "kind": "WorkloadPriorityClass", "metadata": _meta(name),
                           "value": value}
    if description:
        obj["description"] = description
    return obj


def _resource(name: str, q: Quota | None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "nominalQuota": q.nominal if q else 0}
    if q and q.borrowing_limit is not None:
        out["borrowingLimit"] = q.borrowing_limit
    if q and q.lending_limit is not None:
        out["lendingLimit"] = q.lending_limit
    return out


def cluster_queue(team: Team) -> dict[str, Any]:
    """One resource group covering every resource the team has quota for (missing ones get 0),
    so each flavor lists the same resources in the same order, as Kueue requires."""
    names = {r for res in team.quota.values() for r in res}
    covered = [r for r in _FIRST if r in names] + sorted(names - set(_FIRST))
    flavors = [{"name": flavor, "resources": [_resource(r, res.get(r)) for r in covered]}
               for flavor, res in team.quota.items()]
    spec: dict[str, Any] = {}
    if team.cohort:
        spec["cohortName"] = team.cohort
    spec["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": team.namespace}}
    spec["queueingStrategy"] = team.queueing_strategy
    spec["preemption"] = dict(team.preemption)
    spec["resourceGroups"] = [{"coveredResources": covered, "flavors": flavors}]
    return {"apiVersion": API, "kind": "ClusterQueue", "metadata": _meta(team.name), "spec": spec}


def local_queue(team: Team) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "LocalQueue", "metadata": _meta(team.queue, team.namespace),
            "spec": {"clusterQueue": team.name}}


def render_table(table: QueueTable) -> list[dict[str, Any]]:
    """ResourceFlavors, WorkloadPriorityClasses, ClusterQueues, then LocalQueues (apply order)."""
    used = {f for t in table.teams for f in t.quota}
    objs = [resource_flavor(n, d) for n, d in table.flavors.items() if n in used]
    objs += [priority_class(n, v, d) for n, (v, d) in table.priorities.items()]
    objs += [cluster_queue(t) for t in table.teams]
    objs += [local_queue(t) for t in table.teams]
    return objs
