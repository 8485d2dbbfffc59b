"""The ``gpujobs`` command: submit, plan, queue, status, logs, cancel, render, sbatch, admin, agent.

Conventions follow kubectl and squeue: ``-n/--namespace``, ``-o yaml|json|wide|name``, one
clear error line on stderr (set ``GPUJOBS_DEBUG=1`` for the traceback), and the exit codes
documented in :mod:`gpujobs.cli.exitcodes` (0 ok, 1 job failed, 2 usage/spec error,
3 backend unavailable, 4 not found, 130 interrupted).

Modules: ``commands`` (the subcommands), ``targets`` (``module:function`` targets and shapes),
``output`` (tables, yaml/json), ``exitcodes``.
"""
from __future__ import annotations

import argparse
import os
import sys

from . import exitcodes
from ..rank import contract
from ..errors import Spelling

EPILOG = ("exit codes: 0 ok · 1 job failed · 2 usage, spec or permission error · 3 backend unavailable · "
          "4 not found · 130 interrupted.  GPUJOBS_DEBUG=1 shows tracebacks.")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse's own code for usage errors)
        self.exit(exitcodes.USAGE, f"gpujobs: {message} (see `{self.prog} --help`)\n")


def _common(p: argparse.ArgumentParser, outputs=("yaml", "json", "wide", "name")) -> None:
    p.add_argument("--backend", choices=None, help="local or kubernetes (default: GPUJOBS_BACKEND, config, local)")
    p.add_argument("-n", "--namespace", help="Kubernetes namespace")
    p.add_argument("-o", "--output", choices=outputs, help="output format")


class _KindsHelp(str):
    """--kind's help, naming the Kubernetes backend's kinds when help is printed (argparse expands
    it with ``%``): their registry imports the renderers, which a command line need not load."""

    def __mod__(self, params: object) -> str:
        from ..backends.kubernetes import kind_names
        return f"{self} ({', '.join(kind_names())})"


def _job_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", metavar="TARGET", help="module:function, file.py:function, a script, or an sbatch file")
    p.add_argument("args", nargs="*", help="arguments for the function or script (after TARGET; use -- before ones starting with -)")
    p.add_argument("--gpus", type=int, help="total GPUs (0: CPU ranks, see --procs-per-node); default 1")
    p.add_argument("--nodes", type=int, help="nodes (pods) in the gang; default 1")
    p.add_argument("--procs-per-node", type=int, help="ranks per node (CPU gangs, MPI)")
    p.add_argument("--framework", choices=("ddp", "fsdp", "mpi", "ray"), help="default ddp (sbatch: guessed)")
    p.add_argument("--queue", help="queue (Kueue LocalQueue / local queue)")
    p.add_argument("--priority", help="priority class")
    p.add_argument("--name", help="job name")
    p.add_argument("--image", help="container image (Kubernetes)")
    p.add_argument("--env", action="append", metavar="KEY=VALUE", help="environment variable (repeatable)")
    p.add_argument("--volume", metavar="CLAIM[:PATH]",
                   help="mount this PersistentVolumeClaim into every pod (Kubernetes; default path "
                        "/mnt/data); checkpoints (ctx.checkpoint_dir) go there and survive preemption")
    p.add_argument("--kind", help=_KindsHelp("Kubernetes kind"))
    p.add_argument("--mapping", help="site mapping YAML for sbatch files (partition→queue, qos→priority, gres)")
    p.add_argument("--time", dest="max_runtime", metavar="SECONDS", type=time_limit,
                   help="run-time limit: seconds (3600), or sbatch's H:M:S / D-H:M:S (01:00:00; a bare "
                        "number is seconds here, minutes in sbatch); the run is stopped past it "
                        "(reason time-limit) and forecasts use it")


