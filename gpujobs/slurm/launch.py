"""Recognise the body's launch line (srun, torchrun, mpirun/mpiexec, python) and what it starts."""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from .directives import SBATCH_OPTIONS, DirectiveProblem, split_options

PYTHONS = re.compile(r"^(.*/)?python(3(\.\d+)?)?$")
LAUNCHERS = ("srun", "torchrun", "mpirun", "mpiexec")
CONTROL_WORDS = {"if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done",
                 "case", "esac", "function", "{", "}", "select"}
SETUP_WORDS = {"module", "ml", "source", ".", "conda", "mamba", "micromamba", "set", "ulimit",
               "echo", "printf", "hostname", "nvidia-smi", "date", "mkdir", "sleep", "umask",
               "scontrol", "sinfo", "squeue", "env", "printenv", "pwd", "true", "nproc", "free",
               "unset", "shopt", "trap", "rm", "cp", "ls", "cat", "touch", "ln", "deactivate"}
PER_RANK_SLURM = ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID")

# srun options: long -> (short, takes value). Those marked in SRUN_SHAPE shape the gang.
SRUN_OPTIONS: dict[str, tuple[str | None, bool]] = {
    "nodes": ("N", True), "ntasks": ("n", True), "ntasks-per-node": (None, True),
    "cpus-per-task": ("c", True), "gpus-per-task": (None, True), "gpus": ("G", True),
    "gpus-per-node": (None, True), "gres": (None, True), "mpi": (None, True),
    "export": (None, True), "label": ("l", False), "unbuffered": ("u", False),
    "kill-on-bad-exit": ("K", False), "cpu-bind": (None, True), "gpu-bind": (None, True),
    "mem-bind": (None, True), "distribution": ("m", True), "container-image": (None, True),
    "container-mounts": (None, True), "container-workdir": (None, True),
    "container-name": (None, True), "no-container-mount-home": (None, False),
    "container-mount-home": (None, False), "output": ("o", True), "error": ("e", True),
    "job-name": ("J", True), "time": ("t", True), "mem": (None, True), "overlap": (None, False),
    "exact": (None, False), "wait": ("W", True), "chdir": ("D", True), "hint": (None, True),
    "cpus-per-gpu": (None, True), "mem-per-cpu": (None, True), "mem-per-gpu": (None, True),
    "verbose": ("v", False), "quiet": ("Q", False),
}
SRUN_SHORTS = {s: name for name, (s, _) in SRUN_OPTIONS.items() if s}
SRUN_USED = {"nodes", "ntasks", "ntasks-per-node", "cpus-per-task", "gpus-per-task", "gpus",
             "gpus-per-node", "gres", "mpi", "export", "container-image", "container-workdir", "chdir"}
TORCHRUN_USED = {"nnodes", "nproc-per-node", "module", "m", "no-python", "max-restarts", "standalone"}
MPIRUN_USED = {"np", "n", "c", "npernode", "N", "ppn", "x", "genv", "allow-run-as-root", "oversubscribe"}
# torchrun options taking no value; every other --option takes one
TORCHRUN_FLAGS = {"standalone", "no-python", "module", "run-path", "m"}
# Open MPI / MPICH options: name (without dashes) -> number of values
MPIRUN_OPTIONS = {"np": 1, "n": 1, "c": 1, "npernode": 1, "N": 1, "ppn": 1, "map-by": 1, "bind-to": 1,
                  "rank-by": 1, "x": 1, "mca": 2, "gmca": 2, "H": 1, "host": 1, "hostfile": 1,
                  "machinefile": 1, "wdir": 1, "oversubscribe": 0, "allow-run-as-root": 0,
                  "report-bindings": 0, "display-map": 0, "tag-output": 0, "timestamp-output": 0,
                  "bind-to-core": 0, "bind-to-socket": 0, "use-hwthread-cpus": 0, "q": 0,
                  "quiet": 0, "v": 0, "output-filename": 1, "genv": 2, "env": 2, "launcher": 1}


@dataclass
class Launch:
    """What the launch line starts."""
    line: int
    kind: str                        # srun | torchrun | mpirun | python | program
    command: tuple[str, ...]         # the per-rank program, launchers removed
    framework: str                   # ddp | mpi
    srun: dict[str, str] = field(default_factory=dict)   # srun options (long name -> value)
    nnodes: str | None = None        # torchrun --nnodes as written
    nproc_per_node: str | None = None
    np: int | None = None            # mpirun -np
    per_node: int | None = None      # mpirun -npernode
    env: dict[str, str] = field(default_factory=dict)
    pass_env: list[str] = field(default_factory=list)   # mpirun -x NAME (value from outside)
    notes: list[str] = field(default_factory=list)      # things translated approximately


