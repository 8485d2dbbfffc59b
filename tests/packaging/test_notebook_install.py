"""#31: `make demo` installed ipywidgets but no JupyterLab or ipykernel, and the README's notebook
section did not say how to get a JupyterLab with the widgets. One command does now: `make lab`."""
from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _names(reqs: list[str]) -> set[str]:
    return {re.split(r"[<>=!\[ ;]", r, maxsplit=1)[0].lower() for r in reqs}


def test_the_notebook_extra_brings_a_jupyterlab_with_widgets_and_a_kernel():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {"ipywidgets", "ipykernel", "jupyterlab", "ipython"} <= _names(extras["notebook"])


def test_make_demo_and_make_lab_install_the_notebook_extra_and_lab_opens_the_quickstart(tmp_path):
    if shutil.which("make") is None:
        pytest.skip("no make")
    dry = {t: subprocess.run(["make", "-n", "-B", t, f"VENV={tmp_path}/venv"], cwd=ROOT,
                             capture_output=True, text=True, timeout=60) for t in ("demo", "lab")}
    for target, r in dry.items():
        assert r.returncode == 0, r.stderr
        assert re.search(r"pip install .*\.\[[^\]]*notebook", r.stdout), (target, r.stdout)
    assert "jupyter lab examples/notebook_quickstart.ipynb" in dry["lab"].stdout
    assert (ROOT / "examples" / "notebook_quickstart.ipynb").exists()
    readme = (ROOT / "README.md").read_text()
    section = readme.split("### Notebook", 1)[1].split("\n### ", 1)[0]
    assert "`make lab`" in section and "jupyter lab" in section, section[:400]
