"""GPUs -> ranks: the one shape function of every entry point that takes a GPU count.

``gpujobs.submit`` (and so the ``%%gpujob`` magic) and the CLI's ``--gpus/--nodes/
--procs-per-node`` call :func:`gang_shape`; the sbatch translator, whose scripts say how many
ranks they start, splits GPUs over them with :func:`split_gpus`. The rules:

- ddp / fsdp: one rank per GPU; ``gpus=0``: ``procs_per_node`` CPU ranks per node (1).
- mpi: ``procs_per_node`` ranks per node (default: one per GPU, or 1 without GPUs), each
  owning an equal share of the node's GPUs.
- ray: one worker per node owning the node's GPUs (``procs_per_node`` does not apply).

``gpus`` is the total, split evenly over ``nodes``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from .errors import Fix, SpecError
from .spec import FRAMEWORKS, check_count


@dataclass(frozen=True)
class Shape:
    """The JobSpec fields of a gang's shape."""
    framework: str
    nodes: int
    procs_per_node: int
    gpus_per_proc: int

    def fields(self) -> dict[str, object]:
        return asdict(self)


def split_gpus(gpus_per_node: int, ranks_per_node: int) -> int | None:
    """GPUs each of ``ranks_per_node`` ranks owns (whole GPUs), None when they do not split."""
    if ranks_per_node < 1 or gpus_per_node % ranks_per_node:
        return None
    return gpus_per_node // ranks_per_node


def gang_shape(framework: str, gpus: int, nodes: int = 1, procs_per_node: int | None = None) -> Shape:
    """The shape of ``gpus`` GPUs over ``nodes`` nodes for ``framework`` (``gpus=0``: CPU ranks).

    Errors name the JobSpec fields; each front end spells them (the CLI: ``--gpus`` …)."""
    if framework not in FRAMEWORKS:
        raise SpecError("framework", f"unknown framework {framework!r}", f"use one of {', '.join(FRAMEWORKS)}")
    check_count("gpus", gpus, minimum=0)
    check_count("nodes", nodes)
    if procs_per_node is not None:
        check_count("procs_per_node", procs_per_node)
    if gpus % nodes:
        raise SpecError("gpus", f"{gpus} GPUs cannot be split evenly over {nodes} nodes",
                        Fix.set("gpus", nodes * max(1, gpus // nodes), "use a multiple of {=nodes}, e.g. {}"))
    per_node = gpus // nodes
    if framework == "ray":
        return Shape("ray", nodes, 1, per_node)
    if framework == "mpi":
        ranks = procs_per_node or max(per_node, 1)
        share = split_gpus(per_node, ranks) if gpus else 0
        if share is None:
            raise SpecError("procs_per_node", f"{ranks} ranks cannot share {per_node} GPUs evenly",
                            "use a divisor of the GPUs per node")
        return Shape("mpi", nodes, ranks, share)
    if gpus == 0:
        return Shape(framework, nodes, procs_per_node or 1, 0)
    if procs_per_node not in (None, per_node):
        raise SpecError("procs_per_node", f"{framework} runs one rank per GPU "
                        f"({per_node} per node), not {procs_per_node}", Fix.drop("procs_per_node"))
    return Shape(framework, nodes, per_node, 1)
