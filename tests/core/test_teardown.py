"""A rank's framework teardown (gpujobs.rank.runner.frameworks.teardown): a gang of one has no peer
to wait for, so it skips the barrier and the group's destruction (issue 36: they were ~20 % of
a tiny rank's CPU time); a bigger gang keeps both (tests/core/test_gangs.py runs those)."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow  # imports torch


def test_a_gang_of_one_tears_down_without_a_barrier(tmp_path, monkeypatch):
    dist = pytest.importorskip("torch.distributed")
    from gpujobs.rank.runner import frameworks
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    calls: list[str] = []
    monkeypatch.setattr(dist, "barrier", lambda *a, **k: calls.append("barrier"))
    try:
        frameworks.teardown("ddp", True)
        assert calls == []
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
