"""Turn a notebook cell into a real Python function that runs on every rank.

The cell keeps module semantics: the names it assigns are declared ``global`` in
the generated function, whose globals start as the *captured* values (only the
free names the cell reads that exist in the notebook namespace). The function is
defined in ``__main__``, so cloudpickle ships it, and those values, by value.
"""
from __future__ import annotations

import ast
import builtins
import re
import sys
import symtable
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from IPython.core.error import UsageError

#: IPython's own namespace entries, never shipped to a rank
IPYTHON_NAMES = frozenset({"get_ipython", "In", "Out", "exit", "quit", "_ih", "_oh", "_dh",
                           "_i", "_ii", "_iii", "_", "__", "___"})
_HISTORY_NAME = re.compile(r"^_i*\d+$")
_LEFTOVER = re.compile(r"\bget_ipython\s*\(")


@dataclass
class CellFunction:
    """The compiled cell: ``fn`` plus what analysis found."""
    fn: Callable[[], Any]
    source: str
    captured: dict[str, Any] = field(default_factory=dict)
    reads: frozenset[str] = frozenset()
    assigned: frozenset[str] = frozenset()
    returns: tuple[str, ...] = ()


def transform(cell: str, shell: Any | None) -> str:
    """IPython syntax → Python; refuse what cannot run without IPython (``!cmd``, ``%magic``)."""
    src = shell.transform_cell(cell) if shell is not None else cell
    bad = [i for i, line in enumerate(src.splitlines(), 1) if _LEFTOVER.search(line)]
    if bad:
        lines = cell.splitlines()
        first = lines[bad[0] - 1].strip() if bad[0] <= len(lines) else src.splitlines()[bad[0] - 1]
        raise UsageError(
            f"%%gpujob: line {bad[0]} ({first!r}) uses IPython syntax (!cmd, %magic or "
            f"get_ipython()), which cannot run in the job's ranks; use subprocess/plain Python "
            f"there, or run it in another cell")
    return src


def register_source(src: str, name: str) -> str:
    """Put the cell's lines into linecache under the file name its code is compiled with (so
    tracebacks here and, shipped with the call, in the ranks show them); returns that name."""
    import linecache
    filename = f"<{name}>"
    lines = [ln + "\n" for ln in src.splitlines()]
    linecache.cache[filename] = (len(src), None, lines, filename)
    return filename


def _parse(src: str, filename: str) -> ast.Module:
    try:
        tree = ast.parse(src, filename)
        compile(tree, filename, "exec")  # 'return'/'await' outside function, bad globals …
    except SyntaxError as exc:
        raise UsageError(f"%%gpujob: the cell does not parse: line {exc.lineno}: {exc.msg}") from None
    return tree


def analyse(src: str, filename: str = "<gpujob-cell>") -> tuple[frozenset[str], frozenset[str]]:
    """(names the cell reads from module scope, names it assigns at module scope)."""
    top = symtable.symtable(src, filename, "exec")
    reads: set[str] = set()
    assigned: set[str] = set()
    for sym in top.get_symbols():
        if sym.is_referenced():
            reads.add(sym.get_name())
        if sym.is_assigned() or sym.is_imported():
            assigned.add(sym.get_name())

    def walk(table: symtable.SymbolTable) -> None:
        for child in table.get_children():
            for sym in child.get_symbols():
                if sym.is_global():
                    if sym.is_referenced():
                        reads.add(sym.get_name())
                    if sym.is_declared_global() and sym.is_assigned():
                        assigned.add(sym.get_name())
            walk(child)

    walk(top)
    return frozenset(reads), frozenset(assigned)


def _shippable(name: str) -> bool:
    return name not in IPYTHON_NAMES and not _HISTORY_NAME.match(name) and not name.startswith("__")


