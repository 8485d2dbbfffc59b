"""Kueue v0.20: only v1beta2 is served (kueue #14558), and the Trainer
v1 (PyTorchJob) integration is deprecated in favour of TrainJob (#12601, #14504)."""
from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

import gpujobs
from gpujobs.errors import DeprecatedPathWarning

ROOT = Path(__file__).resolve().parents[2]


def train():
    return 1


def test_rendering_a_pytorchjob_for_kueue_warns_and_names_trainjob():
    with pytest.warns(DeprecatedPathWarning, match="TrainJob") as rec:
        objs = gpujobs.job(train).ddp(gpus=2).queue("q").options(kind="PyTorchJob").render()
    assert objs[-1]["kind"] == "PyTorchJob"
    assert "kueue #12601" in str(rec[0].message) and "--kind TrainJob" in str(rec[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecatedPathWarning)
        assert gpujobs.job(train).ddp(gpus=2).queue("q").render()[-1]["kind"] == "TrainJob"


def test_nothing_in_the_product_needs_kueue_v1beta1():
    """Every Kueue object gpujobs writes or reads is v1beta2; the only v1beta1 left is the
    visibility API's fallback for clusters older than v0.20, tried after v1beta2."""
    hits = []
    for path in (ROOT / "gpujobs").rglob("*.py"):
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"kueue\.x-k8s\.io/v1beta1|visibility\.kueue\.x-k8s\.io/v1beta1", line):
                hits.append(f"{path.relative_to(ROOT)}:{i}")
    assert hits == []
    watch = (ROOT / "gpujobs/backends/kubernetes/status/hub.py").read_text()
    assert '("v1beta2", "v1beta1")' in watch  # v1beta2 first
    objs = gpujobs.job(train).ddp(gpus=2).queue("q").render()
    assert all(o["apiVersion"] != "kueue.x-k8s.io/v1beta1" for o in objs)


def test_the_simulated_cluster_serves_kueue_v1beta2_only():
    from gpujobs_sim import FakeApiServer
    srv = FakeApiServer()
    kueue = [r for r in srv.store.resources() if r.group == "kueue.x-k8s.io"]
    assert kueue and all(r.versions == ("v1beta2",) for r in kueue)
    assert srv.visibility_versions == {"v1beta2"}
