"""The user's own modules a call needs (not installed: a script's siblings, a notebook's local
files, an editable package), found by walking what the call reaches and what their sources
import; they travel with the call as source (:mod:`.shipping` installs them in the rank)."""
from __future__ import annotations

import functools
from typing import Any

import cloudpickle

from ..errors import Fix, PayloadError


def _user_modules(fn: Any) -> list[Any]:
    """The module ``fn`` comes from, when it is the user's own code (not installed, not
    stdlib): it is pickled by value, so a rank need not import a script or a test file."""
    import sys
    name = getattr(fn, "__module__", None) or getattr(type(fn), "__module__", None)
    mod = sys.modules.get(name or "")
    if mod is None or name == "__main__" or not getattr(mod, "__file__", None):
        return []
    return [mod] if _is_local_path(mod.__file__) and name is not None and _is_user_module_name(name) else []


# ------------------------------------------------------------ modules that travel by value
#: top-level packages never shipped: the runtime itself (every rank has it)
_RUNTIME_PACKAGES = frozenset({"gpujobs", "gpujobs_magic", "gpujobs_sim", "__main__", "__mp_main__"})
_import_cache: dict[tuple[str, int, int], tuple[tuple[str, int, tuple[str, ...]], ...]] = {}


@functools.lru_cache(maxsize=1)
def _installed_roots() -> tuple[str, ...]:
    import site
    import sysconfig
    roots = {sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    try:
        roots.update(site.getsitepackages())
        roots.add(site.getusersitepackages())
    except Exception:  # noqa: BLE001 - virtualenv's old site module lacks them
        pass
    import os
    return tuple(os.path.realpath(r) + os.sep for r in roots if r)


@functools.lru_cache(maxsize=4096)
def _is_local_path(path: str | None) -> bool:
    """A file that is not part of an installed package (stdlib, site-packages)."""
    import os
    if not path:
        return False
    real = os.path.realpath(path)
    return not (real.startswith(_installed_roots()) or f"{os.sep}site-packages{os.sep}" in real
                or f"{os.sep}dist-packages{os.sep}" in real)


def _is_user_module_name(name: str) -> bool:
    return name.split(".")[0] not in _RUNTIME_PACKAGES


def _imports_of(path: str, package: str | None) -> tuple[str, ...]:
    """Absolute module names a source file imports anywhere (top level or in functions)."""
    import ast
    import os
    try:
        st = os.stat(path)
    except OSError:
        return ()
    key = (path, st.st_mtime_ns, st.st_size)
    found = _import_cache.get(key)
    if found is None:
        names: list[tuple[str, int, tuple[str, ...]]] = []
        try:
            with open(path, "rb") as fh:
                tree = ast.parse(fh.read(), path)
        except (OSError, SyntaxError, ValueError):
            tree = None
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.Import):
                names += [(a.name, 0, ()) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names.append((node.module or "", node.level, tuple(a.name for a in node.names)))
        found = tuple(names)
        _import_cache[key] = found
    out: list[str] = []
    for mod, level, members in found:
        if level:
            if not package:
                continue
            parts = package.split(".")
            if level > 1:
                parts = parts[:-(level - 1)]
            if not parts:
                continue
            mod = ".".join(parts + ([mod] if mod else []))
        if not mod:
            continue
        bits = mod.split(".")
        out += [".".join(bits[:i]) for i in range(1, len(bits) + 1)]
        out += [f"{mod}.{m}" for m in members if m != "*"]
    return tuple(out)


class _ModuleWalk:
    """Finds the user's own modules a call needs: the modules of the functions, classes and
    module objects it reaches (globals, closures, arguments), names imported inside function
    bodies, and, transitively, what those modules' sources import."""

    def __init__(self, by_value: set[str] | frozenset[str] = frozenset()) -> None:
        import sys
        self.sys_modules = sys.modules
        self.by_value = set(by_value)
        self.found: dict[str, tuple[str | None, bool, str | None, list[str] | None]] = {}
        self.cannot: dict[str, str] = {}
        self._seen: set[int] = set()
        self._pending: list[str] = []
        self._walked: set[str] = set()

    # -------------------------------------------------------------- objects
    def visit(self, obj: Any, depth: int = 0) -> None:
        import functools
        import types
        if depth > 6 or id(obj) in self._seen:
            return
        self._seen.add(id(obj))
        if isinstance(obj, types.ModuleType):
            self.module(obj.__name__)
            return
        if isinstance(obj, types.MethodType):
            self.visit(obj.__func__, depth + 1)
            self.visit(obj.__self__, depth + 1)
            return
        if isinstance(obj, functools.partial):
            for part in (obj.func, *obj.args, *obj.keywords.values()):
                self.visit(part, depth + 1)
            return
        if isinstance(obj, types.FunctionType):
            self.function(obj, depth)
            return
        if isinstance(obj, type):
            self.module(getattr(obj, "__module__", None))
            if self._by_value(getattr(obj, "__module__", None)):
                for v in list(vars(obj).values()):
                    if isinstance(v, (types.FunctionType, staticmethod, classmethod, property)):
                        self.visit(getattr(v, "__func__", getattr(v, "fget", v)), depth + 1)
            return
        if isinstance(obj, (str, bytes, bytearray, int, float, complex, bool, type(None))):
            return
        self.module(getattr(type(obj), "__module__", None))
        if self._by_value(getattr(type(obj), "__module__", None)):
            self.visit(type(obj), depth + 1)
        if isinstance(obj, (list, tuple, set, frozenset)):
            for item in list(obj)[:200]:
                self.visit(item, depth + 1)
        elif isinstance(obj, dict):
            for k, v in list(obj.items())[:200]:
                self.visit(k, depth + 1)
                self.visit(v, depth + 1)

    def _by_value(self, modname: str | None) -> bool:
        """Objects of this module are pickled by value (so what they reference matters)."""
        if not modname:
            return False
        if modname in ("__main__", "__mp_main__"):
            return True
        already: set[str] = getattr(cloudpickle.cloudpickle, "_PICKLE_BY_VALUE_MODULES", set())
        return modname in already or modname in self.by_value

    def function(self, fn: Any, depth: int) -> None:
        modname = getattr(fn, "__module__", None)
        if not self._by_value(modname):
            self.module(modname)  # pickled by reference: its module must be importable
            return
        glb = getattr(fn, "__globals__", {}) or {}
        for name in _code_names(fn.__code__):
            if name in glb:
                self.visit(glb[name], depth + 1)
        for name in _code_imports(fn.__code__):
            self._pending.append(name)   # `import mylib` inside the function body
        for cell in fn.__closure__ or ():
            try:
                self.visit(cell.cell_contents, depth + 1)
            except ValueError:  # an empty cell
                pass
        for default in (fn.__defaults__ or ()) + tuple((fn.__kwdefaults__ or {}).values()):
            self.visit(default, depth + 1)
        mod = self.sys_modules.get(modname or "")
        path = getattr(mod, "__file__", None) if mod is not None else None
        if path and path not in self._walked:  # the script / file the function comes from
            self._walked.add(path)
            self.imports_of(path, getattr(mod, "__package__", None))

    # -------------------------------------------------------------- modules
    def imports_of(self, path: str, package: str | None) -> None:
        self._pending.extend(_imports_of(path, package))

    def module(self, name: str | None) -> None:
        if not name or name in self.found or name in self.cannot or name in self.by_value \
                or not _is_user_module_name(name):
            return
        mod = self.sys_modules.get(name)
        if mod is not None:
            path = getattr(mod, "__file__", None)
            search = list(getattr(mod, "__path__", None) or []) or None
        else:
            spec = self._find_unloaded(name)
            if spec is None:
                return
            path = spec.origin if spec.has_location else None
            search = list(spec.submodule_search_locations or []) or None
        if path is None:
            if search and all(_is_local_path(p) for p in search):   # a local namespace package
                self._add_parents(name)
                self.found[name] = (None, True, None, search)
            return
        if not _is_local_path(path):
            return
        self._add_parents(name)
        if not path.endswith(".py"):
            self.cannot[name] = path
            return
        try:
            with open(path, encoding="utf-8") as fh:
                source = fh.read()
        except (OSError, UnicodeDecodeError):
            self.cannot[name] = path
            return
        self.found[name] = (source, search is not None, path, search)
        self.imports_of(path, name if search is not None else name.rpartition(".")[0] or None)

    def _find_unloaded(self, name: str) -> Any:
        """The spec of a module not imported yet, found without importing anything."""
        import importlib.machinery
        parent, _, last = name.rpartition(".")
        if parent:
            pmod = self.sys_modules.get(parent)
            paths = getattr(pmod, "__path__", None) if pmod is not None else None
            if paths is None and parent in self.found and self.found[parent][3]:
                paths = self.found[parent][3]
            if not paths:
                return None
            return importlib.machinery.PathFinder.find_spec(last, list(paths))
        import sys
        if name in sys.builtin_module_names:
            return None
        try:
            return importlib.machinery.PathFinder.find_spec(name)
        except (ImportError, ValueError):
            return None

    def _add_parents(self, name: str) -> None:
        parts = name.split(".")
        for i in range(1, len(parts)):
            self.module(".".join(parts[:i]))

    def run(self, roots: list[Any]) -> None:
        for obj in roots:
            self.visit(obj)
            while self._pending:
                self.module(self._pending.pop())


def _code_imports(code: Any) -> set[str]:
    """Absolute module names imported inside a code object (``import x`` in a function)."""
    import dis
    names: set[str] = set()
    level = 0
    for ins in dis.get_instructions(code):
        if ins.opname == "LOAD_CONST" and isinstance(ins.argval, int):
            level = ins.argval
        elif ins.opname == "IMPORT_NAME":
            if level == 0 and ins.argval:
                bits = ins.argval.split(".")
                names.update(".".join(bits[:i]) for i in range(1, len(bits) + 1))
            level = 0
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _code_imports(const)
    return names


def _code_names(code: Any) -> set[str]:
    """Global and imported names a code object (and the code nested in it) uses."""
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _code_names(const)
    return names


def needed_modules(fn: Any, args: tuple = (), kwargs: dict | None = None,
                   shares_pythonpath: bool = False) -> dict[str, tuple]:
    """``{module name: (source, is_package, original path, package search path)}`` of the user's own modules
    (not installed: a script's siblings, a notebook's .py files, an editable package) that
    running ``fn(*args, **kwargs)`` needs. They travel with the call by value.

    Raise PayloadError naming a module that cannot travel (a compiled extension or a file
    without readable source outside the installed packages)."""
    walk = _ModuleWalk(by_value={m.__name__ for m in _user_modules(fn)})
    walk.run([fn, *args, *(kwargs or {}).values()])
    cannot = dict(walk.cannot)
    if cannot and shares_pythonpath:  # the ranks import from this PYTHONPATH (the local backend)
        cannot = {n: p for n, p in cannot.items() if not _on_pythonpath(p)}
    if cannot:
        name, path = sorted(cannot.items())[0]
        import os
        folder = os.path.dirname(path)
        raise PayloadError(
            f"module {name}",
            f"is needed by the job but cannot travel to the ranks: {path} is "
            f"{'a compiled extension' if not path.endswith('.py') else 'not readable source'}, "
            "outside the installed packages (only .py sources are shipped by value)",
            Fix.set("image", "your-image", f"install it where the ranks run: on the local backend `pip install` "
                    f"its project or `export PYTHONPATH={folder}` before submitting; on Kubernetes build it "
                    "into the job's image and pass {}"))
    return dict(sorted(walk.found.items()))


def _on_pythonpath(path: str) -> bool:
    import os
    real = os.path.realpath(path)
    entries = [os.path.realpath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return any(real.startswith(e + os.sep) for e in entries)