def first_word(words: list[str]) -> tuple[str, list[str]]:
    """Skip ``VAR=x`` prefixes, ``exec`` and ``time``; return (command word, rest)."""
    i = 0
    while i < len(words) and (re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[i])
                              or words[i] in ("exec", "time", "command", "nohup")):
        i += 1
    return (words[i], words[i + 1:]) if i < len(words) else ("", [])


def classify(words: list[str]) -> str:
    """launch | control | export | cd | setup | other."""
    cmd, rest = first_word(words)
    if not cmd:
        return "setup"
    if cmd in CONTROL_WORDS or cmd.endswith("()") or (rest[:1] == ["()"]):
        return "control"
    if cmd in LAUNCHERS or PYTHONS.match(cmd) or cmd in ("accelerate", "deepspeed"):
        return "launch"
    if cmd == "export":
        return "export"
    if cmd == "cd":
        return "cd"
    if cmd in SETUP_WORDS or cmd == "wait":
        return "setup"
    return "other"


def _problem(line: int, what: str, problem: str, fix: str) -> DirectiveProblem:
    return DirectiveProblem(line, what, problem, fix)


def _split_srun(line: int, words: list[str]) -> tuple[dict[str, str], list[str], list[str]]:
    """srun options → (options, program words, notes)."""
    opts: list[str] = []
    i = 0
    notes: list[str] = []
    while i < len(words) and words[i].startswith("-"):
        w = words[i]
        name = w[2:].split("=", 1)[0] if w.startswith("--") else SRUN_SHORTS.get(w[1:2], "")
        if not name or name not in SRUN_OPTIONS:
            if w.startswith("--") and "=" in w:
                notes.append(f"srun option {w} is not translated")
                i += 1
                continue
            raise _problem(line, w, f"srun option {w!r} is not understood",
                           "remove it, or write it as --option=value so it can be skipped")
        takes = SRUN_OPTIONS[name][1]
        opts.append(w)
        inline = ("=" in w) if w.startswith("--") else len(w) > 2
        if takes and not inline:
            i += 1
            if i < len(words):
                opts.append(words[i])
        i += 1
    parsed = split_options(line, opts, SRUN_OPTIONS, SRUN_SHORTS, where="srun")
    return {d.option: d.value for d in parsed}, words[i:], notes


def _split_torchrun(line: int, words: list[str]) -> tuple[dict[str, str], list[str]]:
    opts: dict[str, str] = {}
    i = 0
    while i < len(words) and words[i].startswith("-"):
        w = words[i]
        name, eq, value = w.lstrip("-").partition("=")
        name = name.replace("_", "-")
        if name in TORCHRUN_FLAGS:
            opts[name] = "1"
            i += 1
            if name in ("module", "m"):
                break
            continue
        if not eq:
            i += 1
            if i >= len(words):
                raise _problem(line, w, f"torchrun option {w!r} is missing its value", f"write {w}=VALUE")
            value = words[i]
        opts[name] = value
        i += 1
    return opts, words[i:]


