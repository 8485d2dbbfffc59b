"""from_sbatch: an sbatch script → a JobBuilder (the same JobSpec every other entry makes).

Rules (each documented in gpujobs/slurm/README.md):

* ``#SBATCH`` lines before the first command are read (as sbatch does); later ones are ignored
  with a warning. Unknown or malformed directives raise a line-numbered SpecError; directives with
  no effect on placement (``--mail-user``, ``--output`` …) warn; directives whose meaning gpujobs
  cannot keep (``--dependency``, ``--nodelist`` …) raise.
* The body must hold exactly one launch line (srun, torchrun, mpirun/mpiexec or python). It
  becomes the per-rank ``command``; gpujobs starts the ranks itself, so the launchers' own
  options shape the gang and are removed. ``export K=V`` lines become env, ``cd DIR`` the
  working directory; other setup lines (module load, conda activate, echo …) are not run: the
  image provides the environment. They are listed in one warning.
* ``--array`` jobs: :func:`from_sbatch` refuses them (a builder is one job); use
  :func:`from_sbatch_array`, which returns one builder per task with ``SLURM_ARRAY_TASK_ID`` set.
"""
from __future__ import annotations

import os
import re
import sys
import warnings
from types import FrameType
from pathlib import Path
from typing import Any

from ..builder import JobBuilder
from ..errors import SpecError
from ..shape import split_gpus
from ..spec import FRAMEWORKS, slug
from . import units
from .directives import Directive, DirectiveProblem, Script, read_script
from .launch import (SLURM_RANK_PRELUDE, Launch, classify, needs_shell,
                     parse_launch, shell_wrap)
from .mapping import SiteMapping, load_mapping
from .policy import REFUSED, WARN_ONLY
from .source import read_source


class SbatchWarning(UserWarning):
    """A directive or body line that gpujobs accepts but does not translate."""


