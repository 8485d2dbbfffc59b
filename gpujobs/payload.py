"""Packing calls and results: cloudpickle by value, HMAC-authenticated envelopes.

A packed call is ``cloudpickle.dumps((fn, args, kwargs))``. Results and remote
exceptions travel back inside an envelope ``MAGIC + hmac_sha256(key, body) + body``
and are verified *before* anything is unpickled (:func:`open_envelope`).
"""
from __future__ import annotations

import functools
import hashlib
import hmac
import pickle
import secrets
import traceback
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import cloudpickle

from .errors import PayloadError, RemoteError, ResultAuthError

MAGIC = b"GPJ1"
_DIGEST = 32


def new_key() -> bytes:
    """A fresh per-job HMAC key."""
    return secrets.token_bytes(32)


def derive_key(key: bytes, context: str) -> bytes:
    """The key of one job (``context``: its id) from a longer-lived key: a sealed call or
    result of one job does not verify as another job's."""
    return hmac.new(key, b"gpujobs-job:" + context.encode(), hashlib.sha256).digest()



def _find_culprit(obj: Any, path: str, depth: int = 0) -> tuple[str, Any] | None:
    """Depth-first search for the smallest sub-object that cloudpickle refuses."""
    if depth > 4:
        return None
    children: list[tuple[str, Any]] = []
    if isinstance(obj, (list, tuple)):
        children = [(f"{path}[{i}]", v) for i, v in enumerate(obj)]
    elif isinstance(obj, dict):
        children = [(f"{path}[{k!r}]", v) for k, v in obj.items()]
    elif callable(obj) and hasattr(obj, "__code__"):
        glob = getattr(obj, "__globals__", {})
        names = obj.__code__.co_names
        children = [(f"global {n!r} of {obj.__name__}", glob[n]) for n in names if n in glob]
        if obj.__closure__:
            children += [(f"closure variable {n!r} of {obj.__name__}", c.cell_contents)
                         for n, c in zip(obj.__code__.co_freevars, obj.__closure__)]
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        children = [(f"{path}.{k}", v) for k, v in vars(obj).items()]
    for sub_path, child in children:
        try:
            cloudpickle.dumps(child)
        except Exception:
            return _find_culprit(child, sub_path, depth + 1) or (sub_path, child)
    return None


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
                   backend: str | None = None) -> dict[str, tuple]:
    """``{module name: (source, is_package, original path, package search path)}`` of the user's own modules
    (not installed: a script's siblings, a notebook's .py files, an editable package) that
    running ``fn(*args, **kwargs)`` needs. They travel with the call by value.

    Raise PayloadError naming a module that cannot travel (a compiled extension or a file
    without readable source outside the installed packages)."""
    walk = _ModuleWalk(by_value={m.__name__ for m in _user_modules(fn)})
    walk.run([fn, *args, *(kwargs or {}).values()])
    cannot = dict(walk.cannot)
    if cannot and _backend_name(backend) == "local":
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
            f"install it where the ranks run: on the local backend `pip install` its project "
            f"or `export PYTHONPATH={folder}` before submitting; on Kubernetes build it into the "
            "job's image and pass .image('your-image')")
    return dict(sorted(walk.found.items()))


def _backend_name(backend: str | None) -> str:
    if backend:
        return backend
    try:
        from .backends import default_backend_name
        return default_backend_name()
    except Exception:  # noqa: BLE001
        return "local"


