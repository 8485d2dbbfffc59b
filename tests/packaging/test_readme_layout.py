"""The README's layout section names every module of the folders it lists file by file, and
names no file that does not exist (it missed config.py, devices.py, quantity.py, backends/base.py,
five modules of backends/local/ and three of slurm/)."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: folders the layout describes module by module (the others, e.g. metrics/ and views/, in prose)
BY_FILE = ["gpujobs", "gpujobs/backends", "gpujobs/backends/local", "gpujobs/backends/kubernetes",
           "gpujobs/backends/kubernetes/render", "gpujobs/backends/kubernetes/submit",
           "gpujobs/backends/kubernetes/status", "gpujobs/admission", "gpujobs/admission/forecast",
           "gpujobs/payload", "gpujobs/rank", "gpujobs/rank/runner", "gpujobs/slurm", "gpujobs/admin", "gpujobs/cli", "gpujobs/lab"]


def layout() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("## Layout")
    return text[start:text.index("\n## ", start + 1)]


def named(stem: str, section: str) -> bool:
    return re.search(r"(?<![\w])" + re.escape(stem) + r"(?![\w])", section) is not None


def test_every_module_of_the_listed_folders_is_named():
    section = layout()
    missing = [str(p.relative_to(ROOT)) for folder in BY_FILE for p in sorted((ROOT / folder).glob("*.py"))
               if p.name not in ("__init__.py", "__main__.py") and not named(p.stem, section)]
    assert not missing, f"README.md's layout does not name: {missing}"


def test_every_file_the_layout_names_exists():
    files = {p.name for pkg in ("gpujobs", "gpujobs_magic", "gpujobs_sim") for p in (ROOT / pkg).rglob("*.py")}
    stale = sorted(set(re.findall(r"\b(\w+\.py)\b", layout())) - files)
    assert not stale, f"README.md's layout names files that do not exist: {stale}"