class _Translator:
    def __init__(self, source: str, mapping: SiteMapping):
        self.source = source
        self.mapping = mapping
        self.opts: dict[str, Directive] = {}
        self.notes: list[tuple[int, str]] = []

    # ------------------------------------------------------------ messages
    def error(self, line: int, what: str, problem: str, fix: str) -> SpecError:
        err = SpecError(f"{self.source}:{line} {what}", problem, fix)
        err.line = line  # type: ignore[attr-defined]
        return err

    def warn(self, line: int, what: str, message: str) -> None:
        level = 2
        frame: FrameType | None = sys._getframe(1)
        while frame is not None and frame.f_globals.get("__name__", "").startswith("gpujobs.slurm"):
            frame, level = frame.f_back, level + 1
        warnings.warn(f"{self.source}:{line} {what}: {message}", SbatchWarning, stacklevel=level)

    def value(self, option: str, parse, *args: Any) -> Any:
        d = self.opts[option]
        try:
            return parse(d.value, *args)
        except units.ValueProblem as exc:
            raise self.error(d.line, f"--{option}", exc.problem, exc.fix) from None

    def line_of(self, option: str) -> int:
        return self.opts[option].line

    # ------------------------------------------------------------- directives
    def read_directives(self, script: Script) -> None:
        for ln in script.late_directives:
            self.warn(ln, "#SBATCH", "comes after the first command; sbatch ignores it, and so does gpujobs")
        for d in script.directives:
            if d.option in REFUSED:
                raise self.error(d.line, f"--{d.option}", "is not supported by gpujobs", REFUSED[d.option])
            if d.option in WARN_ONLY:
                self.warn(d.line, f"--{d.option}", f"not translated: {WARN_ONLY[d.option]}")
                continue
            self.opts[d.option] = d  # the last one wins, as in sbatch

    # ------------------------------------------------------------------ body
    def read_body(self, script: Script) -> tuple[Launch, dict[str, str], str | None]:
        launches: list[tuple[int, str]] = []
        env: dict[str, str] = {}
        workdir: str | None = None
        skipped: list[int] = []
        import shlex
        for ln, text in script.body:
            try:
                words = shlex.split(text, comments=True)
            except ValueError as exc:
                raise self.error(ln, "line", f"cannot be split into words ({exc})", "close the quote") from None
            kind = classify(words)
            if kind == "control":
                raise self.error(ln, words[0], "shell control flow cannot be translated",
                                 "move the logic into the program the job runs, or submit one job per case")
            if kind == "launch":
                launches.append((ln, text))
            elif kind == "export":
                self.read_export(ln, text, words, env)
            elif kind == "cd":
                target = words[1] if len(words) > 1 else ""
                if target and "$" not in target and not target.startswith("~"):
                    workdir = target
                else:
                    self.warn(ln, "cd", "is not a literal path; use --chdir=DIR")
            else:
                skipped.append(ln)
        if skipped:
            self.warn(skipped[0], "body", ("lines " + ", ".join(map(str, skipped)) + " are"
                                           if len(skipped) > 1 else f"line {skipped[0]} is") +
                      " not run (the job runs only its launch line; the image provides the environment)")
        if not launches:
            raise self.error(len(script.body) and script.body[-1][0] or 1, "body",
                             "has no launch line", "end the script with srun, torchrun, mpirun or python")
        if len(launches) > 1:
            raise self.error(launches[1][0], "body",
                             f"has {len(launches)} launch lines (lines {', '.join(str(line) for line, _ in launches)})",
                             "gpujobs runs one program per rank: split the steps into separate jobs, "
                             "or call them from one script")
        try:
            launch = parse_launch(*launches[0])
        except DirectiveProblem as exc:
            raise self.error(exc.line, exc.option, exc.problem, exc.fix) from None
        for note in launch.notes:
            self.warn(launch.line, launch.kind, note)
        return launch, env, workdir

    def read_export(self, ln: int, text: str, words: list[str], env: dict[str, str]) -> None:
        """``export K=V ...``: literal values become env; computed ones warn."""
        computed = "$" in text or "`" in text
        names = re.findall(r"(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)=", text.split("export", 1)[1])
        for k in names or words[1:2]:
            if k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK"):
                self.warn(ln, f"export {k}", "not used: gpujobs sets the rendezvous itself")
            elif computed:
                self.warn(ln, f"export {k}", "its value is computed by the shell and is not translated; "
                          "set it with --export=K=V or builder.env()")
        if computed:
            return
        for w in words[1:]:
            k, eq, v = w.partition("=")
            if eq and k not in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK"):
                env[k] = v
            elif not eq:
                self.warn(ln, f"export {k}", "exports a shell variable, which is not translated")

    # ----------------------------------------------------------------- shape
    def gpus_per_node(self, nodes: int, tasks_per_node: int | None) -> tuple[int | None, str | None, int | None]:
        """(GPUs per node, GPU type, GPUs per task) from --gpus*, --gres; conflicting ones raise."""
        found: list[tuple[str, int, str | None]] = []
        gtype: str | None = None
        per_task = None
        if "gres" in self.opts:
            gres, others = self.value("gres", units.parse_gres)
            if others:
                raise self.error(self.line_of("gres"), "--gres", f"generic resource {others[0]!r} has no "
                                 "Kubernetes equivalent in gpujobs", "remove it (only gpu gres are translated)")
            if gres:
                found.append(("--gres", gres.count, gres.type))
        if "gpus-per-node" in self.opts:
            g = self.value("gpus-per-node", units.parse_gpu_count)
            found.append(("--gpus-per-node", g.count, g.type))
        if "gpus" in self.opts:
            g = self.value("gpus", units.parse_gpu_count)
            if g.count % nodes:
                raise self.error(self.line_of("gpus"), "--gpus", f"{g.count} GPUs cannot be split evenly "
                                 f"over {nodes} nodes", "use --gpus-per-node=N instead")
            found.append(("--gpus", g.count // nodes, g.type))
        if "gpus-per-task" in self.opts:
            g = self.value("gpus-per-task", units.parse_gpu_count)
            per_task = g.count
            if tasks_per_node is not None:
                found.append(("--gpus-per-task", g.count * tasks_per_node, g.type))
            elif g.type:
                found.append(("--gpus-per-task", -1, g.type))
        counts = {(n, c) for n, c, _ in found if c >= 0}
        if len({c for _, c in counts}) > 1:
            desc = ", ".join(f"{n} → {c} per node" for n, c in sorted(counts))
            raise self.error(self.line_of(found[-1][0].lstrip("-")), found[-1][0],
                             f"GPU requests disagree ({desc})", "keep one way of asking for GPUs")
        types = {t for _, _, t in found if t}
        if len(types) > 1:
            raise self.error(self.line_of(found[-1][0].lstrip("-")), found[-1][0],
                             f"GPU types disagree ({', '.join(sorted(types))})", "ask for one GPU type")
        gtype = types.pop() if types else None
        count = next((c for _, c, _ in found if c >= 0), None)
        return count, gtype, per_task

    def translate(self, script: Script, framework: str | None) -> JobBuilder:
        launch, body_env, body_workdir = self.read_body(script)
        srun = launch.srun
        if framework is not None and framework not in FRAMEWORKS:
            raise SpecError("framework", f"unknown framework {framework!r}", f"use one of {', '.join(FRAMEWORKS)}")
        fw = framework or launch.framework
        L = launch.line

        def from_srun(name: str, parse, *args):
            try:
                return parse(srun[name], *args)
            except units.ValueProblem as exc:
                raise self.error(L, f"srun --{name}", exc.problem, exc.fix) from None

        nodes = self.value("nodes", units.parse_nodes) if "nodes" in self.opts else None
        if "nodes" in srun:
            n2 = from_srun("nodes", units.parse_nodes)
            if nodes is not None and n2 != nodes:
                raise self.error(L, "srun --nodes", f"asks for {n2} nodes but the job has {nodes}",
                                 "drop srun --nodes or make them equal")
            nodes = n2
        if launch.kind == "torchrun" and launch.nnodes and "$" not in launch.nnodes:
            if not launch.nnodes.isdigit():
                raise self.error(L, "torchrun --nnodes", f"{launch.nnodes!r} is elastic; a gang has a fixed size",
                                 "use --nnodes=$SLURM_NNODES or a number")
            if nodes is not None and int(launch.nnodes) != nodes:
                raise self.error(L, "torchrun --nnodes", f"says {launch.nnodes} nodes but the job has {nodes}",
                                 "use --nnodes=$SLURM_NNODES")
            nodes = int(launch.nnodes)
        nodes = nodes or 1

        ntasks = self.value("ntasks", units.parse_int, "task count") if "ntasks" in self.opts else None
        per_node = (self.value("ntasks-per-node", units.parse_int, "task count")
                    if "ntasks-per-node" in self.opts else None)
        if "ntasks" in srun:
            ntasks = from_srun("ntasks", units.parse_int, "task count")
        if "ntasks-per-node" in srun:
            per_node = from_srun("ntasks-per-node", units.parse_int, "task count")
        if per_node is None and ntasks is not None:
            if ntasks % nodes:
                raise self.error(self.line_of("ntasks") if "ntasks" in self.opts else L, "--ntasks",
                                 f"{ntasks} tasks cannot be spread evenly over {nodes} nodes",
                                 f"use --ntasks-per-node={max(1, ntasks // nodes)}")
            per_node = ntasks // nodes
        elif per_node is not None and ntasks is not None and ntasks != per_node * nodes:
            raise self.error(self.line_of("ntasks") if "ntasks" in self.opts else L, "--ntasks",
                             f"{ntasks} tasks disagree with {per_node} per node × {nodes} nodes",
                             "give either --ntasks or --ntasks-per-node")

        if "gpus-per-task" in srun:
            self.opts.setdefault("gpus-per-task", Directive(L, "gpus-per-task", srun["gpus-per-task"], ""))
        for name in ("gpus", "gpus-per-node", "gres"):
            if name in srun:
                self.opts[name] = Directive(L, name, srun[name], f"srun --{name}")
        gpn, gtype, gpt = self.gpus_per_node(nodes, per_node)

        # ranks per node: who starts the processes decides
        if launch.kind == "torchrun":
            npn = launch.nproc_per_node
            if npn is None:
                procs = 1
            elif npn in ("gpu", "auto") or "$" in npn:
                if not gpn:
                    raise self.error(L, "torchrun --nproc-per-node", f"{npn!r} needs GPUs in the request",
                                     "give a number, e.g. --nproc-per-node=2")
                procs = gpn
            elif npn.isdigit() and int(npn) >= 1:
                procs = int(npn)
            else:
                raise self.error(L, "torchrun --nproc-per-node", f"{npn!r} is not a rank count", "give a number")
        elif launch.kind == "mpirun":
            if launch.per_node:
                procs = launch.per_node
            elif launch.np:
                if launch.np % nodes:
                    raise self.error(L, "mpirun -np", f"{launch.np} ranks cannot be spread evenly over "
                                     f"{nodes} nodes", "use a multiple of the node count")
                procs = launch.np // nodes
            else:
                procs = per_node or (gpn if gpn else 1)
            if launch.np and launch.np != procs * nodes:
                raise self.error(L, "mpirun -np", f"{launch.np} ranks disagree with {procs} per node × {nodes} nodes",
                                 "make -np equal to nodes × ranks per node")
        elif launch.kind == "python":
            if nodes > 1:
                raise self.error(L, "python", f"starts one process, but the job asks for {nodes} nodes",
                                 "launch with `srun python …` or torchrun to use every node")
            if per_node and per_node > 1:
                self.warn(L, "python", f"starts one process; --ntasks={per_node} has no effect without srun")
            procs = 1
            gpt = None
        else:  # srun <program>
            procs = per_node or 1

        if gpt is not None:
            gpus_per_proc = gpt
            if gpn is not None and gpn != gpt * procs and launch.kind != "torchrun":
                raise self.error(L, "--gpus-per-task", f"{gpt} GPUs per task × {procs} tasks per node "
                                 f"is not the {gpn} GPUs per node asked for", "keep one way of asking for GPUs")
        elif gpn:
            share = gpn if launch.kind == "python" else split_gpus(gpn, procs)
            if share is None:
                raise self.error(L, launch.kind, f"{procs} ranks per node cannot share {gpn} GPUs evenly "
                                 "(gpujobs gives each rank whole GPUs)",
                                 f"start {gpn} ranks per node, or ask for a multiple of {procs} GPUs")
            gpus_per_proc = share
        else:
            gpus_per_proc = 0

        fields: dict[str, Any] = dict(framework=fw, nodes=nodes, procs_per_node=procs,
                                      gpus_per_proc=gpus_per_proc)
        # placement
        if "partition" in self.opts:
            part = self.opts["partition"].value
            if "," in part:
                raise self.error(self.line_of("partition"), "--partition", f"lists several partitions ({part})",
                                 "name one partition; a job waits in one queue")
            fields["queue"] = self.checked_name("partition", self.mapping.queue_for(part), "partitions")
        if "qos" in self.opts:
            fields["priority"] = self.checked_name("qos", self.mapping.priority_for(self.opts["qos"].value), "qos")
        selector: dict[str, str] = {}
        tolerations: tuple = ()
        if gtype:
            place = self.mapping.gpu_placement(gtype)
            if place is None:
                self.warn(L, "GPU type", f"{gtype!r} has no entry in the mapping; the job may run on any GPU "
                          f"(add gres: {{{gtype}: {{node_selector: {{…}}}}}} to the mapping file)")
            else:
                if place.resource:
                    fields["gpu_resource"] = place.resource
                selector.update(place.node_selector)
                tolerations = place.tolerations
        if "constraint" in self.opts:
            for feat in re.split(r"[&,]", self.opts["constraint"].value):
                feat = feat.strip().strip("[]()")
                if "|" in feat or "*" in feat:
                    raise self.error(self.line_of("constraint"), "--constraint", f"{feat!r}: alternatives "
                                     "and counts are not translated", "use one feature, or AND them with &")
                if feat not in self.mapping.constraints:
                    raise self.error(self.line_of("constraint"), "--constraint", f"feature {feat!r} has no "
                                     "node selector", f"add constraints: {{{feat}: {{label: value}}}} to the "
                                     "mapping file")
                selector.update(self.mapping.constraints[feat])
        if selector:
            fields["node_selector"] = tuple(selector.items())
        if tolerations:
            fields["tolerations"] = tuple(tolerations)

        # resources
        if "cpus-per-task" in self.opts or "cpus-per-task" in srun:
            fields["cpus_per_proc"] = (from_srun("cpus-per-task", units.parse_int, "CPU count")
                                       if "cpus-per-task" in srun else
                                       self.value("cpus-per-task", units.parse_int, "CPU count"))
        elif "cpus-per-gpu" in self.opts:
            cpg = self.value("cpus-per-gpu", units.parse_int, "CPU count")
            fields["cpus_per_proc"] = cpg * max(1, gpus_per_proc)
        mem_keys = [k for k in ("mem", "mem-per-cpu", "mem-per-gpu") if k in self.opts]
        if len(mem_keys) > 1:
            raise self.error(self.line_of(mem_keys[-1]), f"--{mem_keys[-1]}", "conflicts with "
                             f"--{mem_keys[0]}", "give one of --mem, --mem-per-cpu, --mem-per-gpu")
        if mem_keys:
            k = mem_keys[0]
            mib = self.value(k, units.parse_mem_mib)
            if k == "mem" and mib == 0:
                self.warn(self.line_of(k), "--mem=0", "means 'all of the node' in Slurm; no memory is requested")
            else:
                per_proc = {"mem": mib / procs if launch.kind != "python" else mib,
                            "mem-per-cpu": mib * fields.get("cpus_per_proc", 1),
                            "mem-per-gpu": mib * max(1, gpus_per_proc)}[k]
                fields["memory_per_proc"] = units.mib_to_quantity(per_proc)
        if "time" in self.opts:
            fields["max_runtime_s"] = self.value("time", units.parse_time)

        # identity, image, directory, environment
        if "job-name" in self.opts:
            fields["name"] = self.job_name(self.opts["job-name"])
        elif self.source != "<sbatch>":  # sbatch's default job name is the script's file name
            stem = slug(Path(self.source).stem)
            if stem:
                fields["name"] = stem
        image = srun.get("container-image") or (self.opts["container-image"].value
                                                if "container-image" in self.opts else None)
        image = image or self.mapping.image
        if image:
            fields["image"] = image
        workdir = (self.opts["chdir"].value if "chdir" in self.opts else None) or srun.get("chdir") \
            or srun.get("container-workdir") or (self.opts["container-workdir"].value
                                                 if "container-workdir" in self.opts else None) or body_workdir
        if workdir:
            fields["working_dir"] = workdir
        env = self.export_env("export", self.opts.get("export"))
        env.update(body_env)
        if "export" in srun:
            env.update(self.export_env("srun --export", Directive(L, "export", srun["export"], "")))
        env.update(launch.env)
        for name in launch.pass_env:
            if name in os.environ:
                env[name] = os.environ[name]
            else:
                self.warn(L, f"mpirun -x {name}", "is not set here, so it is not passed")
        env.update(slurm_env(nodes, procs, gpus_per_proc, fields.get("cpus_per_proc"), fields.get("name")))

        command = launch.command
        if launch.kind == "srun" and fw != "mpi":  # srun-started ranks often read SLURM_PROCID
            command = shell_wrap(command, SLURM_RANK_PRELUDE)
        elif needs_shell(command):
            command = shell_wrap(command)
        fields["command"] = command
        fields["env"] = tuple(sorted(env.items()))
        builder: JobBuilder[Any] = JobBuilder(None).options(**fields)
        try:
            builder.spec()  # validate now, so a bad value names the script
        except SpecError as exc:
            raise self.error(L, exc.field, exc.problem, exc.fix or "fix the directive") from None
        return builder

    def checked_name(self, option: str, value: str, section: str) -> str:
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", value) or len(value) > 63:
            raise self.error(self.line_of(option), f"--{option}", f"{value!r} is not a valid Kubernetes name",
                             f"map it in the mapping file: {section}: {{{value}: some-name}}")
        return value

    def job_name(self, d: Directive) -> str:
        name = slug(d.value)
        if not name:
            raise self.error(d.line, "--job-name", f"{d.value!r} has no usable characters",
                             "use letters, digits and '-'")
        if name != d.value:
            self.warn(d.line, "--job-name", f"{d.value!r} becomes {name!r} (a Kubernetes name)")
        return name

    def export_env(self, what: str, d: Directive | None) -> dict[str, str]:
        if d is None:
            return {}
        items = [x for x in d.value.split(",") if x]
        out: dict[str, str] = {}
        for item in items:
            if item in ("NONE", "NIL"):
                continue
            if item == "ALL":
                self.warn(d.line, f"--{d.option}=ALL" if what == "export" else what,
                          "the submitting shell's environment is not copied; list the variables "
                          "(--export=NAME or NAME=value)")
                continue
            k, eq, v = item.partition("=")
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
                raise self.error(d.line, f"--{d.option}", f"{k!r} is not a variable name",
                                 "write --export=NAME=value,OTHER")
            if eq:
                out[k] = v
            elif k in os.environ:
                out[k] = os.environ[k]
            else:
                self.warn(d.line, f"--{d.option}", f"{k} is not set here, so it is not passed")
        return out


def slurm_env(nodes: int, procs: int, gpus: int, cpus: Any, name: str | None) -> dict[str, str]:
    """The static SLURM_* variables scripts commonly read (per-rank ones come from RANK/LOCAL_RANK)."""
    env = {"SLURM_NNODES": str(nodes), "SLURM_JOB_NUM_NODES": str(nodes),
           "SLURM_NTASKS": str(nodes * procs), "SLURM_NTASKS_PER_NODE": str(procs)}
    if gpus:
        env["SLURM_GPUS_ON_NODE"] = str(gpus * procs)
    if cpus is not None:
        env["SLURM_CPUS_PER_TASK"] = str(int(cpus))
    if name:
        env["SLURM_JOB_NAME"] = name
    return env


def _prepare(text_or_path, mapping) -> tuple[_Translator, Script]:
    source, text = read_source(text_or_path, "sbatch", "<sbatch>")
    tr = _Translator(source, load_mapping(mapping))
    try:
        script = read_script(text, source)
    except DirectiveProblem as exc:
        raise tr.error(exc.line, exc.option, exc.problem, exc.fix) from None
    try:
        tr.read_directives(script)
    except DirectiveProblem as exc:
        raise tr.error(exc.line, exc.option, exc.problem, exc.fix) from None
    return tr, script


def from_sbatch(text_or_path: str | os.PathLike, mapping: Any = None, *,
                framework: str | None = None) -> JobBuilder:
    """Translate one sbatch script (text or path) into a JobBuilder.

    ``mapping``: a mapping file path, YAML text, dict or SiteMapping (see gpujobs.slurm.mapping).
    ``framework`` overrides the guess from the launch line (torchrun/srun python → ddp,
    mpirun / srun --mpi / srun BINARY → mpi). Array scripts raise; see :func:`from_sbatch_array`.
    """
    tr, script = _prepare(text_or_path, mapping)
    if "array" in tr.opts:
        spec = tr.value("array", units.parse_array)
        raise tr.error(tr.line_of("array"), "--array", f"makes {len(spec.indices)} jobs, but from_sbatch "
                       "returns one", "use gpujobs.slurm.from_sbatch_array(...) (a list of builders) or "
                       "`gpujobs sbatch FILE`, which submits every task")
    return tr.translate(script, framework)


def from_sbatch_array(text_or_path: str | os.PathLike, mapping: Any = None, *,
                      framework: str | None = None) -> list[JobBuilder]:
    """One builder per array task (a plain script gives a list of one).

    Each task gets ``SLURM_ARRAY_TASK_ID``/``_COUNT``/``_MIN``/``_MAX`` in its environment (and in
    ``$VAR`` words of its command) and the name ``<name>-<index>``. A ``%N`` throttle is not
    enforced (the queue's quota limits how many run at once): it warns.
    """
    tr, script = _prepare(text_or_path, mapping)
    if "array" not in tr.opts:
        return [tr.translate(script, framework)]
    spec = tr.value("array", units.parse_array)
    if spec.throttle:
        tr.warn(tr.line_of("array"), "--array", f"the %{spec.throttle} limit on tasks running at once is "
                "not enforced; the queue's quota decides")
    base = tr.translate(script, framework)
    first = base.spec()
    out = []
    for idx in spec.indices:
        env = {"SLURM_ARRAY_TASK_ID": str(idx), "SLURM_ARRAY_TASK_COUNT": str(len(spec.indices)),
               "SLURM_ARRAY_TASK_MIN": str(spec.indices[0]), "SLURM_ARRAY_TASK_MAX": str(spec.indices[-1])}
        name = f"{first.display_name[:40 - len(str(idx)) - 1].rstrip('-')}-{idx}"
        out.append(base.env(**env).name(name))
    return out
