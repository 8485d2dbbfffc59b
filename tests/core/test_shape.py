"""GPUs -> ranks is one function (gpujobs.shape.gang_shape): gpujobs.submit, the %%gpujob magic,
the CLI's --gpus/--nodes and the sbatch translator give the same gang for the same request
(gpus in {0, 1, 2, 8} x nodes in {1, 2} x every framework); and the framework x kind rules are
one table (each kind's ``frameworks`` in the Kubernetes backend's registry) that the builder's check
and the Kubernetes kind resolver share."""
from __future__ import annotations

import pytest
from tests.support import ipython_shell

import gpujobs
from gpujobs.builder import JobBuilder
from gpujobs.cli.targets import shape as cli_shape
from gpujobs.errors import SpecError
from gpujobs.shape import gang_shape
from gpujobs.slurm import from_sbatch
from gpujobs.spec import FRAMEWORKS

GPUS = (0, 1, 2, 8)
NODES = (1, 2)
REFUSED = "refused"


def train():
    return 1


def fields(spec) -> tuple:
    return (spec.framework, spec.nodes, spec.procs_per_node, spec.gpus_per_proc)


def outcome(make) -> object:
    try:
        return fields(make())
    except SpecError:
        return REFUSED


@pytest.fixture
def no_submit(monkeypatch):
    """JobBuilder.submit returns the spec it would submit (nothing is created)."""
    monkeypatch.setattr(JobBuilder, "submit", lambda self: self.spec())


@pytest.fixture
def magic(no_submit, tmp_path, monkeypatch):
    from IPython.core.error import UsageError
    with ipython_shell(monkeypatch, tmp_path / "ipython") as sh:
        def run(fw: str, gpus: int, nodes: int) -> object:
            try:
                return fields(sh.run_cell_magic("gpujob", f"--gpus {gpus} --nodes {nodes} --framework {fw}",
                                                "x = 1"))
            except UsageError:
                return REFUSED
        yield run


def sbatch_text(fw: str, gpus: int, nodes: int) -> str:
    """The same request as an sbatch script, launched the way Slurm users launch each framework."""
    per_node = gpus // nodes
    lines = ["#!/bin/bash", f"#SBATCH --nodes={nodes}"]
    if gpus:
        lines.append(f"#SBATCH --gpus-per-node={per_node}")
    if fw in ("ddp", "fsdp"):
        lines += [f"#SBATCH --ntasks-per-node={max(per_node, 1)}", "srun python train.py"]
    elif fw == "mpi":
        lines.append("mpirun python train.py")
    else:
        lines += ["#SBATCH --ntasks-per-node=1", "srun python driver.py"]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("nodes", NODES)
@pytest.mark.parametrize("gpus", GPUS)
@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_every_entry_point_gives_the_same_gang(fw, gpus, nodes, no_submit, magic):
    expected = outcome(lambda: gang_shape(fw, gpus, nodes))
    api = outcome(lambda: gpujobs.submit(train, gpus=gpus, nodes=nodes, framework=fw))
    cli = outcome(lambda: cli_shape(gpujobs.job(train), fw, gpus, nodes, None).spec())
    got = {"cli": cli, "api": api, "magic": magic(fw, gpus, nodes)}
    if gpus % nodes == 0:  # an uneven split cannot be written as --gpus-per-node
        got["sbatch"] = outcome(lambda: from_sbatch(sbatch_text(fw, gpus, nodes), framework=fw).spec())
    if gpus == 0:
        # gpujobs.submit and %%gpujob ask for GPUs (a CPU-only gang is .ddp(gpus_per_node=0,
        # procs_per_node=N)); the CLI's and sbatch's --gpus 0 are one CPU rank per node
        assert got.pop("api") == got.pop("magic") == REFUSED
    assert expected != REFUSED or gpus % nodes
    assert got == {k: expected for k in got}


def test_the_shapes_themselves():
    """The rules, written out (gang_shape's docstring)."""
    assert gang_shape("ddp", 8, 2) .fields() == dict(framework="ddp", nodes=2, procs_per_node=4, gpus_per_proc=1)
    assert fields(gang_shape("ddp", 0, 2, 3)) == ("ddp", 2, 3, 0)
    assert fields(gang_shape("mpi", 8, 2)) == ("mpi", 2, 4, 1)
    assert fields(gang_shape("mpi", 8, 1, 2)) == ("mpi", 1, 2, 4)
    assert fields(gang_shape("mpi", 0, 2)) == ("mpi", 2, 1, 0)
    assert fields(gang_shape("ray", 8, 2)) == ("ray", 2, 1, 4)
    with pytest.raises(SpecError, match="3 ranks cannot share 8 GPUs evenly"):
        gang_shape("mpi", 8, 1, 3)
    with pytest.raises(SpecError, match="ddp runs one rank per GPU"):
        gang_shape("ddp", 8, 1, 2)


def test_one_framework_by_kind_table():
    from gpujobs.backends.kubernetes.kinds import DEFAULT_KIND, KINDS, resolve_kind
    for fw in FRAMEWORKS:
        assert fw in KINDS[DEFAULT_KIND[fw]].frameworks
        for kind in KINDS:
            allowed = fw in KINDS[kind].frameworks
            try:
                spec = gpujobs.job(train).options(framework=fw, kind=kind).spec()
            except SpecError as exc:
                assert not allowed and exc.field == "kind", (fw, kind, exc)
                # the renderer refuses it the same way (a spec without kind, asked for it)
                with pytest.raises(SpecError):
                    resolve_kind(gpujobs.job(train).options(framework=fw).spec(), kind)
                continue
            assert allowed, (fw, kind)
            mode = KINDS[kind].volcano_mode or "none"
            assert resolve_kind(spec.replace(volcano=mode)) == kind
