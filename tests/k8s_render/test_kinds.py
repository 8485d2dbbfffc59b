"""A Kubernetes job kind is one module implementing one Kind protocol (kinds/): its name is written
in at most 3 package modules, every registered kind implements the whole protocol, renders objects
the registry recognises as its own, and gives each phase it declares (a missed branch of its
``state`` would show as a silent unknown phase)."""
from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

import gpujobs
from gpujobs.backends.kubernetes.kinds import (DEFAULT_KIND, KINDS, KUEUE_KINDS, Kind, for_object,
                                               kind_state, pod_sets, resolve_kind)
from gpujobs.backends.kubernetes.kinds.base import PHASES, KindState
from gpujobs.backends.kubernetes.naming import ANN_GANG
from gpujobs.backends.kubernetes.render.job import RenderOptions, render_job
from gpujobs.backends.kubernetes.status import mapping
from gpujobs.backends.kubernetes.submit.rbac import RULES
from gpujobs.errors import SpecError
from gpujobs.spec import FRAMEWORKS, JobSpec

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("gpujobs", "gpujobs_magic")
MAX_MODULES = 3


def train(x=1):
    return x


def _modules_naming(name: str, root: Path = ROOT) -> list[str]:
    word = re.compile(rf"\b{re.escape(name)}\b")
    return sorted(p.relative_to(root).as_posix() for pkg in PACKAGES for p in (root / pkg).rglob("*.py")
                  if word.search(p.read_text(encoding="utf-8")))


@pytest.mark.parametrize("name", list(KINDS))
def test_a_kinds_name_is_written_in_at_most_three_package_modules(name):
    found = _modules_naming(name)
    assert f"gpujobs/backends/kubernetes/kinds/{name.lower()}.py" in found
    assert len(found) <= MAX_MODULES, found


def test_the_name_count_sees_comments_and_docstrings(tmp_path):
    """The scan is of the whole text: a kind named only in a comment or a docstring counts."""
    for pkg in PACKAGES:
        (tmp_path / pkg / "sub").mkdir(parents=True)
    (tmp_path / "gpujobs" / "a.py").write_text("# a TrainJob\n")
    (tmp_path / "gpujobs_magic" / "sub" / "b.py").write_text('"""Runs as a TrainJob."""\n')
    (tmp_path / "gpujobs" / "c.py").write_text('"""TrainJobs, trainjob: other words."""\n')
    assert _modules_naming("TrainJob", tmp_path) == ["gpujobs/a.py", "gpujobs_magic/sub/b.py"]


def test_the_core_spec_names_no_kind():
    text = (ROOT / "gpujobs" / "spec.py").read_text()
    assert not [k for k in KINDS if re.search(rf"\b{k}\b", text)]


def test_the_kind_checks_belong_to_the_kubernetes_backend():
    """The core spec takes any kind; the builder (before any backend is called) and the Kubernetes
    backend's render-time check refuse it with the same field, text and fix."""
    from gpujobs.backends.kubernetes.render.job import check_spec
    spec = JobSpec(fn=train, kind="Deployment", framework="ray")
    errors = []
    for refuse in (lambda: check_spec(spec), lambda: gpujobs.job(train).options(kind="Deployment").spec()):
        with pytest.raises(SpecError) as exc:
            refuse()
        errors.append((exc.value.field, str(exc.value)))
    assert errors[0] == errors[1] == ("kind", f"kind: unknown kind 'Deployment' (fix: use one of {', '.join(KINDS)})")
    with pytest.raises(SpecError, match="a ray job renders as RayJob, not PyTorchJob") as exc:
        gpujobs.job(train).ray().options(kind="PyTorchJob").spec()
    assert exc.value.field == "kind"


