"""The gpujobs code a pod gets (``lib.zip``), computed from the package, never listed by hand.

A pod runs the bootstrap (``bootstrap_script.py``) and ``python -m gpujobs.runner``; the job's
function may use ``gpujobs.context()``, ``gpujobs.fsdp``, ``gpujobs.checkpoint`` and
``gpujobs.errors``. What ships is the import closure of those entry points over gpujobs' own
sources (``ast``, nothing is imported): every module a shipped module imports, at the top or inside a function, except the
few in :data:`SUBMITTER_ONLY`, which shipped modules import only on paths a pod never takes.

Packages a pod reaches only as parents (``gpujobs``, ``gpujobs.metrics``: their ``__init__``
imports the client side, builder, backends, pandas views) ship *pruned*: their own source
without the imports of modules that are not shipped, plus a ``__getattr__`` that loads shipped
submodules on use and names what is not available inside a pod.
"""
from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

PACKAGE = "gpujobs"
_ROOT = Path(__file__).resolve().parents[4]  # the folder holding gpujobs/

POD_ENTRY_MODULES = ("gpujobs.runner", "gpujobs.runner.__main__", "gpujobs.context",
                     "gpujobs.fsdp", "gpujobs.checkpoint", "gpujobs.errors")
"""What a pod runs (the runner) and what a job's function may use there; the bootstrap's own
imports are added from its source (:func:`bootstrap_imports`)."""

SUBMITTER_ONLY = {
    "gpujobs.backends": "gpujobs.payload.modules asks for the default backend's name when a "
                        "call is packed, on the submitting side",
    "gpujobs.metrics.frame": "pandas views of metrics (MetricsHistory.frame), read by clients",
}
"""Modules shipped code imports inside functions that never run in a pod (why, beside each)."""


def module_path(name: str) -> tuple[Path, bool] | None:
    """(source file, is a package) of the gpujobs module ``name``, None when there is none."""
    base = _ROOT.joinpath(*name.split("."))
    if (base / "__init__.py").is_file():
        return base / "__init__.py", True
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py"), False
    return None


def _resolve(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    parts = package.split(".")
    if node.level > 1:
        parts = parts[:-(node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def imports_of(name: str) -> list[tuple[str, bool, ast.stmt]]:
    """gpujobs modules ``name`` imports: (module, at the top level, the statement). ``from P
    import m`` of a submodule m imports P.m (P only as its parent)."""
    found = module_path(name)
    if found is None:
        return []
    path, is_pkg = found
    tree = ast.parse(path.read_text(), str(path))
    package = name if is_pkg else name.rpartition(".")[0]
    top = {id(n) for n in tree.body}
    out: list[tuple[str, bool, ast.stmt]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, id(node) in top, node) for a in node.names
                    if a.name.split(".")[0] == PACKAGE]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(node, package)
            if target.split(".")[0] != PACKAGE:
                continue
            subs = [f"{target}.{a.name}" for a in node.names if module_path(f"{target}.{a.name}")]
            if len(subs) < len(node.names):  # names of the module itself
                out.append((target, id(node) in top, node))
            out += [(s, id(node) in top, node) for s in subs]
    return out


def bootstrap_imports() -> tuple[str, ...]:
    """The gpujobs modules the pod bootstrap imports (from its source)."""
    tree = ast.parse((Path(__file__).parent / "bootstrap_script.py").read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level and \
                (node.module or "").split(".")[0] == PACKAGE:
            names.add(node.module or "")
    return tuple(sorted(names))


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


@lru_cache(maxsize=1)
def closure() -> tuple[frozenset[str], frozenset[str]]:
    """(modules shipped whole, packages shipped pruned: reached only as parents)."""
    whole: set[str] = set()
    todo = list(POD_ENTRY_MODULES + bootstrap_imports())
    while todo:
        name = todo.pop()
        if name in whole:
            continue
        if module_path(name) is None:
            raise RuntimeError(f"the pod entry point {name} is not a gpujobs module")
        whole.add(name)
        for dep, at_top, node in imports_of(name):
            if dep in SUBMITTER_ONLY:
                if at_top:  # it would be imported in the pod at once: it must ship
                    raise RuntimeError(f"{name} imports {dep} at its top level (line "
                                       f"{node.lineno}): {dep} cannot stay out of pods")
                continue
            todo.append(dep)
    parents = {p for n in whole for p in _parents(n)} - whole
    return frozenset(whole), frozenset(parents)


def pruned_init(name: str, shipped: frozenset[str]) -> str:
    """A package ``__init__`` for the pod: its source without the imports of modules that are
    not shipped, and a ``__getattr__`` loading shipped submodules and naming what is absent."""
    found = module_path(name)
    assert found is not None and found[1], name
    text = found[0].read_text()
    lines = text.splitlines(keepends=True)
    absent: list[str] = []
    drop: set[int] = set()
    tree = ast.parse(text)
    deps_at: dict[int, list[str]] = {}
    for dep, _top, stmt in imports_of(name):
        deps_at.setdefault(stmt.lineno, []).append(dep)
    for node in tree.body:
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        deps = deps_at.get(node.lineno, [])
        if deps and not all(d in shipped for d in deps):
            drop.update(range(node.lineno - 1, node.end_lineno or node.lineno))
            absent += [a.asname or a.name.split(".")[0] for a in node.names]
    kept = "".join(line for i, line in enumerate(lines) if i not in drop)
    previous = "def __getattr__(" in kept
    if previous:
        kept = kept.replace("def __getattr__(", "def _package_getattr(", 1)
    fallback = ("    return _package_getattr(name)\n" if previous else
                "    raise AttributeError(f\"module {__name__!r} has no attribute {name!r}\")\n")
    return kept.rstrip() + f'''


# ---- inside a pod (generated by gpujobs' Kubernetes backend from this package's __init__):
# only the runner subset is shipped; its submodules load on first use
_NOT_IN_POD = {sorted(absent)!r}


def __getattr__(name):
    if name in _NOT_IN_POD:
        raise AttributeError(f"{{__name__}}.{{name}} is not available inside the pod (only the "
                             "runner subset is shipped); install gpujobs in the image to use it "
                             "there")
    import importlib
    import importlib.util
    if importlib.util.find_spec(f"{{__name__}}.{{name}}") is not None:
        return importlib.import_module(f"{{__name__}}.{{name}}")
{fallback}'''


@lru_cache(maxsize=1)
def gpujobs_files() -> dict[str, str]:
    """``lib/``-relative path -> source text of the gpujobs code a pod gets."""
    whole, pruned = closure()
    files: dict[str, str] = {}
    for name in sorted(whole | pruned):
        found = module_path(name)
        assert found is not None
        path, _is_pkg = found
        rel = path.relative_to(_ROOT).as_posix()
        files[rel] = pruned_init(name, whole) if name in pruned else path.read_text()
    return files
