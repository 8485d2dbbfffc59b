"""Run the installed ``gpujobs`` entry point in a subprocess with a private GPUJOBS_HOME."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

GPUJOBS = Path(sys.executable).parent / "gpujobs"


class Cli:
    def __init__(self, home: Path, cwd: Path):
        self.home, self.cwd = home, cwd
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("GPUJOBS_")}
        self.env.update(GPUJOBS_HOME=str(home), GPUJOBS_CONFIG=str(home / "none.toml"),
                        PYTHONUNBUFFERED="1")

    def __call__(self, *args: str, timeout: float = 120, env: dict | None = None,
                 input: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([str(GPUJOBS), *map(str, args)], cwd=self.cwd, env={**self.env, **(env or {})},
                              capture_output=True, text=True, timeout=timeout, input=input)


@pytest.fixture
def cli(tmp_path) -> Cli:
    assert GPUJOBS.exists(), f"the entry point {GPUJOBS} is not installed (pip install -e .)"
    home = tmp_path / "home"
    home.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    return Cli(home, work)
