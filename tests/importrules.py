"""Checks on a package's source (``ast``) that its modules meet through public names only,
import at module level (a function-level import hides an import cycle) and compose objects
rather than mix classes together. Used by tests/admission/test_imports.py and
tests/local/test_local_imports.py."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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


def _within(src: str, prefix: str) -> bool:
    return src == prefix or src.startswith(prefix + ".")


def violations(package: Path, root: Path = ROOT, inner_only: bool = False) -> set[str]:
    """One line per private name imported from another module of the package, and per import
    inside a function (with ``inner_only``: per import of a module of the package inside a
    function; a third-party import kept lazy for start-up time is left alone)."""
    prefix = _module(package / "__init__.py", root)
    out = set()
    for path in sorted(package.rglob("*.py")):
        module = _module(path, root)
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Import):
                        names = [a.name for a in sub.names if not inner_only or _within(a.name, prefix)]
                        if names:
                            out.add(f"{module}: function-level import of {', '.join(names)} in {node.name}")
                    elif isinstance(sub, ast.ImportFrom):
                        src = _target(module, path.name == "__init__.py", sub)
                        if not inner_only or _within(src, prefix):
                            out.add(f"{module}: function-level import of {src} in {node.name}")
            elif isinstance(node, ast.ImportFrom):
                src = _target(module, path.name == "__init__.py", node)
                if not _within(src, prefix) or src == module:
                    continue
                for alias in node.names:
                    if _private(alias.name) or any(_private(p) for p in src.split(".")):
                        out.add(f"{module}: imports private {alias.name} from {src}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if _within(alias.name, prefix) and any(_private(p) for p in alias.name.split(".")):
                        out.add(f"{module}: imports private {alias.name}")
    return out


def mixins(package: Path) -> set[str]:
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


def foreign_private_attributes(package: Path) -> set[str]:
    """One line per ``obj._name`` read on something other than ``self``/``cls`` where no
    module-local definition (a function, a class, an assignment) names ``_name``: another
    module's private member reached through an object (``agent._view(rec)``)."""
    out = set()
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        own = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                own.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own.add(node.id)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in own \
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls", "os", "sys")):
                out.add(f"{path.name}: reads {ast.unparse(node)} at line {node.lineno}")
    return out
