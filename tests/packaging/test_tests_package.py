"""The tests are a package: every test folder has an ``__init__.py`` and test modules import
their helpers as ``tests.support``, ``tests.local.inproc`` …, never by a bare sibling name that
works only while pytest puts that folder on ``sys.path`` (the ``pythonpath`` setting has no
test folder)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
SOURCES = sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_test_folder_is_a_package():
    folders = sorted({p.parent for p in SOURCES})
    assert [str(f.relative_to(ROOT)) for f in folders if not (f / "__init__.py").is_file()] == []


def test_no_test_module_imports_a_sibling_by_a_bare_name():
    bare = {p.stem for p in SOURCES} | {p.name for p in TESTS.iterdir() if p.is_dir()}
    bare -= {"__init__"} | {n for n in bare if (ROOT / n).is_dir()}  # benchmarks/: the top-level one
    found = []
    for path in SOURCES + sorted((ROOT / "benchmarks").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            found += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names
                      if n.split(".")[0] in bare]
    assert found == [], "import these as tests.<folder>.<module>"
