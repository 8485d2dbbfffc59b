"""Short tracebacks for gpujobs' own errors in IPython and Jupyter.

A ``SpecError`` from ``gpujobs.submit(f, gpus=100)`` is about the caller's line, not the
30-45 frames of builder, backend, client and protocol under it. IPython asks an exception
for ``_render_traceback_()`` before formatting it; :class:`gpujobs.errors.GpuJobsError`
answers with :func:`render_short`: the caller's frames up to the first gpujobs frame, then
the error. ``%tb verbose`` (or ``%xmode verbose``) and ``GPUJOBS_DEBUG=1`` show every frame.
"""
from __future__ import annotations

import os
import types
from pathlib import Path
from typing import Any


DEBUG = "GPUJOBS_DEBUG"
"""gpujobs.rank.contract.DEBUG, spelt again: this module belongs to the errors layer, below the
rank package, and imports nothing of gpujobs (a test checks that the two agree)."""
#: frames from these folders are gpujobs' own (hidden in the short form)
_OWN = tuple(str(Path(__file__).resolve().parent.parent / p) + os.sep
             for p in ("gpujobs", "gpujobs_magic"))
HIDDEN_NOTE = "(gpujobs' own frames hidden: `%tb verbose` or GPUJOBS_DEBUG=1 shows them)"


def _own(tb: types.TracebackType) -> bool:
    name = tb.tb_frame.f_code.co_filename
    try:
        return str(Path(name).resolve()).startswith(_OWN)
    except (OSError, ValueError):
        return False


def callers_frames(tb: types.TracebackType | None) -> tuple[types.TracebackType | None, bool]:
    """(a copy of ``tb`` cut at the first gpujobs frame, whether anything was cut)."""
    kept: list[types.TracebackType] = []
    cut = False
    while tb is not None:
        if _own(tb):
            cut = True
            break
        kept.append(tb)
        tb = tb.tb_next
    head = None
    for t in reversed(kept):
        head = types.TracebackType(head, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return head, cut


def render_short(exc: BaseException) -> list[str]:
    """IPython's structured traceback of ``exc`` without gpujobs' own frames (all of them in
    verbose mode or with GPUJOBS_DEBUG set); the standard traceback where that fails."""
    try:
        return _render(exc)
    except Exception:  # noqa: BLE001 - never lose the error to its formatting
        import traceback
        return traceback.format_exception(type(exc), exc, exc.__traceback__)


def _render(exc: BaseException) -> list[str]:
    from IPython import get_ipython
    shell: Any = get_ipython()
    formatter = shell.InteractiveTB
    full = os.environ.get(DEBUG, "") not in ("", "0") or \
        str(getattr(formatter, "mode", "")).lower() == "verbose"
    tb, cut = (exc.__traceback__, False) if full else callers_frames(exc.__traceback__)
    stb = list(formatter.structured_traceback(type(exc), exc, tb, tb_offset=1 if tb else 0))
    return stb + [HIDDEN_NOTE] if cut else stb
