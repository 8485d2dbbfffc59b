"""What ``gpujobs submit|render TARGET`` names: module:function, file.py:function, a script,
or an sbatch file, turned into builders."""
from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
import warnings
from pathlib import Path
from typing import Any, Callable

from ..builder import JobBuilder, job
from ..errors import SpecError
from ..shape import gang_shape
from ..spec import slug

_SBATCH_SUFFIXES = (".sbatch", ".slurm", ".sub")


def is_sbatch(path: Path) -> bool:
    if path.suffix in _SBATCH_SUFFIXES:
        return True
    try:
        head = path.read_text(errors="replace")[:20000]
    except OSError:
        return False
    return any(line.startswith("#SBATCH") for line in head.splitlines())


def _register_by_value(module: Any) -> None:
    """User code (not installed) travels by value, so ranks need not import it."""
    import cloudpickle
    try:
        cloudpickle.register_pickle_by_value(module)
    except ValueError:
        pass


def load_function(target: str) -> Callable[..., Any]:
    """``pkg.mod:fn`` or ``path/to/file.py:fn`` → the function."""
    mod_name, _, fn_name = target.rpartition(":")
    if not mod_name or not fn_name or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", fn_name):
        raise SpecError("target", f"{target!r} is not MODULE:FUNCTION", "write e.g. train.py:main or mypkg.train:main")
    if mod_name.endswith(".py") or os.sep in mod_name:
        path = Path(mod_name)
        if not path.is_file():
            raise SpecError("target", f"file {mod_name!r} does not exist", "give the path of the Python file")
        name = f"gpujobs_user_{re.sub(r'[^A-Za-z0-9_]', '_', path.stem)}"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        sys.path.insert(0, str(path.resolve().parent))
        try:
            spec.loader.exec_module(module)
        except SpecError:
            raise
        except Exception as exc:
            raise SpecError("target", f"importing {mod_name} failed: {type(exc).__name__}: {exc}",
                            "fix the file so `python FILE` runs") from None
        finally:
            sys.path.remove(str(path.resolve().parent))
        _register_by_value(module)
    else:
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(mod_name)
        except ImportError as exc:
            raise SpecError("target", f"cannot import {mod_name!r}: {exc}",
                            "run from the folder that holds the module, or give file.py:function") from None
        mfile = getattr(module, "__file__", None) or ""
        if mfile and Path(mfile).resolve().is_relative_to(Path.cwd()) and "site-packages" not in mfile:
            _register_by_value(module)
    fn = getattr(module, fn_name, None)
    if fn is None:
        import difflib
        names = [n for n, v in vars(module).items() if callable(v) and not n.startswith("_")]
        close = difflib.get_close_matches(fn_name, names, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        fix = f"write {mod_name}:{close[0]}" if close else f"define {fn_name} in {mod_name}"
        raise SpecError("target", f"{mod_name} has no {fn_name!r}{hint}", fix)
    if not callable(fn):
        raise SpecError("target", f"{mod_name}:{fn_name} is not callable", "name a function")
    return fn


def builders_for(target: str, args: list[str], *, mapping: str | None = None,
                 framework: str | None = None) -> tuple[str, list[JobBuilder]]:
    """(kind, builders) with kind in function | script | sbatch. Only sbatch arrays give several."""
    path = Path(target)
    if path.is_file() and is_sbatch(path):
        if args:
            raise SpecError("args", "an sbatch file takes no arguments", "put them in the script's launch line")
        from ..slurm import SbatchWarning, from_sbatch_array
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", SbatchWarning)
            builders = from_sbatch_array(path, mapping, framework=framework)
        for w in caught:
            if issubclass(w.category, SbatchWarning):
                sys.stderr.write(f"warning: {w.message}\n")
        return "sbatch", builders
    if ":" in target and not path.is_file():
        from ..builder import check_call
        fn = load_function(target)
        values, as_strings = convert_args(fn, args)
        check_call(fn, tuple(values), {})
        if as_strings:
            sys.stderr.write(f"gpujobs: passing {', '.join(as_strings)} to {fn.__name__} as "
                             f"str (no int/float/bool/Path/str type hint to convert with)\n")
        return "function", [job(fn, *values)]
    if path.is_file():
        cmd = ("python", target, *args) if path.suffix == ".py" else (target, *args)
        b: JobBuilder[Any] = JobBuilder(None).options(command=cmd)
        stem = slug(path.stem)
        return "script", [b.name(stem) if stem else b]
    raise SpecError("target", f"{target!r} is neither MODULE:FUNCTION nor an existing file",
                    "give train.py:main, mypkg.mod:main, a script or an sbatch file")


_TRUE, _FALSE = ("1", "true", "yes", "y", "on"), ("0", "false", "no", "n", "off")


def _convert(raw: str, hint: Any, param: str) -> Any:
    if hint is bool:
        if raw.lower() in _TRUE:
            return True
        if raw.lower() in _FALSE:
            return False
        raise SpecError(f"argument {param}", f"{raw!r} is not a bool", "write true or false")
    if hint in (int, float):
        try:
            return hint(raw)
        except ValueError:
            raise SpecError(f"argument {param}", f"{raw!r} is not {'an int' if hint is int else 'a float'}",
                            f"pass a number, e.g. {'15' if hint is int else '0.5'}") from None
    if hint is Path or hint is os.PathLike:
        return Path(raw)
    return raw


def _plain_hint(hint: Any) -> Any:
    """``X``, ``Optional[X]`` / ``X | None`` -> X when X is one of the convertible types."""
    import typing
    if isinstance(hint, str):  # an annotation get_type_hints could not resolve
        text = re.sub(r"^(typing\.)?Optional\[(.*)\]$", r"\2", hint.replace(" ", ""))
        text = re.sub(r"^(.*)\|None$|^None\|(.*)$", lambda m: m.group(1) or m.group(2), text)
        return {"int": int, "float": float, "bool": bool, "str": str, "Path": Path,
                "pathlib.Path": Path}.get(text)
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, getattr(__import__("types"), "UnionType", None)) \
            and len(args) == 1:
        hint = args[0]
    return hint if hint in (int, float, bool, str, Path, os.PathLike) else None


def convert_args(fn: Callable[..., Any], raw: list[str]) -> tuple[list[Any], list[str]]:
    """Command-line strings -> the function's parameter types (int, float, bool, Path, str, by
    type hint); returns (values, descriptions of the ones left as strings without a hint)."""
    import inspect
    import typing
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return list(raw), [repr(r) for r in raw]
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - unresolvable annotations: use what is plain
        hints = dict(getattr(fn, "__annotations__", {}))
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    star = next((p for p in params if p.kind is p.VAR_POSITIONAL), None)
    values: list[Any] = []
    as_strings: list[str] = []
    for i, item in enumerate(raw):
        p = positional[i] if i < len(positional) else star
        if p is None:  # too many: check_call says so
            values.append(item)
            continue
        hint = _plain_hint(hints.get(p.name))
        if hint is None and not isinstance(p.default, str):  # a str default already says str
            as_strings.append(f"{p.name}={item!r}")
        values.append(_convert(item, hint, p.name))
    return values, as_strings


def shape(builder: JobBuilder, framework: str, gpus: int, nodes: int, procs_per_node: int | None) -> JobBuilder:
    """Apply --framework/--gpus/--nodes/--procs-per-node (gpus=0: CPU ranks), as
    :func:`gpujobs.shape.gang_shape` does for every entry point."""
    return builder.with_shape(gang_shape(framework, gpus, nodes, procs_per_node))
