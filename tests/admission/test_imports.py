"""The admission package's modules meet through public names only, import at module level (a
function-level import hides an import cycle), and compose objects rather than mix classes
together: checked on the source with ``ast``."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "gpujobs" / "admission"

# Left to the forecasting step of issue 32 (gpujobs/admission/forecast is edited there); an
# entry here that is fixed can simply go.
KNOWN = {
    "gpujobs.admission.forecast.simulate: imports private _amount from gpujobs.admission.forecast.reasons",
    "gpujobs.admission.forecast.simulate: imports private _basis_text from gpujobs.admission.forecast.reasons",
    "gpujobs.admission.forecast.simulate: imports private _reasons from gpujobs.admission.forecast.reasons",
    "gpujobs.admission.forecast.reasons: function-level import of gpujobs.status in _ordinal",
}


def _module(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _target(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module a ``from ... import`` reads from."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def violations(package: Path = PACKAGE, root: Path = ROOT) -> set[str]:
    """One line per private name imported from another module of the package, and per import
    inside a function."""
    out = set()
    for path in sorted(package.rglob("*.py")):
        module = _module(path, root)
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Import):
                        names = ", ".join(a.name for a in sub.names)
                        out.add(f"{module}: function-level import of {names} in {node.name}")
                    elif isinstance(sub, ast.ImportFrom):
                        src = _target(module, path.name == "__init__.py", sub)
                        out.add(f"{module}: function-level import of {src} in {node.name}")
            elif isinstance(node, ast.ImportFrom):
                src = _target(module, path.name == "__init__.py", node)
                if not (src == "gpujobs.admission" or src.startswith("gpujobs.admission.")) or src == module:
                    continue
                for alias in node.names:
                    if _private(alias.name) or any(_private(p) for p in src.split(".")):
                        out.add(f"{module}: imports private {alias.name} from {src}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("gpujobs.admission") and any(_private(p) for p in alias.name.split(".")):
                        out.add(f"{module}: imports private {alias.name}")
    return out


def mixins(package: Path = PACKAGE) -> set[str]:
    """One line per class of the package that extends another class of the package, and per
    ``cast(..., self)`` (a mixin's way of reaching the object it is mixed into)."""
    trees = {path: ast.parse(path.read_text(), str(path)) for path in sorted(package.rglob("*.py"))}
    ours = {n.name for tree in trees.values() for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    out = set()
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for base in node.bases:
                    name = base.id if isinstance(base, ast.Name) else getattr(base, "attr", None)
                    if name in ours:
                        out.add(f"{path.name}: class {node.name} extends {name}")
            elif isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "cast" \
                    and any(isinstance(a, ast.Name) and a.id == "self" for a in node.args):
                out.add(f"{path.name}: cast of self at line {node.lineno}")
    return out


def test_the_engine_is_composed_not_mixed():
    assert sorted(mixins()) == []


def test_no_private_names_or_function_level_imports_in_admission():
    found = violations()
    assert sorted(found - KNOWN) == []


def test_the_checks_see_what_they_look_for(tmp_path):
    """The checks themselves find a private import across modules, an import in a function, a
    class extending another of the package and a cast of self."""
    pkg = tmp_path / "gpujobs" / "admission"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("_x = 1\ny = 2\n")
    (pkg / "b.py").write_text("from .a import _x, y\n\n\ndef f():\n    from . import a\n    return a\n")
    found = violations(pkg, tmp_path)
    assert found == {"gpujobs.admission.b: imports private _x from gpujobs.admission.a",
                     "gpujobs.admission.b: function-level import of gpujobs.admission in f"}
    (pkg / "c.py").write_text("from typing import cast\n\n\nclass A:\n    pass\n\n\n"
                              "class B(A, list):\n    def f(self):\n        return cast('B', self)\n")
    assert mixins(pkg) == {"c.py: class B extends A", "c.py: cast of self at line 10"}

