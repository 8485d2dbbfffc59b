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
from pathlib import Path
from typing import Any

from ..builder import JobBuilder
from ..errors import SpecError
from ..spec import FRAMEWORKS, slug
from . import units
from .body import read_body
from .directives import Directive, DirectiveProblem, Script, read_script
from .launch import SLURM_RANK_PRELUDE, needs_shell, shell_wrap
from .site_mapping import SiteMapping, load_mapping
from .options import Options, SbatchWarning
from .geometry import script_shape
from .source import read_source

__all__ = ["SbatchWarning", "from_sbatch", "from_sbatch_array", "slurm_env"]


class _Translator(Options):
    """Directives in force -> the JobBuilder's fields: the gang's shape (geometry.py), placement
    through the site mapping, resources, identity, image, directory and environment."""

    def __init__(self, source: str, mapping: SiteMapping):
        super().__init__(source)
        self.mapping = mapping

    def translate(self, script: Script, framework: str | None) -> JobBuilder:
        launch, body_env, body_workdir = read_body(self, script)
        srun = launch.srun
        if framework is not None and framework not in FRAMEWORKS:
            raise SpecError("framework", f"unknown framework {framework!r}", f"use one of {', '.join(FRAMEWORKS)}")
        fw = framework or launch.framework
        L = launch.line
        shape = script_shape(self, launch)
        nodes, procs, gpus_per_proc = shape.nodes, shape.procs_per_node, shape.gpus_per_proc
        gtype = shape.gpu_type

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
            fields["cpus_per_proc"] = (self.srun_value(srun, L, "cpus-per-task", units.parse_int, "CPU count")
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
            raise self.error(L, exc.field, exc.problem, exc.remedy or "fix the directive") from None
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

    ``mapping``: a mapping file path, YAML text, dict or SiteMapping (see gpujobs.slurm.site_mapping).
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
