"""Configuration: environment first, then a TOML file.

File: ``$GPUJOBS_CONFIG``, else ``$GPUJOBS_HOME/config.toml``, else
``~/.config/gpujobs/config.toml``. Example::

    backend = "local"              # or "kubernetes"

    [local]
    gpus = 4                       # GPU slots (default: what NVML finds)
    idle_timeout_s = 600

    [[local.queues]]
    name = "default"
    gpus = 4

    [priorities]
    low = 100
    high = 1000

    [kubernetes]
    namespace = "team-a"
    queue = "team-a"
"""
from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from .errors import SpecError


def gpujobs_home() -> Path:
    """State directory (``GPUJOBS_HOME``, default ``~/.gpujobs``)."""
    return Path(os.environ.get("GPUJOBS_HOME") or Path.home() / ".gpujobs").expanduser()


def config_path() -> Path:
    if os.environ.get("GPUJOBS_CONFIG"):
        return Path(os.environ["GPUJOBS_CONFIG"]).expanduser()
    home_cfg = gpujobs_home() / "config.toml"
    if home_cfg.exists():
        return home_cfg
    return Path.home() / ".config" / "gpujobs" / "config.toml"


def load_config() -> dict[str, Any]:
    """The parsed config file, or {} when there is none. A broken file is a SpecError."""
    path = config_path()
    if not path.exists():
        return {}
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"config file {path}", f"is not valid TOML: {exc}",
                        "fix the line named above, or point GPUJOBS_CONFIG elsewhere") from None
