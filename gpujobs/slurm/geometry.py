"""The gang's shape from an sbatch script: nodes, ranks per node and GPUs per rank (the GPUs of
a node split over its ranks by :func:`gpujobs.shape.split_gpus`, as every entry point does).

Read from ``-N``/``-n``/``--ntasks-per-node`` (directives or the launch line's srun), the GPU
options (``--gpus``, ``--gpus-per-node``, ``--gpus-per-task``, ``--gres=gpu``: conflicting ones
raise) and the launcher, which decides how many ranks a node starts (``torchrun
--nproc-per-node``, ``mpirun -np``/``-npernode``, srun's tasks, one for a bare ``python``).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..shape import split_gpus
from . import units
from .directives import Directive
from .launch import Launch
from .options import Options


@dataclass(frozen=True)
class ScriptShape:
    nodes: int
    procs_per_node: int
    gpus_per_proc: int
    gpu_type: str | None  # from --gres=gpu:TYPE:N or --gpus=TYPE:N, for the site mapping


def script_shape(o: Options, launch: Launch) -> ScriptShape:
    """The shape the script asks for (its #SBATCH, srun and launcher lines; not
    :func:`gpujobs.shape.gang_shape`, which derives ranks from a GPU count), or a line-numbered
    SpecError when they disagree."""
    srun = launch.srun
    L = launch.line
    nodes = o.value("nodes", units.parse_nodes) if "nodes" in o.opts else None
    if "nodes" in srun:
        n2 = o.srun_value(srun, L, "nodes", units.parse_nodes)
        if nodes is not None and n2 != nodes:
            raise o.error(L, "srun --nodes", f"asks for {n2} nodes but the job has {nodes}",
                          "drop srun --nodes or make them equal")
        nodes = n2
    if launch.kind == "torchrun" and launch.nnodes and "$" not in launch.nnodes:
        if not launch.nnodes.isdigit():
            raise o.error(L, "torchrun --nnodes", f"{launch.nnodes!r} is elastic; a gang has a fixed size",
                          "use --nnodes=$SLURM_NNODES or a number")
        if nodes is not None and int(launch.nnodes) != nodes:
            raise o.error(L, "torchrun --nnodes", f"says {launch.nnodes} nodes but the job has {nodes}",
                          "use --nnodes=$SLURM_NNODES")
        nodes = int(launch.nnodes)
    nodes = nodes or 1

    ntasks = o.value("ntasks", units.parse_int, "task count") if "ntasks" in o.opts else None
    per_node = (o.value("ntasks-per-node", units.parse_int, "task count")
                if "ntasks-per-node" in o.opts else None)
    if "ntasks" in srun:
        ntasks = o.srun_value(srun, L, "ntasks", units.parse_int, "task count")
    if "ntasks-per-node" in srun:
        per_node = o.srun_value(srun, L, "ntasks-per-node", units.parse_int, "task count")
    if per_node is None and ntasks is not None:
        if ntasks % nodes:
            raise o.error(o.line_of("ntasks") if "ntasks" in o.opts else L, "--ntasks",
                          f"{ntasks} tasks cannot be spread evenly over {nodes} nodes",
                          f"use --ntasks-per-node={max(1, ntasks // nodes)}")
        per_node = ntasks // nodes
    elif per_node is not None and ntasks is not None and ntasks != per_node * nodes:
        raise o.error(o.line_of("ntasks") if "ntasks" in o.opts else L, "--ntasks",
                      f"{ntasks} tasks disagree with {per_node} per node × {nodes} nodes",
                      "give either --ntasks or --ntasks-per-node")

    if "gpus-per-task" in srun:
        o.opts.setdefault("gpus-per-task", Directive(L, "gpus-per-task", srun["gpus-per-task"], ""))
    for name in ("gpus", "gpus-per-node", "gres"):
        if name in srun:
            o.opts[name] = Directive(L, name, srun[name], f"srun --{name}")
    gpn, gtype, gpt = _gpus_per_node(o, nodes, per_node)

    # ranks per node: who starts the processes decides
    if launch.kind == "torchrun":
        npn = launch.nproc_per_node
        if npn is None:
            procs = 1
        elif npn in ("gpu", "auto") or "$" in npn:
            if not gpn:
                raise o.error(L, "torchrun --nproc-per-node", f"{npn!r} needs GPUs in the request",
                              "give a number, e.g. --nproc-per-node=2")
            procs = gpn
        elif npn.isdigit() and int(npn) >= 1:
            procs = int(npn)
        else:
            raise o.error(L, "torchrun --nproc-per-node", f"{npn!r} is not a rank count", "give a number")
    elif launch.kind == "mpirun":
        if launch.per_node:
            procs = launch.per_node
        elif launch.np:
            if launch.np % nodes:
                raise o.error(L, "mpirun -np", f"{launch.np} ranks cannot be spread evenly over "
                              f"{nodes} nodes", "use a multiple of the node count")
            procs = launch.np // nodes
        else:
            procs = per_node or (gpn if gpn else 1)
        if launch.np and launch.np != procs * nodes:
            raise o.error(L, "mpirun -np", f"{launch.np} ranks disagree with {procs} per node × {nodes} nodes",
                          "make -np equal to nodes × ranks per node")
    elif launch.kind == "python":
        if nodes > 1:
            raise o.error(L, "python", f"starts one process, but the job asks for {nodes} nodes",
                          "launch with `srun python …` or torchrun to use every node")
        if per_node and per_node > 1:
            o.warn(L, "python", f"starts one process; --ntasks={per_node} has no effect without srun")
        procs = 1
        gpt = None
    else:  # srun <program>
        procs = per_node or 1

    if gpt is not None:
        gpus_per_proc = gpt
        if gpn is not None and gpn != gpt * procs and launch.kind != "torchrun":
            raise o.error(L, "--gpus-per-task", f"{gpt} GPUs per task × {procs} tasks per node "
                          f"is not the {gpn} GPUs per node asked for", "keep one way of asking for GPUs")
    elif gpn:
        share = gpn if launch.kind == "python" else split_gpus(gpn, procs)  # gpujobs.shape's split
        if share is None:
            raise o.error(L, launch.kind, f"{procs} ranks per node cannot share {gpn} GPUs evenly "
                          "(gpujobs gives each rank whole GPUs)",
                          f"start {gpn} ranks per node, or ask for a multiple of {procs} GPUs")
        gpus_per_proc = share
    else:
        gpus_per_proc = 0
    return ScriptShape(nodes, procs, gpus_per_proc, gtype)


def _gpus_per_node(o: Options, nodes: int, tasks_per_node: int | None) -> tuple[int | None, str | None, int | None]:
    """(GPUs per node, GPU type, GPUs per task) from --gpus*, --gres; conflicting ones raise."""
    found: list[tuple[str, int, str | None]] = []
    gtype: str | None = None
    per_task = None
    if "gres" in o.opts:
        gres, others = o.value("gres", units.parse_gres)
        if others:
            raise o.error(o.line_of("gres"), "--gres", f"generic resource {others[0]!r} has no "
                          "Kubernetes equivalent in gpujobs", "remove it (only gpu gres are translated)")
        if gres:
            found.append(("--gres", gres.count, gres.type))
    if "gpus-per-node" in o.opts:
        g = o.value("gpus-per-node", units.parse_gpu_count)
        found.append(("--gpus-per-node", g.count, g.type))
    if "gpus" in o.opts:
        g = o.value("gpus", units.parse_gpu_count)
        if g.count % nodes:
            raise o.error(o.line_of("gpus"), "--gpus", f"{g.count} GPUs cannot be split evenly "
                          f"over {nodes} nodes", "use --gpus-per-node=N instead")
        found.append(("--gpus", g.count // nodes, g.type))
    if "gpus-per-task" in o.opts:
        g = o.value("gpus-per-task", units.parse_gpu_count)
        per_task = g.count
        if tasks_per_node is not None:
            found.append(("--gpus-per-task", g.count * tasks_per_node, g.type))
        elif g.type:
            found.append(("--gpus-per-task", -1, g.type))
    counts = {(n, c) for n, c, _ in found if c >= 0}
    if len({c for _, c in counts}) > 1:
        desc = ", ".join(f"{n} → {c} per node" for n, c in sorted(counts))
        raise o.error(o.line_of(found[-1][0].lstrip("-")), found[-1][0],
                      f"GPU requests disagree ({desc})", "keep one way of asking for GPUs")
    types = {t for _, _, t in found if t}
    if len(types) > 1:
        raise o.error(o.line_of(found[-1][0].lstrip("-")), found[-1][0],
                      f"GPU types disagree ({', '.join(sorted(types))})", "ask for one GPU type")
    gtype = types.pop() if types else None
    count = next((c for _, c, _ in found if c >= 0), None)
    return count, gtype, per_task
