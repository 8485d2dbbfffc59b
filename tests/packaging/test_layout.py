"""Where the layout is written down: each package's docstring names each of its modules and
subpackages, and the README's Layout section is one line per folder, naming every package folder
and no folder that does not exist (it was 90 lines, file by file, a merge hotspot)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = sorted(p.parent for top in ("gpujobs", "gpujobs_magic", "gpujobs_sim")
                  for p in (ROOT / top).rglob("__init__.py") if "__pycache__" not in p.parts)
BUILT = {"gpujobs/lab/labextension/"}  # built by `make`, not in git


def named(stem: str, text: str) -> bool:
    return re.search(r"(?<![\w])" + re.escape(stem) + r"(?![\w])", text) is not None


def layout_lines() -> list[str]:
    text = (ROOT / "README.md").read_text()
    start = text.index("## Layout")
    section = text[start:text.index("\n## ", start + 1)]
    block = section.split("```", 2)[1]
    return [line for line in block.splitlines()[1:] if line.strip()]


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_each_package_docstring_names_its_modules(package):
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    parts = [p.stem for p in package.glob("*.py") if p.stem not in ("__init__", "__main__")]
    parts += [p.name for p in package.iterdir() if (p / "__init__.py").is_file()]
    missing = sorted(m for m in parts if not named(m, doc))
    assert not missing, f"{package.relative_to(ROOT)}/__init__.py's docstring does not name {missing}"


def test_the_readme_layout_is_one_line_per_folder():
    lines = layout_lines()
    folders = [line.split()[0] for line in lines]
    assert all(line[0] != " " and f.endswith("/") and len(line.split()) > 1
               for line, f in zip(lines, folders)), \
        "each line of the layout is a folder and what it holds, on that one line"
    assert len(folders) == len(set(folders)), "a folder listed twice"
    packages = {f"{p.relative_to(ROOT)}/" for p in PACKAGES}
    assert sorted(packages - set(folders)) == [], "package folders the layout does not list"
    stale = sorted(f for f in folders if not (ROOT / f).is_dir() and f not in BUILT)
    assert stale == [], "the layout lists folders that do not exist"