def _split_mpirun(line: int, words: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    opts: dict[str, list[str]] = {}
    i = 0
    while i < len(words) and words[i].startswith("-"):
        w = words[i]
        name, eq, value = w.lstrip("-").partition("=")
        if name not in MPIRUN_OPTIONS:
            raise _problem(line, w, f"mpirun option {w!r} is not understood",
                           "remove it; gpujobs places the ranks itself")
        n = MPIRUN_OPTIONS[name]
        vals = [value] if eq else words[i + 1:i + 1 + n]
        if len(vals) < n:
            raise _problem(line, w, f"mpirun option {w!r} is missing its value", f"give {w} a value")
        opts.setdefault(name, []).extend(vals)
        i += 1 + (0 if eq else n)
    return opts, words[i:]


def _python_command(line: int, cmd: str, rest: list[str]) -> tuple[str, ...]:
    if not rest:
        raise _problem(line, cmd, "python starts no script", "give a script or -m module to run")
    return ("python", *rest)


def parse_launch(line: int, text: str) -> Launch:
    """Parse one launch line (already known to be one)."""
    try:
        words = shlex.split(text, comments=True)
    except ValueError as exc:
        raise _problem(line, "launch line", f"cannot be split into words ({exc})", "close the quote") from None
    if any(w in ("|", "||", "&&", ";", "&") or w.startswith((">", "<", "2>", "1>")) for w in words):
        raise _problem(line, "launch line", "pipes, redirections and command lists cannot be translated",
                       "launch one program; gpujobs keeps each rank's output (gpujobs logs JOB)")
    env: dict[str, str] = {}
    for w in words:
        m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", w)
        if not m:
            break
        env[m.group(1)] = m.group(2)
    cmd, rest = first_word(words)
    srun: dict[str, str] = {}
    notes: list[str] = []
    kind = "program"
    if cmd == "srun":
        srun, rest, notes = _split_srun(line, rest)
        ignored = sorted(k for k in srun if k not in SRUN_USED)
        if ignored:
            notes.append("srun options " + ", ".join("--" + k for k in ignored) + " are not translated")
        if not rest:
            raise _problem(line, "srun", "srun starts no program", "give the program after srun's options")
        cmd, rest = rest[0], rest[1:]
        kind = "srun"
    launch = Launch(line, kind, (), "ddp", srun=srun, env=env, notes=notes)
    if cmd in ("accelerate", "deepspeed"):
        raise _problem(line, cmd, f"{cmd} launch lines are not translated",
                       "launch the training script with torchrun (same arguments) or srun python")
    if cmd == "torchrun" or (PYTHONS.match(cmd) and rest[:2] in (["-m", "torch.distributed.run"],
                                                                ["-m", "torch.distributed.launch"])):
        if cmd != "torchrun":
            rest = rest[2:]
        opts, prog = _split_torchrun(line, rest)
        if not prog:
            raise _problem(line, "torchrun", "torchrun starts no script", "give the training script")
        launch.kind = "torchrun"
        launch.nnodes = opts.get("nnodes")
        dropped = sorted(k for k in opts if k not in TORCHRUN_USED)
        if dropped:
            launch.notes.append("torchrun options " + ", ".join("--" + k for k in dropped) +
                                " are replaced by gpujobs' own rendezvous and rank placement")
        launch.nproc_per_node = opts.get("nproc-per-node")
        if opts.get("max-restarts", "0") not in ("0", ""):
            launch.notes.append("torchrun --max-restarts is not translated (preempted jobs are "
                                "requeued by the queue instead)")
        if "no-python" in opts:
            launch.command = tuple(prog)
        elif "module" in opts or "m" in opts:
            launch.command = ("python", "-m", *prog)
        else:
            launch.command = ("python", *prog)
        return launch
    if cmd in ("mpirun", "mpiexec"):
        mopts, prog = _split_mpirun(line, rest)  # option -> its values (given more than once)
        dropped = sorted(k for k in mopts if k not in MPIRUN_USED)
        if dropped:
            launch.notes.append(f"{cmd} options " + ", ".join(("-" if len(k) == 1 else "--") + k for k in dropped) +
                                " are not translated (gpujobs places the ranks)")
        if not prog:
            raise _problem(line, cmd, f"{cmd} starts no program", "give the program after the options")
        launch.kind, launch.framework = "mpirun", "mpi"
        for name in ("np", "n", "c"):
            if name in mopts:
                launch.np = _count(line, f"{cmd} -{name}", mopts[name][-1])
        for name in ("npernode", "N", "ppn"):
            if name in mopts:
                launch.per_node = _count(line, f"{cmd} -{name}", mopts[name][-1])
        for item in mopts.get("x", []):
            k, eq, v = item.partition("=")
            if eq:
                launch.env[k] = v
            else:
                launch.pass_env.append(k)
        for k, v in zip(mopts.get("genv", [])[::2], mopts.get("genv", [])[1::2]):
            launch.env[k] = v
        launch.command = (("python", *prog[1:]) if PYTHONS.match(prog[0]) else tuple(prog))
        return launch
    if PYTHONS.match(cmd):
        launch.command = _python_command(line, cmd, rest)
        if launch.kind != "srun":
            launch.kind = "python"
        mpi = srun.get("mpi", "none")
        launch.framework = "mpi" if mpi not in ("none", "") else "ddp"
        return launch
    if launch.kind == "srun":
        launch.command = (cmd, *rest)
        launch.framework = "ddp" if srun.get("mpi", "") == "none" else "mpi"
        return launch
    raise _problem(line, cmd, f"{cmd!r} is not a launcher gpujobs knows",
                   "launch with srun, torchrun, mpirun or python")


def _count(line: int, what: str, value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise _problem(line, what, f"{value!r} is not a positive rank count",
                       "write a number here; gpujobs needs a fixed gang size")
    return int(value)


def needs_shell(command: tuple[str, ...]) -> bool:
    return any("$" in w or "`" in w for w in command)


def shell_wrap(command: tuple[str, ...], prelude: str = "") -> tuple[str, ...]:
    """``bash -c`` the command, quoting each word in double quotes so ``$VARS`` still expand."""
    def q(w: str) -> str:
        if re.fullmatch(r"[A-Za-z0-9_./=:,@%+-]+", w):
            return w
        return '"' + w.replace("\\", "\\\\").replace('"', '\\"') + '"'
    body = "exec " + " ".join(q(w) for w in command)
    return ("bash", "-c", f"{prelude}{body}")


SLURM_RANK_PRELUDE = ('export SLURM_PROCID="${RANK:-0}" SLURM_LOCALID="${LOCAL_RANK:-0}" '
                      'SLURM_NODEID="${GROUP_RANK:-${NODE_RANK:-0}}"; ')

__all__ = ["Launch", "parse_launch", "classify", "first_word", "needs_shell", "shell_wrap",
           "SBATCH_OPTIONS", "PER_RANK_SLURM", "SLURM_RANK_PRELUDE"]
