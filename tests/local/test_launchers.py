"""The launcher table: plugins come from the ``gpujobs.local_launchers`` entry points, read
once per process (ddp jobs, which have no registered launcher, looked them up on every start)."""
from __future__ import annotations

import importlib.metadata

from gpujobs.backends.local import launchers


def test_entry_points_are_scanned_once_for_frameworks_without_a_launcher(monkeypatch):
    scans = []
    real = importlib.metadata.entry_points

    def counting(**kw):
        scans.append(kw)
        return real(**kw)

    monkeypatch.setattr(importlib.metadata, "entry_points", counting)
    forget = getattr(launchers._load_plugins, "cache_clear", lambda: None)
    forget()
    try:
        for _ in range(5):
            assert launchers.launcher_for("ddp") is launchers.gang_launcher
        assert launchers.launcher_for("fsdp") is launchers.gang_launcher
    finally:
        forget()
    assert scans == [{"group": "gpujobs.local_launchers"}]