def _on_pythonpath(path: str) -> bool:
    import os
    real = os.path.realpath(path)
    entries = [os.path.realpath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return any(real.startswith(e + os.sep) for e in entries)


class _ShippedModules:
    """Unpickling this (first in the packed call) installs the shipped sources."""

    def __init__(self, blob: bytes):
        self.blob = blob

    def __reduce__(self):
        return (install_modules, (self.blob,))


class _ShippedFinder:
    """A meta-path finder/loader serving the user modules that came with the call."""

    def __init__(self) -> None:
        self.modules: dict[str, tuple[str | None, bool, str | None, list[str] | None]] = {}

    def find_spec(self, name: str, path: Any = None, target: Any = None):
        import importlib.util
        entry = self.modules.get(name)
        if entry is None:
            return None
        source, is_pkg, origin, search = entry
        # a loader by duck type (create_module / exec_module); typeshed's LoaderProtocol also
        # asks for the deprecated load_module
        spec = importlib.util.spec_from_loader(name, self, origin=origin,  # type: ignore[arg-type]
                                               is_package=is_pkg)
        if spec is not None and origin:
            spec.has_location = True
        if spec is not None and is_pkg:
            spec.submodule_search_locations = list(search or [])
        return spec

    def create_module(self, spec: Any) -> None:
        return None

    def exec_module(self, module: Any) -> None:
        source, _is_pkg, origin, _ = self.modules[module.__name__]
        if source is not None:
            exec(compile(source, origin or f"<gpujobs shipped {module.__name__}>", "exec"),
                 module.__dict__)

    def get_source(self, name: str) -> str | None:
        entry = self.modules.get(name)
        return entry[0] if entry else None

    def is_package(self, name: str) -> bool:
        return bool(self.modules.get(name, (None, False))[1])


def install_modules(blob: bytes) -> None:
    """Make the shipped modules importable in this process (a rank), ahead of the disk."""
    import json
    import sys
    import zlib
    modules = json.loads(zlib.decompress(blob).decode())
    finder = next((f for f in sys.meta_path if isinstance(f, _ShippedFinder)), None)
    if finder is None:
        finder = _ShippedFinder()
        sys.meta_path.insert(0, finder)
    for name, (source, is_pkg, origin, search) in modules.items():
        finder.modules[name] = (source, is_pkg, origin, search)


def _pack_modules(modules: dict[str, tuple]) -> bytes:
    import json
    import zlib
    return zlib.compress(json.dumps({n: list(v) for n, v in modules.items()}).encode(), 9)


SOURCES_LIMIT = 2 << 20  # bytes of source text shipped with a call, at most


def _installed_prefixes() -> tuple[str, ...]:
    import sysconfig
    paths = sysconfig.get_paths()
    return tuple({paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")})


def _code_key(code: Any) -> str:
    return f"{getattr(code, 'co_qualname', code.co_name)}:{code.co_firstlineno}"


def _functions(fn: Any, seen: set[int] | None = None, depth: int = 0) -> Iterator[Any]:
    """``fn`` and the functions it reaches: globals it names, closure cells, methods of the
    classes among them (what cloudpickle ships by value with it)."""
    import types
    seen = set() if seen is None else seen
    fn = getattr(fn, "__func__", fn)
    if depth > 3 or id(fn) in seen:
        return
    seen.add(id(fn))
    if isinstance(fn, type):
        for v in list(vars(fn).values()):
            if isinstance(v, (types.FunctionType, staticmethod, classmethod, property)):
                for f in (getattr(v, "fget", None),) if isinstance(v, property) else (v,):
                    if f is not None:
                        yield from _functions(getattr(f, "__func__", f), seen, depth + 1)
        return
    code = getattr(fn, "__code__", None)
    if not isinstance(code, types.CodeType):
        return
    yield fn
    glob = getattr(fn, "__globals__", None) or {}
    for name in code.co_names:
        v = glob.get(name)
        if isinstance(v, (types.FunctionType, type)):
            yield from _functions(v, seen, depth + 1)
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            v = cell.cell_contents
        except ValueError:
            continue
        if isinstance(v, (types.FunctionType, type)):
            yield from _functions(v, seen, depth + 1)


def _user_file(name: str, installed: tuple[str, ...]) -> bool:
    return bool(name) and not (name.startswith("<") and not name.startswith("<ipython-input")) \
        and not name.startswith(installed) and "site-packages" not in name


def collect_sources(fn: Any, modules: Sequence[Any] = ()) -> dict[str, Any]:
    """What a rank needs for tracebacks that name the user's files and show their lines:
    ``{"sources": {file: [[first line number, text], ...]}, "files": {code key: file}}``:
    the source of each user function ``fn`` reaches (notebook cells included, read through
    linecache), not whole files, so the call stays small. cloudpickle replaces the file name
    of code it ships by value with ``<dynamic-code>``; ``files`` puts it back."""
    import inspect
    installed = _installed_prefixes()
    files: dict[str, str] = {}
    blocks: dict[str, dict[int, str]] = {}
    size = 0
    try:
        for f in _functions(fn):
            name = f.__code__.co_filename
            if not _user_file(name, installed):
                continue
            files[_code_key(f.__code__)] = name
            try:
                lines, start = inspect.getsourcelines(f)
            except (OSError, TypeError):
                continue
            text = "".join(lines)
            if size + len(text) > SOURCES_LIMIT:
                continue
            blocks.setdefault(name, {})[max(1, start)] = text
            size += len(text)
    except Exception:  # noqa: BLE001 - sources are a nicety; never fail a submit on them
        pass
    sources = {name: sorted([start, text] for start, text in b.items()) for name, b in blocks.items()}
    return {"sources": sources, "files": files} if files else {}


def _with_filename(code: Any, name: str) -> Any:
    import types
    consts = tuple(_with_filename(c, name) if isinstance(c, types.CodeType) else c
                   for c in code.co_consts)
    return code.replace(co_filename=name, co_consts=consts)


def restore_filenames(fn: Any, files: dict[str, str]) -> None:
    """Give the shipped functions their file names back (see :func:`collect_sources`)."""
    for f in _functions(fn):
        name = files.get(_code_key(f.__code__))
        if name and f.__code__.co_filename != name:
            try:
                f.__code__ = _with_filename(f.__code__, name)
            except (TypeError, ValueError, AttributeError):
                pass


def register_sources(sources: dict[str, Any]) -> None:
    """Put shipped source lines into linecache (no mtime: never re-read from disk). Lines
    that were not shipped read as empty."""
    import linecache
    for name, blocks in (sources or {}).items():
        if isinstance(blocks, str):
            blocks = [[1, blocks]]
        lines: list[str] = []
        for start, text in blocks:
            chunk = text.splitlines(keepends=True)
            end = int(start) - 1 + len(chunk)
            if len(lines) < end:
                lines.extend("\n" for _ in range(end - len(lines)))
            lines[int(start) - 1:end] = [c if c.endswith("\n") else c + "\n" for c in chunk]
        linecache.cache[name] = (sum(map(len, lines)), None, lines, name)


def pack_call(fn: Any, args: tuple, kwargs: dict, limit: int, backend: str | None = None) -> bytes:
    """cloudpickle ``(fn, args, kwargs)``, with the sources of the user's own modules it
    needs; raise PayloadError naming what fails, cannot travel, or is too big."""
    already: set[str] = getattr(cloudpickle.cloudpickle, "_PICKLE_BY_VALUE_MODULES", set())
    by_value = [m for m in _user_modules(fn) if m.__name__ not in already]
    for mod in by_value:
        cloudpickle.register_pickle_by_value(mod)
    try:
        modules = needed_modules(fn, args, kwargs, backend=backend)
        return _pack(fn, args, kwargs, limit, collect_sources(fn, _user_modules(fn)), modules)
    finally:
        for mod in by_value:
            cloudpickle.unregister_pickle_by_value(mod)


def _pack(fn: Any, args: tuple, kwargs: dict, limit: int,
          sources: dict[str, Any] | None = None,
          modules: dict[str, tuple] | None = None) -> bytes:
    shipped = _pack_modules(modules) if modules else b""
    first = (_ShippedModules(shipped),) if modules else ()   # installs them before fn loads
    try:
        call = first + ((fn, args, kwargs, sources) if sources else (fn, args, kwargs))
        data = cloudpickle.dumps(call, protocol=pickle.DEFAULT_PROTOCOL)
        if sources and len(data) > limit:  # the sources are a nicety: the call alone may fit
            data = cloudpickle.dumps(first + (fn, args, kwargs), protocol=pickle.DEFAULT_PROTOCOL)
    except Exception as exc:  # cloudpickle raises TypeError, PicklingError, …
        parts = [("fn", fn)] + [(f"args[{i}]", a) for i, a in enumerate(args)] + \
            [(f"kwargs[{k!r}]", v) for k, v in kwargs.items()]
        culprit = None
        for path, part in parts:
            try:
                cloudpickle.dumps(part)
            except Exception:
                culprit = _find_culprit(part, path) or (path, part)
                break
        where, obj = culprit if culprit else ("the call", None)
        what = f"{type(obj).__name__} object" if obj is not None else "an object"
        raise PayloadError(
            where, f"cannot be sent to the ranks: {what} is not serialisable ({exc})",
            "create it inside the function (open files, locks, sockets and clients "
            "must be made where they are used), or pass what is needed to build it") from None
    if len(data) > limit:
        sizes = sorted(((len(cloudpickle.dumps(a)), f"args[{i}]") for i, a in enumerate(args)),
                       reverse=True)[:1]
        if shipped:
            sizes.append((len(shipped), f"the source of your modules {', '.join(sorted(modules or ()))}"))
            sizes = sorted(sizes, reverse=True)[:1]
        biggest = f"; the largest part is {sizes[0][1]} ({sizes[0][0]:,} bytes)" if sizes else ""
        new_limit = 1 << max(20, (len(data) * 2 - 1).bit_length())
        raise PayloadError(
            "payload", f"fn and arguments pickle to {len(data):,} bytes, over the limit of "
            f"{limit:,}{biggest}",
            "load large data inside the function (from a path, a PVC or object storage) "
            "instead of passing it, or raise the limit: "
            f"gpujobs.job(fn, ...).options(max_payload_bytes={new_limit}).submit()")
    return data


def unpack_call(data: bytes) -> tuple[Any, tuple, dict]:
    """``(fn, args, kwargs)``; the user's modules shipped with the call (first in the tuple,
    unpickled as None) are installed on the way, and source text for tracebacks goes into
    linecache."""
    call = cloudpickle.loads(data)
    if call and call[0] is None:
        call = call[1:]
    fn, args, kwargs = call[:3]
    if len(call) > 3 and isinstance(call[3], dict):
        try:
            register_sources(call[3].get("sources") or {})
            restore_filenames(fn, call[3].get("files") or {})
        except Exception:  # noqa: BLE001 - tracebacks without lines beat no run at all
            pass
    return fn, tuple(args), dict(kwargs)


def seal(obj: Any, key: bytes) -> bytes:
    """Pickle ``obj`` and prefix the HMAC of the pickle."""
    body = cloudpickle.dumps(obj)
    return MAGIC + hmac.new(key, body, hashlib.sha256).digest() + body


def open_envelope(blob: bytes, key: bytes) -> Any:
    """Verify the HMAC, then unpickle. Raise ResultAuthError if anything is off."""
    if len(blob) < len(MAGIC) + _DIGEST or not blob.startswith(MAGIC):
        raise ResultAuthError("result envelope is malformed; refusing to unpickle it")
    mac, body = blob[len(MAGIC):len(MAGIC) + _DIGEST], blob[len(MAGIC) + _DIGEST:]
    if not hmac.compare_digest(mac, hmac.new(key, body, hashlib.sha256).digest()):
        raise ResultAuthError("result failed authentication (HMAC mismatch); it was not "
                              "unpickled. It was changed after the job wrote it, or was "
                              "written by something else.")
    return pickle.loads(body)


_PEER_LOST = ("Connection closed by peer", "Connection reset by peer", "Broken pipe",
              "connectFullMesh", "remote process exited", "communicator was aborted",
              "Socket Timeout", "Timed out waiting")


def is_collateral(exc: BaseException) -> bool:
    """True for errors that only say *another* rank died (a collective lost its peer)."""
    name = type(exc).__name__
    text = str(exc)
    return name in ("DistBackendError", "DistNetworkError", "DistStoreError") or \
        any(marker in text for marker in _PEER_LOST)


@dataclass
class Outcome:
    """What one rank sends back: a value or an exception (with its remote traceback)."""
    rank: int
    ok: bool
    value: Any = None
    exc_bytes: bytes | None = None
    exc_type: str = ""
    exc_message: str = ""
    traceback: str = ""
    collateral: bool = False
    """The rank failed because another one did (a collective lost its peer, or it was stopped)."""

    @classmethod
    def success(cls, rank: int, value: Any) -> "Outcome":
        return cls(rank=rank, ok=True, value=value)

    @classmethod
    def failure(cls, rank: int, exc: BaseException) -> "Outcome":
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        try:
            exc_bytes = cloudpickle.dumps(exc)
        except Exception:
            exc_bytes = None
        return cls(rank=rank, ok=False, exc_bytes=exc_bytes,
                   exc_type=f"{type(exc).__module__}.{type(exc).__qualname__}",
                   exc_message=str(exc), traceback=tb, collateral=is_collateral(exc))

    def exception(self) -> BaseException:
        """Re-create the remote exception as its own type, with rank and traceback attached."""
        exc: BaseException | None = None
        if self.exc_bytes is not None:
            try:
                exc = pickle.loads(self.exc_bytes)
            except Exception:
                exc = None
        if not isinstance(exc, BaseException):
            return RemoteError(self.exc_type, self.exc_message, self.rank, self.traceback)
        try:
            exc.rank = self.rank  # type: ignore[attr-defined]
            exc.remote_traceback = self.traceback  # type: ignore[attr-defined]
        except Exception:
            pass
        if hasattr(exc, "add_note"):
            exc.add_note(f"\n[gpujobs] raised in rank {self.rank}; remote traceback:\n"
                         f"{self.traceback.rstrip()}")
        return exc