def time_limit(value: str) -> float:
    """``--time``: seconds, or Slurm's ``M:S``, ``H:M:S``, ``D-H[:M[:S]]`` (was: seconds only, so
    ``--time 1:00:00`` "like sbatch --time" was an invalid float)."""
    if ":" in value or "-" in value.lstrip("-"):
        from ..slurm.units import ValueProblem, parse_time
        try:
            limit = parse_time(value)
        except ValueProblem as exc:
            raise argparse.ArgumentTypeError(f"{exc.problem} (fix: {_TIME_FIX})") from None
        if limit is None:
            raise argparse.ArgumentTypeError(f"{value}: leave --time out for no limit")
        return limit
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a time limit (fix: {_TIME_FIX})") from None


# not the Slurm parser's own fix: a bare number is minutes there, seconds here
_TIME_FIX = "give seconds, e.g. --time 3600, or H:M:S, e.g. --time 01:00:00"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="gpujobs", description="Queued, gang-scheduled GPU jobs from the command line.",
                     epilog=EPILOG)
    from .. import __version__
    parser.add_argument("--version", action="version", version=f"gpujobs {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    for name, help_ in (("submit", "submit a function, script or sbatch file"),
                        ("sbatch", "submit an sbatch file (every task of an --array)")):
        p = sub.add_parser(name, help=help_, epilog=EPILOG)
        _job_options(p)
        _common(p)
        p.add_argument("--wait", action="store_true", help="wait for the end; exit 1 unless it succeeded")
        p.add_argument("-f", "--follow", action="store_true",
                       help="print the job's logs (all ranks) until it ends; implies --wait")
        p.add_argument("--progress", choices=("auto", "live", "plain"), default="auto",
                       help="progress display while waiting (auto: live on a terminal)")

    p = sub.add_parser("plan", help="what submitting would do now (admit, position, preempts, "
                       "expected start); nothing is submitted", epilog=EPILOG)
    _job_options(p)
    _common(p, outputs=("yaml", "json"))

    p = sub.add_parser("queue", help="jobs waiting and running (squeue-like)", epilog=EPILOG)
    _common(p)
    p.add_argument("-q", "--queue", help="only this queue")
    p.add_argument("-a", "--all", action="store_true", help="include finished jobs")

    p = sub.add_parser("status", help="one job's status", epilog=EPILOG)
    p.add_argument("job", nargs="+", metavar="JOB")
    _common(p)

    p = sub.add_parser("logs", help="a job's logs (all ranks, prefixed)", epilog=EPILOG)
    p.add_argument("job", metavar="JOB")
    p.add_argument("-f", "--follow", action="store_true")
    p.add_argument("--rank", type=int)
    _common(p, outputs=())

    p = sub.add_parser("stack", help="the Python stacks (all threads) of a running job's ranks",
                       epilog=EPILOG)
    p.add_argument("job", metavar="JOB")
    p.add_argument("--rank", type=int, help="only this rank")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the ranks")
    _common(p, outputs=("json", "yaml"))

    p = sub.add_parser("cancel", help="cancel jobs", epilog=EPILOG)
    p.add_argument("job", nargs="+", metavar="JOB")
    _common(p, outputs=())

    p = sub.add_parser("render", help="print the Kubernetes objects submit would create", epilog=EPILOG)
    _job_options(p)
    p.add_argument("--job-only", action="store_true",
                   help="print only the job (not the shared runtime ConfigMap and key Secret; "
                        "stderr names them)")
    _common(p, outputs=("yaml", "json"))

    p = sub.add_parser("admin", help="administrator tools", epilog=EPILOG)
    asub = p.add_subparsers(dest="admin_command", metavar="ADMIN_COMMAND", parser_class=_Parser)
    asub.required = True
    q = asub.add_parser("queues", help="Kueue ResourceFlavors, ClusterQueues, LocalQueues, priority classes")
    q.add_argument("table", nargs="?", metavar="TABLE.yaml")
    q.add_argument("--slurm-conf", metavar="FILE")
    q.add_argument("-n", "--namespace", help="namespace of the LocalQueues made from slurm.conf")
    q.add_argument("--cohort", default="slurm", help="cohort of the queues made from slurm.conf")
    q.add_argument("--table", dest="emit_table", action="store_true",
                   help="print the table made from slurm.conf (to edit) instead of the objects")
    q.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")

    q = asub.add_parser("rbac", help="the gpujobs Role and a RoleBinding of it to a user (Kubernetes)")
    q.add_argument("-n", "--namespace", required=True, help="the team's namespace")
    q.add_argument("--user", required=True, help="the Kubernetes user to bind (kubectl auth whoami)")
    q.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")

    asub.add_parser("mpi-image", help="the Dockerfile of gpujobs' MPI image (| docker build -t TAG -)")

    q = asub.add_parser("trainer-runtimes", help="gpujobs' Kubeflow Trainer ClusterTrainingRuntimes (a failing "
                        "rank fails the Trainer v2 job): gpujobs admin trainer-runtimes | kubectl apply -f -")
    q.add_argument("--image", help="the runtimes' default image (TrainJobs name their own)")
    q.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")

    p = sub.add_parser("agent", help="the local scheduler agent", epilog=EPILOG)
    agsub = p.add_subparsers(dest="agent_command", metavar="AGENT_COMMAND", parser_class=_Parser)
    agsub.required = True
    agsub.add_parser("stop", help="stop the local agent (running jobs are cancelled by it)")
    return parser


