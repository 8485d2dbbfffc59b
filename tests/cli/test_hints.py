"""Every fix hint can be run as written where it is shown: CLI commands named in hints parse
with the CLI's own argparse, Python hints name real gpujobs functions, and the CLI shows the
command (not the Python call) for hints written for Python."""
from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from gpujobs.cli import CLI_SPELLING, build_parser, cli_message
from gpujobs.errors import PYTHON as PYTHON_SPELLING, Fix

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "gpujobs").rglob("*.py")) + sorted((ROOT / "gpujobs_magic").rglob("*.py"))
#: a CLI command in hint position: in backticks, in parentheses, or after "use", "run", ": " …
COMMAND = re.compile(r"(?:`|\(|\buse |\brun |\bwith |\btry |: )(gpujobs [^`)|;,\n\"']*)")
PYTHON = re.compile(r"(?<![%\w.])gpujobs\.([a-z_][a-z_0-9.]*)\(")
#: placeholders in hints -> values argparse accepts
PLACEHOLDERS = {"JOB": "job-1", "N": "1", "FILE": "job.sbatch", "X1": "job-1", "QUEUE": "q",
                "NAME": "n", "NS": "ml", "TARGET": "train.py:main"}


def hint_strings() -> list[tuple[str, int, str]]:
    """(file, line, text) of every string literal that is not a docstring; f-string values
    become X1."""
    out = []
    for path in SOURCES:
        tree = ast.parse(path.read_text())
        docs, parts = set(), set()
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                    isinstance(body[0].value, ast.Constant):
                docs.add(id(body[0].value))
            if isinstance(node, ast.JoinedStr):
                parts.update(id(v) for v in node.values)
                text = "".join(v.value if isinstance(v, ast.Constant) else "X1" for v in node.values)
                out.append((str(path.relative_to(ROOT)), node.lineno, text))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    id(node) not in docs and id(node) not in parts:
                out.append((str(path.relative_to(ROOT)), node.lineno, node.value))
    return out


#: "gpujobs <verb>" in sentences about gpujobs, not commands
PROSE = {"places", "gives", "sets", "runs", "keeps", "sends", "knows", "needs", "announces",
         "renders", "would", "rendered"}


def cli_commands() -> list[tuple[str, str]]:
    found = []
    for where, line, text in hint_strings():
        for m in COMMAND.finditer(text):
            words = m.group(1).split()
            if len(words) > 1 and words[1] not in PROSE:
                found.append((f"{where}:{line}", m.group(1).strip()))
    return found


def parses(command: str) -> str | None:
    """None when ``command`` is a real CLI command (missing required arguments are fine: the
    hint names the verb), else argparse's complaint."""
    argv = [PLACEHOLDERS.get(w, w) for w in command.split()[1:]]
    parser = build_parser()
    complaints = []
    parser.exit = lambda status=0, message=None: complaints.append(message or "") or (_ for _ in ()).throw(SystemExit(status))  # noqa: E501
    for p in _all_parsers(parser):
        p.exit = parser.exit
    try:
        parser.parse_args(argv)
    except SystemExit:
        msg = " ".join(complaints)
        return None if "required" in msg and "unrecognized" not in msg else msg
    return None


def _all_parsers(parser):
    import argparse
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield sub
                yield from _all_parsers(sub)


def test_the_scan_finds_the_hints_it_should():
    commands = {c for _, c in cli_commands()}
    assert any(c.startswith("gpujobs cancel") for c in commands)      # sanity: the scan works
    assert any(c.startswith("gpujobs logs") for c in commands)
    assert parses("gpujobs config") is not None                       # and would catch a bogus one
    assert parses("gpujobs logs JOB --rank N") is None


@pytest.mark.parametrize("where, command", cli_commands())
def test_every_cli_command_in_a_hint_parses(where, command):
    problem = parses(command)
    assert problem is None, f"{where}: hint `{command}` is not a gpujobs command: {problem}"


def python_hints() -> list[tuple[str, str]]:
    found = []
    for where, line, text in hint_strings():
        for m in PYTHON.finditer(text):
            found.append((f"{where}:{line}", m.group(1)))
    return sorted(set(found))


@pytest.mark.parametrize("where, dotted", python_hints())
def test_every_python_hint_names_a_real_function(where, dotted):
    obj = importlib.import_module("gpujobs")
    for i, part in enumerate(dotted.split(".")):
        if not hasattr(obj, part):
            obj = importlib.import_module("gpujobs." + ".".join(dotted.split(".")[:i + 1]))
        else:
            obj = getattr(obj, part)
    assert callable(obj), f"{where}: gpujobs.{dotted} is not callable"


@pytest.mark.parametrize("command", sorted(CLI_SPELLING.commands))
def test_python_calls_become_commands_in_the_cli(command):
    fix = Fix.run(command, "JOB")
    assert fix.spell(PYTHON_SPELLING) != fix.spell(CLI_SPELLING)
    assert parses(fix.spell(CLI_SPELLING).strip("`")) is None


def test_unknown_job_in_the_cli_suggests_the_command(cli):
    r = cli("status", "nope-123")
    assert r.returncode == 4
    assert "gpujobs queue -a" in r.stderr and "gpujobs.jobs()" not in r.stderr, r.stderr


@pytest.mark.parametrize("args, shown, hidden", [
    # the fixes were the builder's Python (.image('gpujobs-mpi:py311'), max_runtime_s=3600) in the CLI
    (["plan", "train.py:main", "--framework", "mpi", "--gpus", "2", "--backend", "kubernetes"],
     "pass --image gpujobs-mpi:py", ".image("),
    (["plan", "train.py:main", "--gpus", "1", "--time", "-5"], "e.g. --time 3600", "max_runtime_s=3600"),
])
def test_spec_fixes_in_the_cli_name_the_flag(cli, tmp_path, args, shown, hidden):
    (cli.cwd / "train.py").write_text("def main():\n    return 1\n")
    r = cli(*args, env={"KUBECONFIG": str(tmp_path / "none")}, timeout=120)
    assert r.returncode == 2 and shown in r.stderr and hidden not in r.stderr, r.stderr


def test_an_unknown_kubernetes_job_in_the_cli_suggests_the_command():
    # the CLI printed "(fix: list jobs with gpujobs.jobs(backend='kubernetes'))"
    from gpujobs.backends.kubernetes.status.live import not_found
    shown = cli_message(not_found("ml/nope-1"))
    assert "`gpujobs queue -a --backend kubernetes`" in shown and "gpujobs.jobs(" not in shown, shown


def test_an_unknown_kubernetes_queue_in_each_front_end(monkeypatch):
    # the CLI printed the builder call .queue(...); Python was told to run `gpujobs queue -q NAME`
    from types import SimpleNamespace

    from gpujobs.backends.kubernetes.status import live
    from gpujobs.backends.kubernetes.submit import preflight
    from gpujobs.errors import SpecError
    monkeypatch.setattr(preflight, "local_queue_names", lambda backend, ns: ["team-a"])
    monkeypatch.setattr(live.archive, "all_statuses", lambda home, ns: [])
    with pytest.raises(SpecError) as info:
        live.check_queue(SimpleNamespace(namespace="ml", home=None), "tema-a")
    assert "use one of them (gpujobs.queue('NAME'))" in str(info.value), info.value
    shown = cli_message(info.value)
    assert "use one of them (`gpujobs queue -q NAME`)" in shown and "gpujobs.queue(" not in shown, shown
