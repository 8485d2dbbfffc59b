"""Read an sbatch script: its ``#SBATCH`` directives (with line numbers) and its body."""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field

# canonical long option -> (short alias, takes a value)
SBATCH_OPTIONS: dict[str, tuple[str | None, bool]] = {
    # translated into the job
    "job-name": ("J", True), "partition": ("p", True), "qos": ("q", True),
    "nodes": ("N", True), "ntasks": ("n", True), "ntasks-per-node": (None, True),
    "gpus": ("G", True), "gpus-per-node": (None, True), "gpus-per-task": (None, True),
    "gres": (None, True), "cpus-per-task": ("c", True), "cpus-per-gpu": (None, True),
    "mem": (None, True), "mem-per-cpu": (None, True), "mem-per-gpu": (None, True),
    "time": ("t", True), "array": ("a", True), "output": ("o", True), "error": ("e", True),
    "chdir": ("D", True), "export": (None, True), "constraint": ("C", True),
    "container-image": (None, True), "container-workdir": (None, True),
    "container-mounts": (None, True),
    # accepted with a warning (no effect on where or how the job runs)
    "mail-user": (None, True), "mail-type": (None, True), "account": ("A", True),
    "comment": (None, True), "open-mode": (None, True), "requeue": (None, False),
    "no-requeue": (None, False), "exclusive": (None, False), "signal": (None, True),
    "nice": (None, True), "wckey": (None, True), "parsable": (None, False),
    "hint": (None, True), "distribution": ("m", True), "threads-per-core": (None, True),
    "cores-per-socket": (None, True), "sockets-per-node": (None, True),
    "gpu-bind": (None, True), "cpu-bind": (None, True), "mem-bind": (None, True),
    "gpu-freq": (None, True), "time-min": (None, True), "kill-on-invalid-dep": (None, True),
    "input": ("i", True), "quiet": ("Q", False), "verbose": ("v", False),
    "get-user-env": (None, False), "propagate": (None, True), "export-file": (None, True),
    "switches": (None, True), "tmp": (None, True),
    # refused: they change semantics gpujobs cannot keep
    "dependency": ("d", True), "begin": ("b", True), "hold": ("H", False),
    "nodelist": ("w", True), "exclude": ("x", True), "reservation": (None, True),
    "licenses": ("L", True), "wait": ("W", False), "deadline": (None, True),
    "clusters": ("M", True), "test-only": (None, False), "overcommit": ("O", False),
    "oversubscribe": ("s", False), "contiguous": (None, False), "wrap": (None, True),
    "het-job": (None, True), "batch": (None, True), "burst-buffer": (None, True),
}
SHORT_OPTIONS = {short: long for long, (short, _) in SBATCH_OPTIONS.items() if short}


@dataclass(frozen=True)
class Directive:
    line: int
    option: str   # canonical long name
    value: str    # "" for flags
    text: str     # as written, for messages


@dataclass
class Script:
    """A parsed script: directives in order and logical body lines (continuations joined)."""
    source: str
    directives: list[Directive] = field(default_factory=list)
    body: list[tuple[int, str]] = field(default_factory=list)
    late_directives: list[int] = field(default_factory=list)


class DirectiveProblem(ValueError):
    def __init__(self, line: int, option: str, problem: str, fix: str):
        self.line, self.option, self.problem, self.fix = line, option, problem, fix
        super().__init__(problem)


def split_options(line: int, words: list[str], known: dict[str, tuple[str | None, bool]],
                  shorts: dict[str, str], where: str = "#SBATCH") -> list[Directive]:
    """getopt-style split of ``words`` into Directives; unknown options raise DirectiveProblem."""
    out: list[Directive] = []
    i = 0
    while i < len(words):
        w = words[i]
        if w.startswith("--") and len(w) > 2:
            name, eq, value = w[2:].partition("=")
            if name not in known:
                raise DirectiveProblem(line, "--" + name, f"unknown {where} option {('--' + name)!r}",
                                       "remove it or check `man sbatch` for the spelling")
            takes = known[name][1]
            if takes and not eq:
                if i + 1 >= len(words):
                    raise DirectiveProblem(line, "--" + name, "is missing its value",
                                           f"write --{name}=VALUE")
                i += 1
                value = words[i]
            elif not takes and eq:
                raise DirectiveProblem(line, "--" + name, f"takes no value (got {value!r})",
                                       f"write plain --{name}")
            out.append(Directive(line, name, value, w))
        elif w.startswith("-") and len(w) >= 2 and w[1] != "-":
            short = w[1]
            if short not in shorts:
                raise DirectiveProblem(line, "-" + short, f"unknown {where} option {('-' + short)!r}",
                                       "remove it or check `man sbatch` for the spelling")
            name = shorts[short]
            value = w[2:]
            if known[name][1]:
                if value.startswith("="):
                    value = value[1:]
                if not value:
                    if i + 1 >= len(words):
                        raise DirectiveProblem(line, "-" + short, "is missing its value",
                                               f"write -{short} VALUE")
                    i += 1
                    value = words[i]
            elif value:
                raise DirectiveProblem(line, "-" + short, f"takes no value (got {value!r})",
                                       f"write plain -{short}")
            out.append(Directive(line, name, value, w))
        else:
            raise DirectiveProblem(line, w, f"{w!r} is not an option",
                                   f"each {where} word must be an option such as --nodes=2")
        i += 1
    return out


def read_script(text: str, source: str = "<sbatch>") -> Script:
    """Split ``text`` into directives (until the first command, as sbatch does) and body lines."""
    script = Script(source)
    lines = text.splitlines()
    in_body = False
    i = 0
    while i < len(lines):
        lineno = i + 1
        raw = lines[i]
        # join backslash continuations into one logical line numbered by its first line
        while raw.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            raw = raw.rstrip()[:-1] + " " + lines[i]
        i += 1
        stripped = raw.strip()
        if stripped.startswith("#SBATCH"):
            rest = stripped[len("#SBATCH"):]
            if rest and not rest[0].isspace():
                raise DirectiveProblem(lineno, stripped.split()[0],
                                       f"{stripped.split()[0]!r} is not a directive",
                                       "write '#SBATCH --option=value' (a space after #SBATCH)")
            if in_body:
                script.late_directives.append(lineno)
                continue
            try:
                words = shlex.split(rest, comments=True)
            except ValueError as exc:
                raise DirectiveProblem(lineno, "#SBATCH", f"cannot be split into words ({exc})",
                                       "close the quote on this line") from None
            if not words:
                raise DirectiveProblem(lineno, "#SBATCH", "has no option", "remove the empty #SBATCH line")
            script.directives.extend(split_options(lineno, words, SBATCH_OPTIONS, SHORT_OPTIONS))
            continue
        if not stripped or stripped.startswith("#"):
            continue
        in_body = True
        script.body.append((lineno, stripped))
    return script
