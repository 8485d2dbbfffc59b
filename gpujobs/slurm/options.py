"""The ``#SBATCH`` options in force for one script, and messages that name its lines.

The last directive of each option wins (as in sbatch); refused ones raise, warn-only ones warn
(gpujobs/slurm/policy.py). Values are parsed here so that a bad one is a SpecError naming
``<script>:<line> --<option>``, and warnings (:class:`SbatchWarning`) point at the caller's line.
"""
from __future__ import annotations

import sys
import warnings
from types import FrameType
from typing import Any, Mapping

from ..errors import Fix, SpecError
from . import units
from .directives import Directive, Script
from .policy import REFUSED, WARN_ONLY


class SbatchWarning(UserWarning):
    """A directive or body line that gpujobs accepts but does not translate."""


class Options:
    """One script's directives in force (``opts``: long option name -> Directive)."""

    def __init__(self, source: str):
        self.source = source
        self.opts: dict[str, Directive] = {}

    # ------------------------------------------------------------ messages
    def error(self, line: int, what: str, problem: str, fix: Fix | str) -> SpecError:
        err = SpecError(f"{self.source}:{line} {what}", problem, fix)
        err.line = line  # type: ignore[attr-defined]
        return err

    def warn(self, line: int, what: str, message: str) -> None:
        level = 2
        frame: FrameType | None = sys._getframe(1)
        while frame is not None and frame.f_globals.get("__name__", "").startswith("gpujobs.slurm"):
            frame, level = frame.f_back, level + 1
        warnings.warn(f"{self.source}:{line} {what}: {message}", SbatchWarning, stacklevel=level)

    # ------------------------------------------------------------- values
    def value(self, option: str, parse, *args: Any) -> Any:
        d = self.opts[option]
        try:
            return parse(d.value, *args)
        except units.ValueProblem as exc:
            raise self.error(d.line, f"--{option}", exc.problem, exc.fix) from None

    def srun_value(self, srun: Mapping[str, str], line: int, name: str, parse, *args: Any) -> Any:
        """An option of the launch line's srun (at ``line``), parsed like a directive's."""
        try:
            return parse(srun[name], *args)
        except units.ValueProblem as exc:
            raise self.error(line, f"srun --{name}", exc.problem, exc.fix) from None

    def line_of(self, option: str) -> int:
        return self.opts[option].line

    # ------------------------------------------------------------- directives
    def read_directives(self, script: Script) -> None:
        for ln in script.late_directives:
            self.warn(ln, "#SBATCH", "comes after the first command; sbatch ignores it, and so does gpujobs")
        for d in script.directives:
            if d.option in REFUSED:
                raise self.error(d.line, f"--{d.option}", "is not supported by gpujobs", REFUSED[d.option])
            if d.option in WARN_ONLY:
                self.warn(d.line, f"--{d.option}", f"not translated: {WARN_ONLY[d.option]}")
                continue
            self.opts[d.option] = d  # the last one wins, as in sbatch
