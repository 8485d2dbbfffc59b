"""The admission package's modules meet through public names only, and import at module level
(a function-level import hides an import cycle): checked on the source with ``ast``."""
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


def test_no_private_names_or_function_level_imports_in_admission():
    found = violations()
    assert sorted(found - KNOWN) == []


def test_the_check_sees_both_kinds(tmp_path):
    """The check itself finds a private import across modules and an import in a function."""
    pkg = tmp_path / "gpujobs" / "admission"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("_x = 1\ny = 2\n")
    (pkg / "b.py").write_text("from .a import _x, y\n\n\ndef f():\n    from . import a\n    return a\n")
    found = violations(pkg, tmp_path)
    assert found == {"gpujobs.admission.b: imports private _x from gpujobs.admission.a",
                     "gpujobs.admission.b: function-level import of gpujobs.admission in f"}

