"""Bad input for Ray / MPI jobs: clear errors before anything is created (no processes started)."""
from __future__ import annotations

import sys

import pytest

import gpujobs
from gpujobs.errors import PreflightError, SpecError, SubmitError
from gpujobs.rank.runner.frameworks import check_ray_version, ray_init_kwargs


def noop():
    return 1


def created_jobs(home):
    jobs = home / "jobs"
    return sorted(p.name for p in jobs.iterdir()) if jobs.exists() else []


def test_ranks_per_node_must_divide_ranks():
    with pytest.raises(SpecError) as info:
        gpujobs.job(noop).mpi(ranks=6, ranks_per_node=4)
    assert info.value.field == "ranks_per_node" and "ranks_per_node=3" in info.value.fix
    spec = gpujobs.job(noop).mpi(ranks=6, gpus_per_rank=0, ranks_per_node=3).spec()
    assert (spec.framework, spec.nodes, spec.procs_per_node, spec.world_size) == ("mpi", 2, 3, 6)


def test_ray_builder_shape():
    spec = gpujobs.job(noop).ray(workers=3, gpus_per_worker=2, cpus_per_worker=4).spec()
    assert (spec.framework, spec.nodes, spec.gpus_per_proc, spec.cpus_per_proc) == ("ray", 3, 2, 4)
    with pytest.raises(SpecError) as info:
        gpujobs.job(noop).ray(workers=0)
    assert info.value.field == "workers"


def test_missing_mpirun_is_refused_at_submit(gpujobs_home, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no mpirun anywhere
    with pytest.raises(PreflightError) as info:
        gpujobs.job(noop).mpi(ranks=2, gpus_per_rank=0).submit()
    assert isinstance(info.value, SubmitError)
    assert "mpirun" in str(info.value) and "apt-get install openmpi-bin libopenmpi-dev" in str(info.value)
    assert "pip install mpi4py" in str(info.value)
    assert created_jobs(gpujobs_home) == []


def test_missing_mpi4py_is_refused_at_submit(gpujobs_home, monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # find_spec → None: "not installed"
    with pytest.raises(PreflightError, match=r"mpi4py.*pip install mpi4py"):
        gpujobs.job(noop).mpi(ranks=2, gpus_per_rank=0).submit()
    assert created_jobs(gpujobs_home) == []


def test_missing_ray_is_refused_at_submit(gpujobs_home, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(PreflightError, match=r"pip install 'gpujobs\[ray\]'"):
        gpujobs.job(noop).ray(workers=1, gpus_per_worker=0).submit()
    assert created_jobs(gpujobs_home) == []


def test_ray_version_mismatch_names_both_versions():
    check_ray_version("2.60.0", None)
    check_ray_version("2.60.0", "2.60.0")
    with pytest.raises(SpecError) as info:
        check_ray_version("2.9.3", "2.60.0")
    msg = str(info.value)
    assert info.value.field == "image" and "Ray 2.9.3" in msg and "Ray 2.60.0" in msg
    assert "ray==2.60.0" in info.value.fix


def test_runner_ray_setup_refuses_a_different_ray_before_starting_it(monkeypatch):
    """The rank's setup compares versions before ray.init: nothing starts."""
    pytest.importorskip("ray")
    from gpujobs.rank.context import context
    from gpujobs.rank.runner import frameworks
    monkeypatch.setenv("GPUJOBS_RAY_VERSION", "0.0.1")
    monkeypatch.setenv("GPUJOBS_RAY_ADDRESS", "127.0.0.1:1")  # would fail loudly if reached
    with pytest.raises(SpecError, match=r"submitted with Ray 0\.0\.1"):
        frameworks.setup("ray", context())
    import ray
    assert not ray.is_initialized()


def test_ray_init_kwargs_local_and_cluster():
    local = ray_init_kwargs({"GPUJOBS_RAY_NUM_CPUS": "2.5", "GPUJOBS_RAY_NUM_GPUS": "4",
                             "GPUJOBS_RAY_TEMP_DIR": "/tmp/x"})
    assert local["address"] == "local" and local["num_cpus"] == 3 and local["num_gpus"] == 4
    assert local["include_dashboard"] is False and local["_temp_dir"] == "/tmp/x"
    assert ray_init_kwargs({"GPUJOBS_RAY_ADDRESS": "auto"}) == {"address": "auto", "log_to_driver": True}
