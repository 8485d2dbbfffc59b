"""The backend seam is declared (gpujobs/backends/base.py): each backend names its capabilities
as bases, exactly those it implements, and the front ends find a capability with isinstance on
its protocol, never by probing a backend with getattr/hasattr."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import gpujobs
from gpujobs.backends import base
from gpujobs.backends.kubernetes.backend import KubernetesBackend
from gpujobs.backends.local.backend import LocalBackend

ROOT = Path(gpujobs.__file__).resolve().parent
FRONT_ENDS = [ROOT / "cli", ROOT.parent / "gpujobs_magic", ROOT / "lab", ROOT / "views", ROOT / "metrics",
              ROOT / "handle.py", ROOT / "builder.py", ROOT / "__init__.py"]


def _methods(proto: type) -> set[str]:
    return {n for n, v in vars(proto).items() if inspect.isfunction(v) and not n.startswith("_")}


@pytest.mark.parametrize("cls", [LocalBackend, KubernetesBackend])
def test_each_backend_declares_exactly_the_capabilities_it_implements(cls):
    assert base.Backend in cls.__mro__
    for proto in base.CAPABILITIES:
        implemented = all(callable(getattr(cls, m, None)) and getattr(cls, m) is not getattr(proto, m)
                          for m in _methods(proto))
        assert (proto in cls.__mro__) == implemented, (cls.__name__, proto.__name__)


def test_the_declared_table_in_base_matches_the_backends():
    doc = base.__doc__ or ""
    for cls, name in ((LocalBackend, "local"), (KubernetesBackend, "kubernetes")):
        declared = [p.__name__ for p in base.CAPABILITIES if p in cls.__mro__]
        row = next(line for line in doc.splitlines() if line.startswith(name + " "))
        assert row.split(None, 1)[1].replace(",", "").split() == declared


def test_the_local_backend_does_not_render_and_kubernetes_does():
    assert not issubclass(LocalBackend, base.Renders)
    assert issubclass(KubernetesBackend, base.Renders)
    assert isinstance(gpujobs.backends.get_backend("kubernetes"), base.Renders)


def _probes(path: Path, root: Path = ROOT.parent) -> list[str]:
    """``getattr(x, ...)`` / ``hasattr(x, ...)`` calls whose object names a backend (or a
    backend's package)."""
    found = []
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr") and node.args):
            target = ast.unparse(node.args[0])
            if "backend" in target.lower() or target.split(".")[-1] in ("be", "b", "local", "kubernetes"):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_front_ends_probe_no_backend_with_getattr_or_hasattr():
    files = [p for f in FRONT_ENDS for p in ([f] if f.is_file() else sorted(f.rglob("*.py")))]
    assert len(files) > 10
    probes = [hit for p in files for hit in _probes(p)]
    assert probes == []


def test_the_probe_finder_finds_a_probe(tmp_path):
    sample = tmp_path / "x.py"
    sample.write_text("def f(backend, job):\n    getattr(backend, 'plan', None)\n"
                      "    hasattr(job.backend, 'stacks')\n    getattr(job, 'spec', None)\n"
                      "    getattr(local, 'stop_agent', None)\n")
    assert [h.split(": ", 1)[1] for h in _probes(sample, tmp_path)] == [
        "getattr(backend, 'plan', None)", "hasattr(job.backend, 'stacks')",
        "getattr(local, 'stop_agent', None)"]