# ------------------------------------------------------------------ the whole protocol
@pytest.mark.parametrize("kind", list(KINDS.values()), ids=list(KINDS))
def test_every_registered_kind_implements_the_protocol(kind):
    assert isinstance(kind, Kind)
    for attr in ("name", "group", "version", "plural", "api_kind", "name_rule", "mode_fix"):
        assert isinstance(getattr(kind, attr), str), attr
    assert kind.name and kind.group and kind.version and kind.plural and kind.api_kind
    assert kind.api_version == f"{kind.group}/{kind.version}" and kind.crd_name == f"{kind.plural}.{kind.group}"
    assert set(kind.verbs) >= {"create", "get", "list", "watch", "delete"}
    assert kind.frameworks and set(kind.frameworks) <= set(FRAMEWORKS)
    assert set(kind.default_for) <= set(kind.frameworks)
    assert kind.kueue_integration is None or re.fullmatch(r"[a-z0-9.]+/[a-z0-9]+", kind.kueue_integration)
    assert kind.phases and set(kind.phases) <= PHASES
    assert len(kind.rank_env) == 3 and all(isinstance(x, list) for x in kind.rank_env)
    assert kind.wraps is None or kind.wraps in KINDS.values()
    if kind.volcano_mode:
        text, fix = kind.mode_mismatch
        assert "{kind}" in text and fix
    for method in ("check", "render", "gang_pods", "pod_sets", "gang_size", "state", "progress", "gang_hint",
                   "workers_hint"):
        assert callable(getattr(kind, method)), method


def test_the_registry_tables_come_from_the_kinds():
    assert set(DEFAULT_KIND) == set(FRAMEWORKS)  # each framework has exactly one default kind
    assert KUEUE_KINDS == {k.name for k in KINDS.values() if k.kueue_integration}
    assert len({k.volcano_mode for k in KINDS.values() if k.volcano_mode}) == \
        len([k for k in KINDS.values() if k.volcano_mode])
    granted = {(g, r) for g, resources, _ in RULES for r in resources}
    assert {(k.group, k.plural) for k in KINDS.values()} <= granted


def _spec(kind, fw: str) -> JobSpec:
    b = gpujobs.job(train).options(framework=fw, nodes=2, volcano=kind.volcano_mode or "none", name="j")
    if fw == "mpi":
        b = b.options(image="example.com/mpi:1")  # not known to lack the MPI tools
    return b.queue("q").spec()


def _renderable() -> list[tuple[str, str]]:
    """(kind, framework) pairs the kind renders (its check may refuse a framework it lists, e.g. MPI
    inside a wrapper whose controller would count the finished workers as failures)."""
    out = []
    for k in KINDS.values():
        for fw in k.frameworks:
            try:
                k.check(_spec(k, fw))
            except SpecError:
                continue
            out.append((k.name, fw))
    return out


@pytest.mark.parametrize("name,fw", _renderable())
def test_each_kind_renders_an_object_the_registry_knows_as_its_own(name, fw):
    kind = KINDS[name]
    spec = _spec(kind, fw)
    assert resolve_kind(spec, name) == name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = render_job(spec, name, opts=RenderOptions(namespace="ns"), submission_id="s1", key=b"k" * 32)
    job = r.job
    assert (job["apiVersion"], job["kind"]) == (kind.api_version, kind.api_kind)
    assert for_object(job) is kind
    assert pod_sets(job) == kind.pod_sets(job) and sum(ps.count for ps in pod_sets(job)) >= kind.gang_pods(spec)
    assert mapping.gang_size_of(job) == kind.gang_pods(spec)  # the annotation
    if kind.gang_size(job):  # what the object declares (0: the kind declares none)
        assert kind.gang_size(job) == kind.gang_pods(spec)
    assert isinstance(kind_state(job), KindState) and kind_state(job) == kind.state(job)
    assert bool(job["metadata"]["labels"].get("kueue.x-k8s.io/queue-name")) == bool(kind.kueue_integration)


