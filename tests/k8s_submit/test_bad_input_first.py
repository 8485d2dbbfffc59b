"""Bad input on Kubernetes is refused before the cluster is reached: with no kubeconfig at all, an
MPI job without an MPI image is the SpecError naming ``image`` and its fix, not the missing
configuration (which plan() and render() already got right; submit looked up the namespace key,
which needs the cluster, first)."""
from __future__ import annotations

import pytest

import gpujobs
from gpujobs.errors import SpecError


def f():
    return 1


@pytest.fixture
def no_cluster(monkeypatch, tmp_path):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.setenv("GPUJOBS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GPUJOBS_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return tmp_path


@pytest.mark.parametrize("build, field, fix", [
    (lambda: gpujobs.job(f).mpi(ranks=2), "image", "docker build -t gpujobs-mpi"),
    (lambda: gpujobs.job(f).mpi(ranks=2).image("gpujobs-mpi:py311").options(volcano="appwrapper"),
     "volcano", "use an MPIJob"),
    (lambda: gpujobs.job(f).name("1st"), "name", ".name('j-1st')"),
])
def test_submit_refuses_bad_input_before_it_needs_the_cluster(no_cluster, build, field, fix):
    with pytest.raises(SpecError) as err:
        build().on("kubernetes").submit()
    assert err.value.field == field and fix in (err.value.fix or ""), err.value
    assert not (no_cluster / "home").exists()  # nothing written: no key, no archive
