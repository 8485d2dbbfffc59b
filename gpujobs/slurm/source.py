"""Inputs given as a file path or as the text itself (sbatch scripts, mapping files, teams
YAML, slurm.conf): one rule for all of them.

* an ``os.PathLike`` is a path;
* a string with a newline is the text;
* a one-line string is a path when such a file exists, the text when it looks like text
  (starts with ``#`` or holds ``:``, ``=`` or ``{``: a directive, YAML, ``key=value``), and
  otherwise a path that does not exist: one SpecError, naming the input and the fix.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from ..errors import SpecError

_TEXT_MARKS = (":", "=", "{")


def read_source(source: Any, what: str, inline_name: str | None = None) -> tuple[str, str]:
    """``(name, text)`` of ``source``; ``name`` is the path, or ``inline_name`` (default ``what``)
    for text. ``what`` (``"sbatch"``, ``"mapping"`` …) names the input in errors."""
    fix = f"pass the path of an existing {what} file, or the {what} text itself"
    if isinstance(source, os.PathLike):
        return _read(Path(source), what, fix)
    if not isinstance(source, str):
        raise SpecError(what, f"expected a file path or the {what} text, got {type(source).__name__}",
                        "pass the file path or its contents")
    if "\n" in source:
        return inline_name or what, source
    try:
        is_file = bool(source.strip()) and Path(source).exists()
    except OSError:  # e.g. a long one-line text: "File name too long"
        is_file = False
    if is_file:
        return _read(Path(source), what, fix)
    if source.lstrip().startswith("#") or any(mark in source for mark in _TEXT_MARKS):
        return inline_name or what, source
    raise SpecError(what, f"file {source!r} does not exist", fix)


def _read(path: Path, what: str, fix: str) -> tuple[str, str]:
    if not path.exists():
        raise SpecError(what, f"file {str(path)!r} does not exist", fix)
    try:
        return str(path), path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(what, f"cannot read {path}: {exc}", "pass a readable text file") from None


def load_yaml(name: str, text: str) -> Any:
    """``yaml.safe_load`` with a SpecError naming the file (or ``name``) on bad YAML."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError(name, f"is not valid YAML: {exc}".replace("\n", " "), "fix the YAML") from None
