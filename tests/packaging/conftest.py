"""The wheel built once for the packaging tests that read it."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """The gpujobs wheel, built with pip (no build isolation) from a copy of this checkout."""
    out_dir = tmp_path_factory.mktemp("wheel")
    src = out_dir / "src"  # a copy: setuptools writes build/ and *.egg-info into the source tree
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "node_modules",
                                                             "__pycache__", ".pytest_cache", ".hypothesis"))
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                          "-q", "-w", str(out_dir), str(src)], capture_output=True, text=True, timeout=600,
                         cwd=out_dir)
    assert out.returncode == 0, out.stdout + out.stderr
    wheels = list(out_dir.glob("gpujobs-*.whl"))
    assert len(wheels) == 1, list(out_dir.iterdir())
    return wheels[0]
