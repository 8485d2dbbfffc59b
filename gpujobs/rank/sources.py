"""Source text that travels with a call so remote tracebacks name the user's files and show
their lines: collected at submit, put into linecache in the rank."""
from __future__ import annotations

from typing import Any, Iterator, Sequence


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


def _registered(name: str) -> bool:
    """Source registered in linecache rather than read from a file (no mtime): a notebook
    cell, or a ``%%gpujob`` cell (:func:`gpujobs_magic.cell.compile_cell` registers it)."""
    import linecache
    entry = linecache.cache.get(name)
    return entry is not None and len(entry) == 4 and entry[1] is None


def _user_file(name: str, installed: tuple[str, ...]) -> bool:
    if name.startswith("<"):
        return name.startswith("<ipython-input") or _registered(name)
    return bool(name) and not name.startswith(installed) and "site-packages" not in name


def _source_block(f: Any, name: str) -> tuple[str, int]:
    """(text, first line number) of ``f``'s source: a registered ``<…>`` cell whole (its
    function may be generated: no ``def`` line to find), else the function's own lines."""
    import inspect
    import linecache
    if name.startswith("<") and _registered(name):
        return "".join(linecache.getlines(name)), 1
    lines, start = inspect.getsourcelines(f)
    return "".join(lines), start


def collect_sources(fn: Any, modules: Sequence[Any] = ()) -> dict[str, Any]:
    """What a rank needs for tracebacks that name the user's files and show their lines:
    ``{"sources": {file: [[first line number, text], ...]}, "files": {code key: file}}``:
    the source of each user function ``fn`` reaches (notebook cells included, read through
    linecache), not whole files, so the call stays small. cloudpickle replaces the file name
    of code it ships by value with ``<dynamic-code>``; ``files`` puts it back."""
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
                text, start = _source_block(f, name)
            except (OSError, TypeError):
                continue
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
