"""The body of an sbatch script: its one launch line, ``export K=V`` lines (env) and ``cd DIR``
(the working directory). Other setup lines (module load, conda activate, echo …) are not run,
since the image provides the environment; they are listed in one warning. Shell control flow
and a second launch line are refused.
"""
from __future__ import annotations

import re
import shlex

from .directives import DirectiveProblem, Script
from .launch import Launch, classify, parse_launch
from .options import Options

RENDEZVOUS = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK")


def read_body(o: Options, script: Script) -> tuple[Launch, dict[str, str], str | None]:
    """(the launch line, env from ``export`` lines, the ``cd`` directory or None)."""
    launches: list[tuple[int, str]] = []
    env: dict[str, str] = {}
    workdir: str | None = None
    skipped: list[int] = []
    for ln, text in script.body:
        try:
            words = shlex.split(text, comments=True)
        except ValueError as exc:
            raise o.error(ln, "line", f"cannot be split into words ({exc})", "close the quote") from None
        kind = classify(words)
        if kind == "control":
            raise o.error(ln, words[0], "shell control flow cannot be translated",
                          "move the logic into the program the job runs, or submit one job per case")
        if kind == "launch":
            launches.append((ln, text))
        elif kind == "export":
            _read_export(o, ln, text, words, env)
        elif kind == "cd":
            target = words[1] if len(words) > 1 else ""
            if target and "$" not in target and not target.startswith("~"):
                workdir = target
            else:
                o.warn(ln, "cd", "is not a literal path; use --chdir=DIR")
        else:
            skipped.append(ln)
    if skipped:
        o.warn(skipped[0], "body", ("lines " + ", ".join(map(str, skipped)) + " are"
                                    if len(skipped) > 1 else f"line {skipped[0]} is") +
               " not run (the job runs only its launch line; the image provides the environment)")
    if not launches:
        raise o.error(len(script.body) and script.body[-1][0] or 1, "body",
                      "has no launch line", "end the script with srun, torchrun, mpirun or python")
    if len(launches) > 1:
        raise o.error(launches[1][0], "body",
                      f"has {len(launches)} launch lines (lines {', '.join(str(line) for line, _ in launches)})",
                      "gpujobs runs one program per rank: split the steps into separate jobs, "
                      "or call them from one script")
    try:
        launch = parse_launch(*launches[0])
    except DirectiveProblem as exc:
        raise o.error(exc.line, exc.option, exc.problem, exc.fix) from None
    for note in launch.notes:
        o.warn(launch.line, launch.kind, note)
    return launch, env, workdir


def _read_export(o: Options, ln: int, text: str, words: list[str], env: dict[str, str]) -> None:
    """``export K=V ...``: literal values become env; computed ones warn."""
    computed = "$" in text or "`" in text
    names = re.findall(r"(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)=", text.split("export", 1)[1])
    for k in names or words[1:2]:
        if k in RENDEZVOUS:
            o.warn(ln, f"export {k}", "not used: gpujobs sets the rendezvous itself")
        elif computed:
            o.warn(ln, f"export {k}", "its value is computed by the shell and is not translated; "
                   "set it with --export=K=V or builder.env()")
    if computed:
        return
    for w in words[1:]:
        k, eq, v = w.partition("=")
        if eq and k not in RENDEZVOUS:
            env[k] = v
        elif not eq:
            o.warn(ln, f"export {k}", "exports a shell variable, which is not translated")