def compile_cell(cell: str, namespace: Mapping[str, Any], *, shell: Any | None = None,
                 returns: tuple[str, ...] = (), name: str = "gpujob_cell") -> CellFunction:
    """Build the rank function for ``cell``; raise UsageError (one line) on bad input.

    With ``returns`` the function returns ``{name: value}`` for those names; otherwise
    the value of a final expression (like IPython), else None.
    """
    src = transform(cell, shell)
    filename = register_source(src, name)
    tree = _parse(src, filename)
    reads, assigned = analyse(src, filename)
    for r in returns:
        if not r.isidentifier():
            raise UsageError(f"%%gpujob --return: {r!r} is not a Python name (use --return a,b)")
        if r not in assigned:
            known = ", ".join(sorted(assigned)) or "none"
            raise UsageError(f"%%gpujob --return: the cell never assigns {r!r} "
                             f"(it assigns: {known})")
    captured = {n: namespace[n] for n in sorted(reads) if n in namespace and _shippable(n)}

    body: list[ast.stmt] = list(tree.body) or [ast.Pass()]
    if returns:
        body.append(ast.Return(ast.Dict(keys=[ast.Constant(r) for r in returns],
                                        values=[ast.Name(r, ast.Load()) for r in returns])))
    elif isinstance(body[-1], ast.Expr):
        body[-1] = ast.copy_location(ast.Return(body[-1].value), body[-1])
    module_level = sorted(a for a in assigned if a.isidentifier())
    if module_level:
        body.insert(0, ast.Global(names=module_level))
    fdef = ast.FunctionDef(name=name, args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[],
                                                          kw_defaults=[], defaults=[]),
                           body=body, decorator_list=[], returns=None)
    if sys.version_info >= (3, 12):
        fdef.type_params = []  # a field since 3.12 (PEP 695)
    module = ast.fix_missing_locations(ast.Module(body=[fdef], type_ignores=[]))
    try:
        code = compile(module, filename, "exec")
    except SyntaxError as exc:  # e.g. a name used before its own global statement
        raise UsageError(f"%%gpujob: the cell cannot run as a job: line {exc.lineno}: {exc.msg}") from None
    glb: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins, **captured}
    exec(code, glb)  # defines the function only; nothing from the cell runs here
    fn = glb[name]
    fn.__qualname__ = name
    return CellFunction(fn=fn, source=src, captured=captured, reads=reads, assigned=assigned,
                        returns=tuple(returns))


def cell_job_name(cell: str, count: int, returns: tuple[str, ...] = ()) -> str:
    """A job name that says what the cell does: its first comment line, else the names it
    returns (``--return``), else the first function it calls, else the last name it assigns
    (at least 2 characters); ``cell-N`` when nothing fits. Always a valid job name."""
    from gpujobs.spec import slug

    def ok(text: str) -> str:
        s = slug(text.replace("_", "-"), 30)
        return s if len(s) >= 2 and s[0].isalpha() else ""

    lines = [ln.strip() for ln in cell.splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith("%"):
            continue
        if ln.startswith("#") and ok(ln.lstrip("#")):
            return ok(ln.lstrip("#"))
        break
    if returns and ok("-".join(returns)):
        return ok("-".join(returns))
    try:
        tree = ast.parse("\n".join(ln for ln in cell.splitlines() if not ln.lstrip().startswith(("%", "!"))))
    except SyntaxError:
        return f"cell-{count}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                not hasattr(builtins, node.func.id) and ok(node.func.id):
            return ok(node.func.id)
    assigned = [ok("-".join(names)) for node in ast.walk(tree)
                if isinstance(node, ast.Assign) and not _is_context_call(node.value)
                for names in [_target_names(node.targets)] if names and ok("-".join(names))]
    return assigned[-1] if assigned else f"cell-{count}"


def _target_names(targets: list[ast.expr]) -> list[str]:
    """``a = …`` -> [a]; ``total, world = …`` -> [total, world]; attributes, subscripts: []."""
    out: list[str] = []
    for t in targets:
        elts = t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]
        out += [e.id for e in elts if isinstance(e, ast.Name)]
    return out


def _is_context_call(value: ast.expr) -> bool:
    """``gpujobs.context()`` / ``context()``: every cell's ``ctx``, never what it is about."""
    if not isinstance(value, ast.Call):
        return False
    f = value.func
    return (isinstance(f, ast.Attribute) and f.attr == "context") or \
        (isinstance(f, ast.Name) and f.id == "context")