def test_an_object_of_no_registered_kind_has_no_state_and_no_pod_sets():
    job = {"apiVersion": "apps/v1", "kind": "Deployment", "spec": {}}
    assert for_object(job) is None and kind_state(job) == KindState(None)
    with pytest.raises(ValueError, match="not a job kind"):
        pod_sets(job)
    # the same .kind in another API group is not ours either, and the group tells two of ours apart
    assert for_object({"apiVersion": "example.com/v1", "kind": KINDS["VolcanoJob"].api_kind}) is None
    assert KINDS["VolcanoJob"].api_kind == KINDS["BatchJob"].api_kind
    assert for_object({"apiVersion": "batch/v1", "kind": "Job"}) is KINDS["BatchJob"]
    assert for_object({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job"}) is KINDS["VolcanoJob"]


# ------------------------------------------------------------------ every declared phase is reachable
T = "2026-01-01T00:00:00Z"


def _cond(*types: str) -> dict:
    return {"conditions": [{"type": t, "status": "True", "lastTransitionTime": T} for t in types]}


_OPERATOR = {  # the Kubeflow operators' conditions (v1 training operator and MPI operator alike)
    "succeeded": ({}, _cond("Created", "Running", "Succeeded")),
    "failed": ({}, _cond("Created", "Failed")),
    "suspended": ({"runPolicy": {"suspend": True}}, {}),
    "running": ({}, _cond("Created", "Running")),
    "starting": ({}, _cond("Created")),
    None: ({}, {}),
}
STATES: dict[str, dict] = {  # kind -> {phase: (spec, status)}; a new kind adds its own row
    "TrainJob": {"succeeded": ({}, _cond("Complete")), "failed": ({}, _cond("Failed")),
                 "suspended": ({"suspend": True}, {}), "starting": ({}, _cond("Created")), None: ({}, {})},
    "PyTorchJob": _OPERATOR,
    "MPIJob": _OPERATOR,
    "RayJob": {"succeeded": ({}, {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}),
               "failed": ({}, {"jobDeploymentStatus": "ValidationFailed", "message": "bad"}),
               "suspended": ({"suspend": True}, {}),
               "running": ({}, {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}),
               "starting": ({}, {"jobDeploymentStatus": "Initializing"}), None: ({}, {})},
    "VolcanoJob": {"succeeded": ({}, {"state": {"phase": "Completed"}}),
                   "failed": ({}, {"state": {"phase": "Failed"}}),
                   "running": ({}, {"state": {"phase": "Running"}, "running": 2}),
                   "starting": ({}, {"state": {"phase": "Restarting"}}),
                   None: ({}, {"state": {"phase": "Pending"}})},
    "BatchJob": {"succeeded": ({}, {"succeeded": 2, **_cond("SuccessCriteriaMet", "Complete")}),
                 "failed": ({}, {"failed": 1, **_cond("FailureTarget", "Failed")}),
                 "suspended": ({"suspend": True}, _cond("Suspended")),
                 "running": ({}, {"active": 2, "ready": 2}),
                 "starting": ({}, {"active": 2, "ready": 1}), None: ({}, {})},
    "AppWrapper": {"succeeded": ({}, {"phase": "Succeeded"}), "failed": ({}, {"phase": "Failed"}),
                   "suspended": ({"suspend": True}, {"phase": "Suspended"}),
                   "starting": ({"suspend": False}, {"phase": "Resuming"}),
                   "running": ({"suspend": False}, {"phase": "Running"}),
                   None: ({"suspend": False}, {"phase": "Unknown"})},
}


def test_every_registered_kind_has_its_phase_table():
    assert set(STATES) == set(KINDS)


@pytest.mark.parametrize("name", list(KINDS))
def test_each_declared_phase_is_reached_and_no_other(name):
    kind = KINDS[name]
    table = STATES[name]
    assert set(table) == set(kind.phases), "a phase the kind declares has no example here, or the reverse"
    for phase, (spec, status) in table.items():
        job = {"apiVersion": kind.api_version, "kind": kind.api_kind,
               "metadata": {"name": "j", "annotations": {ANN_GANG: "2"}},
               "spec": dict(spec), "status": dict(status)}
        assert kind_state(job).phase == phase, (name, phase, kind_state(job))


# ------------------------------------------------------------------ the CLI
def test_the_cli_help_lists_every_kind_from_the_registry(capsys):
    from gpujobs.cli import main
    with pytest.raises(SystemExit):
        main(["submit", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"--kind KIND Kubernetes kind ({', '.join(KINDS)})" in text


def test_building_the_cli_parser_does_not_load_the_renderers():
    import subprocess
    import sys
    code = ("import sys, gpujobs.cli as c; c.build_parser(); "
            "print(sorted(m for m in sys.modules if m.startswith('gpujobs.backends.kubernetes.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.strip() == "[]"
