"""docs/rbac.yaml is a namespaced Role whose rules equal gpujobs' RULES constant."""
from __future__ import annotations

from pathlib import Path

import yaml

from gpujobs.backends.kubernetes.submit.rbac import RULES, cluster_read_verbs, verbs_by_resource

DOC = Path(__file__).resolve().parents[2] / "docs" / "rbac.yaml"


def test_rbac_yaml_matches_rules_and_is_namespaced():
    docs = [d for d in yaml.safe_load_all(DOC.read_text()) if d]
    kinds = [d["kind"] for d in docs]
    assert kinds == ["Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"]
    role = docs[0]
    assert "namespace" not in role["metadata"]  # applied with kubectl -n
    found: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]
        for g in rule["apiGroups"]:
            for r in rule["resources"]:
                found.setdefault((g, r), set()).update(rule["verbs"])
    assert found == verbs_by_resource()
    assert docs[1]["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    assert len(RULES) == len(role["rules"])


def test_the_cluster_role_only_reads():
    """The optional cluster-wide part (forecasts, plan) is read-only and equals CLUSTER_READ_RULES."""
    docs = [d for d in yaml.safe_load_all(DOC.read_text()) if d]
    role = docs[2]
    found: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        assert set(rule["verbs"]) <= {"get", "list", "watch"}, rule
        for g in rule["apiGroups"]:
            for r in rule["resources"]:
                found.setdefault((g, r), set()).update(rule["verbs"])
    assert found == cluster_read_verbs()
    assert docs[3]["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": role["metadata"]["name"]}


def test_admin_rbac_prints_the_role_and_a_binding_to_the_user(capsys):
    """[k8s-parity] 7: the RBAC fix is a command a pip user can run (no docs/rbac.yaml needed)."""
    from gpujobs.cli import main
    assert main(["admin", "rbac", "-n", "team-a", "--user", "alice@example.com"]) == 0
    role, binding = yaml.safe_load_all(capsys.readouterr().out)
    doc_role = next(d for d in yaml.safe_load_all(DOC.read_text()) if d and d["kind"] == "Role")
    assert role["kind"] == "Role" and role["metadata"] == {"name": doc_role["metadata"]["name"],
                                                           "namespace": "team-a"}
    assert role["rules"] == doc_role["rules"]
    assert binding["kind"] == "RoleBinding" and binding["metadata"]["namespace"] == "team-a"
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["metadata"]["name"] == "gpujobs-user-alice-example.com"
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                    "name": "alice@example.com"}]
