"""The namespaced permissions gpujobs uses (kept equal to docs/rbac.yaml by a test).

Nothing in RULES is cluster-wide; CLUSTER_READ_RULES are optional cluster-wide reads (get, list,
watch only) that make queued jobs' forecasts and plan() complete. Cluster-scoped reads the preflight would like
(ClusterQueue, WorkloadPriorityClass, ClusterTrainingRuntime, Volcano Queue, the Trainer v2 CRD,
PriorityClass) are optional: on 403 that check is skipped with a warning.
Discovery and SelfSubjectAccessReview are open to every authenticated user by
Kubernetes' default ``system:discovery`` / ``system:basic-user`` ClusterRoles.
"""
from __future__ import annotations

from ..kinds import KINDS

Rule = tuple[str, tuple[str, ...], tuple[str, ...]]


def _kind_rules() -> tuple[Rule, ...]:
    """One rule per API group of the kinds (their plurals, in registry order) with their verbs."""
    groups: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for k in KINDS.values():
        groups.setdefault((k.group, tuple(k.verbs)), []).append(k.plural)
    return tuple((group, tuple(plurals), verbs) for (group, verbs), plurals in groups.items())


RULES: tuple[Rule, ...] = (
    # (apiGroup, resources, verbs): exactly what the code calls, checked by recording the requests of
    # the simulated stories (tests/k8s_status/test_rbac_requests.py); first the job kinds'
    *_kind_rules(),
    ("", ("configmaps",), ("create", "get")),
    ("", ("secrets",), ("create", "get", "delete")),  # delete: a failed submit's rollback of its payload Secret
    # create: a checkpointing job's default claim (a dry run first: is there a default StorageClass?);
    # get, delete: a retried create's adoption and a failed submit's rollback (submit/checkpoint_claim.py)
    ("", ("persistentvolumeclaims",), ("create", "get", "delete")),
    # a kind's companion (the headless Service of a several-node batch/v1 Job); get, delete: as for the claim
    ("", ("services",), ("create", "get", "delete")),
    ("", ("pods",), ("list", "watch", "patch")),  # patch: job.stacks(), a request annotation, no exec
    ("", ("pods/log",), ("get",)),
    ("scheduling.volcano.sh", ("podgroups",), ("list", "watch")),
    ("kueue.x-k8s.io", ("localqueues",), ("get", "list", "watch")),
    ("kueue.x-k8s.io", ("workloads",), ("list", "watch")),
    ("visibility.kueue.x-k8s.io", ("localqueues/pendingworkloads",), ("get",)),
)

READ_VERBS = ("get", "list", "watch")
CLUSTER_READ_RULES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    # optional, read-only, cluster-wide (the ClusterRole gpujobs-forecast-reader of docs/rbac.yaml):
    # what queued jobs' reasons and expected starts and plan() read (status/forecasting.py)
    ("kueue.x-k8s.io", ("clusterqueues", "cohorts", "resourceflavors", "workloadpriorityclasses",
                        "localqueues", "workloads"), READ_VERBS),
    ("visibility.kueue.x-k8s.io", ("clusterqueues/pendingworkloads",), ("get",)),
    ("", ("limitranges",), READ_VERBS),  # their container defaults count in a pending Workload's usage
    ("node.k8s.io", ("runtimeclasses",), READ_VERBS),  # their pod overhead counts too
)


def _verbs(rules: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...]) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for group, resources, verbs in rules:
        for r in resources:
            out.setdefault((group, r), set()).update(verbs)
    return out


def cluster_read_verbs() -> dict[tuple[str, str], set[str]]:
    """{(apiGroup, resource): verbs} from CLUSTER_READ_RULES."""
    return _verbs(CLUSTER_READ_RULES)


def verbs_by_resource() -> dict[tuple[str, str], set[str]]:
    """{(apiGroup, resource): verbs} from RULES."""
    return _verbs(RULES)


def user_manifests(namespace: str, user: str) -> list[dict]:
    """The Role ``gpujobs-user`` (RULES) in ``namespace`` and a RoleBinding of it to ``user``, for
    ``gpujobs admin rbac -n NS --user NAME | kubectl apply -f -`` (no file of a checkout needed)."""
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "gpujobs-user", "namespace": namespace},
            "rules": [{"apiGroups": [group], "resources": list(resources), "verbs": list(verbs)}
                      for group, resources, verbs in RULES]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": _object_name(f"gpujobs-user-{user}"), "namespace": namespace},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "gpujobs-user"},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}
    return [role, binding]


def _object_name(text: str) -> str:
    """``text`` as an object name (DNS subdomain: lowercase letters, digits, '-', '.')."""
    import re
    return re.sub(r"[^a-z0-9.-]+", "-", text.lower())[:253].strip("-.")
