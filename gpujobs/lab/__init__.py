"""The JupyterLab panel's server side: a Jupyter server extension named ``gpujobs``.

The lab extension (TypeScript, ``labextension/`` in the repository, built into
``gpujobs/lab/labextension``) shows the "GPU jobs" side panel; this package serves its API
(:mod:`.handlers`) from one shared refresh loop (:mod:`.feed`).
"""
from __future__ import annotations

from typing import Any


def _load_jupyter_server_extension(serverapp: Any) -> None:
    from .handlers import setup_handlers
    setup_handlers(serverapp.web_app)
    serverapp.log.info("gpujobs: the GPU jobs panel API is at %sgpujobs/api/",
                       serverapp.web_app.settings["base_url"])
