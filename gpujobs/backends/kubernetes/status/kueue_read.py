"""Reading the cluster's Kueue objects for the forecast (read-only; see docs/rbac.yaml and
:mod:`.forecasting` for what is read in which scope)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

CORE = "/api/v1"
VISIBILITY = "/apis/visibility.kueue.x-k8s.io/v1beta2"
FORBIDDEN = "forbidden"


@dataclass
class KueueObjects:
    """The cluster's Kueue objects, as this user may read them."""
    scope: str  # cluster | namespace | none
    namespace: str
    cluster_queues: list[dict] = field(default_factory=list)
    cohorts: list[dict] = field(default_factory=list)
    flavors: list[dict] | None = None
    priorities: dict[str, int] = field(default_factory=dict)
    local_queues: list[dict] = field(default_factory=list)
    workloads: list[dict] = field(default_factory=list)
    own_jobs: dict[str, dict] = field(default_factory=dict)  # uid -> gpujobs job object
    pending_elsewhere: dict[str, list[dict]] = field(default_factory=dict)  # cq -> visibility items
    kueue_version: str | None = None  # the supported version row admission is modelled on (gates.py)
    limit_ranges: list[dict] = field(default_factory=list)  # LimitRanges: Kueue counts their container defaults
    runtime_classes: list[dict] = field(default_factory=list)  # RuntimeClasses: Kueue counts their pod overhead


def _list(api: Any, path: str, timeout: Any) -> list[dict] | str:
    """The items, [] when the resource is not served (404), FORBIDDEN on 403."""
    from kubernetes.client.exceptions import ApiException
    try:
        out = api.call_api(path, "GET", response_type="object", auth_settings=["BearerToken"],
                           _return_http_data_only=True, _request_timeout=timeout)
    except ApiException as exc:
        if exc.status == 403:
            return FORBIDDEN
        if exc.status == 404:
            return []
        raise
    return list((out or {}).get("items") or [])


Lister = Callable[[str, "str | None"], "list[dict] | str"]
"""(a plural of KINDS_READ, namespace or None for cluster-wide) -> the objects, [] if not served, or
FORBIDDEN."""
KINDS_READ = ("clusterqueues", "cohorts", "resourceflavors", "workloadpriorityclasses", "localqueues",
              "workloads", "limitranges", "runtimeclasses")
GROUPS = {"limitranges": ("", "v1"), "runtimeclasses": ("node.k8s.io", "v1")}  # the others are Kueue's


def group_version(plural: str) -> tuple[str, str]:
    return GROUPS.get(plural, ("kueue.x-k8s.io", "v1beta2"))


def http_lister(api: Any, timeout: Any = 30) -> Lister:
    """One list call per read."""
    def lst(plural: str, namespace: str | None = None) -> list[dict] | str:
        group, version = group_version(plural)
        base = f"/apis/{group}/{version}" if group else CORE
        path = f"{base}/{plural}" if namespace is None else f"{base}/namespaces/{namespace}/{plural}"
        return _list(api, path, timeout)
    return lst


def read_cluster(api: Any, namespace: str, timeout: Any = 30, *, workloads: list[dict] | None = None,
                 own_jobs: Mapping[str, dict] | None = None, lister: Lister | None = None) -> KueueObjects:
    """Read what the forecast needs (``lister``: where cluster-wide objects come from, by default
    one list call each). ``workloads``: this namespace's Workloads as already watched (used when
    the cluster-wide list is forbidden; else one namespaced list call)."""
    lst = lister or http_lister(api, timeout)
    cqs = lst("clusterqueues", None)
    if cqs == FORBIDDEN:
        return KueueObjects("none", namespace, own_jobs=dict(own_jobs or {}))
    assert isinstance(cqs, list)
    c = KueueObjects("cluster", namespace, cluster_queues=cqs, own_jobs=dict(own_jobs or {}))
    cohorts = lst("cohorts", None)
    c.cohorts = cohorts if isinstance(cohorts, list) else []
    flavors = lst("resourceflavors", None)
    c.flavors = flavors if isinstance(flavors, list) and flavors else None
    prios = lst("workloadpriorityclasses", None)
    c.priorities = {p["metadata"]["name"]: int(p.get("value") or 0) for p in prios} \
        if isinstance(prios, list) else {}
    lqs = lst("localqueues", None)
    if lqs == FORBIDDEN:
        lqs = lst("localqueues", namespace)
    c.local_queues = lqs if isinstance(lqs, list) else []
    wls = lst("workloads", None)
    if wls == FORBIDDEN:
        c.scope = "namespace"
        wls = list(workloads) if workloads is not None else lst("workloads", namespace)
        for cq in cqs:  # whose pending workloads are ahead, from the visibility API
            name = cq["metadata"]["name"]
            items = _list(api, f"{VISIBILITY}/clusterqueues/{name}/pendingworkloads", timeout)
            if isinstance(items, list):
                c.pending_elsewhere[name] = items
    c.workloads = wls if isinstance(wls, list) else []
    lrs = lst("limitranges", None)  # optional: without them, a pod counts its own requests only
    if lrs == FORBIDDEN:
        lrs = lst("limitranges", namespace)
    c.limit_ranges = lrs if isinstance(lrs, list) else []
    rcs = lst("runtimeclasses", None)  # optional, cluster-scoped
    c.runtime_classes = rcs if isinstance(rcs, list) else []
    return c


