"""How a view is published: a live widget with its static copy after it, or HTML and text alone
(:func:`display_bundle`), as :func:`display_mode` decides for the front end at hand."""
from __future__ import annotations

import os
from typing import Any, Callable

from ..rank import contract


def display_mode() -> str:
    """``widget`` in a Jupyter kernel with ipywidgets, ``html`` in one without, ``text`` in a
    terminal; ``GPUJOBS_DISPLAY`` overrides."""
    forced = os.environ.get(contract.DISPLAY, "").strip().lower()
    if forced in ("widget", "html", "text"):
        return forced
    try:
        from IPython import get_ipython
        shell = get_ipython()
    except ImportError:
        return "text"
    if shell is None:
        return "text"
    if getattr(shell, "kernel", None) is None:
        return "text"  # a terminal: no live outputs to rewrite
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return "html"
    return "widget"


WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
#: JupyterLab shows either the live widget (``gpujobs-live``) or the static copy after it
#: (``gpujobs-fallback``), never both: a reopened notebook whose kernel restarted has no widget
#: model, and this hides the "Error displaying widget: model not found" in its place.
FALLBACK_STYLE = (
    "<style>"
    ".jp-OutputArea-child:has(.gpujobs-live)+.jp-OutputArea-child:has(.gpujobs-fallback)"
    "{display:none}"
    ".jp-OutputArea-child:has(+.jp-OutputArea-child .gpujobs-fallback):not(:has(.gpujobs-live))"
    "{display:none}"
    "</style>")


def fallback_bundle(text: str, html: str) -> dict[str, str]:
    """The static copy of a live widget: its HTML (with :data:`FALLBACK_STYLE`) and text."""
    return {"text/plain": text,
            "text/html": f'{FALLBACK_STYLE}<div class="gpujobs-fallback">{html}</div>'}


def display_bundle(make_widget: Callable[[], Any] | None, text: str, html: str) -> Any:
    """Publish a view; returns the widget (or None).

    Widget mode: two outputs, the widget view alone and then its static copy
    (:func:`fallback_bundle`, with a display id the widget keeps current through
    ``attach_fallback``), so what a notebook saves shows the last state wherever the widget
    cannot render (GitHub, nbconvert, JupyterLab after a kernel restart). Otherwise one
    output: ``text/html`` and ``text/plain``."""
    from IPython.display import display
    if make_widget is None or display_mode() != "widget":
        display({"text/plain": text, "text/html": html}, raw=True)
        return None
    widget = make_widget()
    display({WIDGET_MIME: {"version_major": 2, "version_minor": 0, "model_id": widget.model_id}},
            raw=True)
    handle = display(fallback_bundle(text, html), raw=True, display_id=True)
    attach = getattr(widget, "attach_fallback", None)
    if attach is not None:
        attach(handle)
    return widget
