"""The local backend's modules meet through public names only (imported, or read on an object),
import each other at module level, and the agent is composed, not mixed: it owns a recovery,
a gang watcher and a server, each given the few things it uses (issue 32). Checked on the
source with ``ast`` (tests/importrules.py)."""
from __future__ import annotations

from tests.importrules import ROOT, foreign_private_attributes, mixins, violations

PACKAGE = ROOT / "gpujobs" / "backends" / "local"

# Function-level imports of the package's own modules kept on purpose; an entry here that is
# fixed can simply go.
KNOWN_IMPORTS = {
    # the daemon starts the zygote (torch imports, seconds) before it imports the agent
    "gpujobs.backends.local.daemon: function-level import of gpujobs.backends.local.agent in main",
    # client-side start-up time: a launch or a status query imports none of these
    "gpujobs.backends.local.backend: function-level import of gpujobs.backends.local.launchers in submit",
    "gpujobs.backends.local.backend: function-level import of gpujobs.backends.local.stacks in stacks",
    "gpujobs.backends.local.client: function-level import of gpujobs.backends.local.store in _kill_recorded_ranks",
    "gpujobs.backends.local.protocol: function-level import of gpujobs.backends.local.private in socket_path",
}
# The launchers' gangs: a launcher is a Gang with its own command line (launchers.make_gang).
KNOWN_CLASSES = {"launch_mpi.py: class MpiGang extends Gang", "launch_ray.py: class RayGang extends Gang"}


def test_the_agent_is_composed_not_mixed():
    assert sorted(mixins(PACKAGE) - KNOWN_CLASSES) == []


def test_no_private_names_cross_the_local_modules():
    assert sorted(violations(PACKAGE, inner_only=True) - KNOWN_IMPORTS) == []
    assert sorted(foreign_private_attributes(PACKAGE)) == []


def test_the_attribute_check_sees_another_modules_private_member(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("class A:\n    def _view(self):\n        return self._x\n")
    (pkg / "b.py").write_text("import os\n\n\ndef f(agent):\n    os._exit(agent._view())\n")
    assert foreign_private_attributes(pkg) == {"b.py: reads agent._view at line 5"}
    assert violations(pkg, tmp_path, inner_only=True) == set()
    (pkg / "c.py").write_text("def g():\n    from . import a\n    import json\n    return a, json\n")
    assert violations(pkg, tmp_path, inner_only=True) == {"pkg.c: function-level import of pkg in g"}