#: how the command line spells an error's fix (gpujobs.errors.Fix): the flag that sets each field,
#: the command that does what a Python call would; the rest falls back to Python's words
CLI_SPELLING = Spelling.flags(
    fields={"gpus": "--gpus {v}", "nodes": "--nodes {v}", "procs_per_node": "--procs-per-node {v}",
            "framework": "--framework {v}", "queue": "--queue {v}", "priority": "--priority {v}",
            "name": "--name {v}", "image": "--image {v}", "env": "--env {v}", "volume": "--volume {v}",
            "kind": "--kind {v}", "max_runtime_s": "--time {v}", "backend": "--backend {v}",
            "namespace": "--namespace {v}"},
    commands={"jobs": "`gpujobs queue -a`", "kubernetes-jobs": "`gpujobs queue -a --backend kubernetes`",
              "cancel": "`gpujobs cancel {v}`", "queue": "`gpujobs queue -q {v}`"})


def cli_message(exc: BaseException) -> str:
    """The error's first line as the command shows it: its fix in the command line's words, an
    unexpected error named by its type."""
    from ..errors import GpuJobsError
    text = exc.render(CLI_SPELLING) if isinstance(exc, GpuJobsError) else str(exc)
    msg = text.strip().splitlines()[0] if text.strip() else ""
    if not isinstance(exc, GpuJobsError):
        msg = f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__
    return msg


def _dispatch(args: argparse.Namespace) -> int:
    from . import commands
    if args.command == "submit":
        return commands.cmd_submit(args)
    if args.command == "sbatch":
        return commands.cmd_submit(args, force_sbatch=True)
    if args.command == "admin":
        return getattr(commands, f"cmd_admin_{args.admin_command.replace('-', '_')}")(args)
    if args.command == "agent":
        return commands.cmd_agent_stop(args)
    return getattr(commands, f"cmd_{args.command}")(args)


def _warning_line(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
    """``warnings.showwarning`` for the command: ``gpujobs: warning: <message>`` on stderr, without
    Python's source file, line number and the source line."""
    text = " ".join(str(message).split())
    (file or sys.stderr).write(f"gpujobs: warning: {text}\n")


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    args = build_parser().parse_args(argv)
    debug = os.environ.get(contract.DEBUG, "") not in ("", "0")
    import warnings
    shown = warnings.showwarning
    if not debug:  # warnings as one clean line (GPUJOBS_DEBUG=1: Python's own format)
        warnings.showwarning = _warning_line
    try:
        return _dispatch(args)
    except KeyboardInterrupt:
        sys.stderr.write("gpujobs: interrupted\n")
        return exitcodes.INTERRUPTED
    except BrokenPipeError:
        return exitcodes.OK
    except Exception as exc:  # noqa: BLE001 - the one place errors become exit codes
        if debug:
            raise
        sys.stderr.write(f"gpujobs: {cli_message(exc)}\n")
        return exitcodes.exit_code_for(exc)
    finally:
        warnings.showwarning = shown


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
