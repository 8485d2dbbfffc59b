"""The admission package's modules meet through public names only, import at module level (a
function-level import hides an import cycle), and compose objects rather than mix classes
together: checked on the source with ``ast``."""
from __future__ import annotations

from tests.importrules import ROOT, mixins, violations

PACKAGE = ROOT / "gpujobs" / "admission"

# Known exceptions, each with its reason; none today.
KNOWN: set[str] = set()


def test_the_engine_is_composed_not_mixed():
    assert sorted(mixins(PACKAGE)) == []


def test_no_private_names_or_function_level_imports_in_admission():
    found = violations(PACKAGE)
    assert sorted(found - KNOWN) == []


def test_the_checks_see_what_they_look_for(tmp_path):
    """The checks themselves find a private import across modules, an import in a function, a
    class extending another of the package and a cast of self."""
    pkg = tmp_path / "gpujobs" / "admission"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("_x = 1\ny = 2\n")
    (pkg / "b.py").write_text("from .a import _x, y\n\n\ndef f():\n    from . import a\n    return a\n")
    found = violations(pkg, tmp_path)
    assert found == {"gpujobs.admission.b: imports private _x from gpujobs.admission.a",
                     "gpujobs.admission.b: function-level import of gpujobs.admission in f"}
    (pkg / "c.py").write_text("from typing import cast\n\n\nclass A:\n    pass\n\n\n"
                              "class B(A, list):\n    def f(self):\n        return cast('B', self)\n")
    assert mixins(pkg) == {"c.py: class B extends A", "c.py: cast of self at line 10"}

