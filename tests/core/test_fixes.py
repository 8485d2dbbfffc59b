"""One Fix, three spellings: an error carries what to do (a field, an example value, an action)
and each front end writes it in its own words from its one table: Python (``str(exc)``), the CLI
(gpujobs.cli.CLI_SPELLING), the ``%%gpujob`` magic (gpujobs_magic.magics.MAGIC_SPELLING)."""
from __future__ import annotations

import argparse
import json
import shlex

import pytest
from tests.support import ipython_shell

import gpujobs
from gpujobs.backends.local import protocol
from gpujobs.cli import CLI_SPELLING, build_parser, cli_message
from gpujobs.cli import main as cli_main
from gpujobs.errors import PYTHON, Fix, PreflightError, SpecError, Spelling, WaitTimeout
from gpujobs.shape import gang_shape
from gpujobs_magic.magics import MAGIC_SPELLING, GpuJobMagics


def _error(make) -> SpecError:
    with pytest.raises(SpecError) as info:
        make()
    return info.value


# the same bad input, and what each front end shows: (python, cli, magic)
CASES = [
    ("uneven", lambda: gang_shape("ddp", 3, 2),
     "gpus: 3 GPUs cannot be split evenly over 2 nodes (fix: use a multiple of nodes, e.g. gpus=2)",
     "--gpus: 3 GPUs cannot be split evenly over 2 nodes (fix: use a multiple of --nodes, e.g. --gpus 2)",
     "--gpus: 3 GPUs cannot be split evenly over 2 nodes (fix: use a multiple of --nodes, e.g. --gpus 2)"),
    # main: the CLI said "drop procs_per_node" (gang_shape(options=True) renamed only the mpi case)
    ("ranks-vs-gpus", lambda: gang_shape("ddp", 4, 1, 3),
     "procs_per_node: ddp runs one rank per GPU (4 per node), not 3 (fix: drop procs_per_node)",
     "--procs-per-node: ddp runs one rank per GPU (4 per node), not 3 (fix: drop --procs-per-node)",
     # the cell has no --procs-per-node: Python's words
     "procs_per_node: ddp runs one rank per GPU (4 per node), not 3 (fix: drop procs_per_node)"),
    ("runtime", lambda: gpujobs.job(print).max_runtime(-5).spec(),
     "max_runtime_s: must be a positive, finite number of seconds, got -5 (fix: e.g. "
     ".max_runtime(3600), or leave it unset for no limit)",
     "--time: must be a positive, finite number of seconds, got -5 (fix: e.g. --time 3600, or leave "
     "it unset for no limit)",
     "max_runtime_s: must be a positive, finite number of seconds, got -5 (fix: e.g. "
     ".max_runtime(3600), or leave it unset for no limit)"),
]


@pytest.mark.parametrize("make, python, cli, magic", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_one_fix_is_spelled_by_each_front_end(make, python, cli, magic):
    exc = _error(make)
    assert isinstance(exc.remedy, Fix)
    assert str(exc) == exc.render(PYTHON) == python
    assert cli_message(exc) == cli
    assert exc.render(MAGIC_SPELLING) == magic


def test_the_cli_shows_its_own_words(tmp_path, monkeypatch, capsys):
    """main: ``gpujobs render … --image …-py39`` printed the builder call .image('…-py311') and
    ``--procs-per-node 3`` said "drop procs_per_node": CLI_HINTS matched neither text."""
    (tmp_path / "train.py").write_text("def main():\n    return 1\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GPUJOBS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GPUJOBS_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    assert cli_main(["render", "train.py:main", "--gpus", "4", "--procs-per-node", "3"]) == 2
    assert "(fix: drop --procs-per-node)" in capsys.readouterr().err
    assert cli_main(["render", "train.py:main", "--image", "ghcr.io/x/y:1.0-py39"]) == 2
    err = capsys.readouterr().err
    assert "(fix: --image ghcr.io/x/y:1.0-py" in err and ".image(" not in err, err


@pytest.fixture
def shell(tmp_path, monkeypatch):
    with ipython_shell(monkeypatch, tmp_path / "ipython") as sh:
        yield sh


def test_the_magic_shows_its_own_words(shell):
    """main: ``%%gpujob --gpus 0`` said "pass gpus=N" (MAGIC_HINTS had no entry for it)."""
    from IPython.core.error import UsageError
    with pytest.raises(UsageError) as info:
        shell.run_cell_magic("gpujob", "--gpus 0", "x = 1")
    assert "pass --gpus N with N >= 1" in str(info.value) and "gpus=N" not in str(info.value), info.value
    with pytest.raises(UsageError) as info:
        shell.run_cell_magic("gpujob", "--gpus 3 --nodes 2", "x = 1")
    assert str(info.value).endswith("(fix: use a multiple of --nodes, e.g. --gpus 2)"), info.value


def test_python_says_the_call_not_the_command():
    """main: the Kubernetes queue check told Python users to run ``gpujobs queue -q NAME``."""
    fix = Fix.run("queue", "NAME", "use one of them ({})")
    assert fix.spell() == "use one of them (gpujobs.queue('NAME'))"
    assert fix.spell(CLI_SPELLING) == "use one of them (`gpujobs queue -q NAME`)"
    assert callable(gpujobs.queue)


def _submit_parser() -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["submit"]


@pytest.mark.parametrize("field", sorted(CLI_SPELLING.fields))
def test_every_cli_spelling_is_a_flag_of_submit(field):
    argv = ["train.py:main", *shlex.split(Fix.set(field, "x=1" if field == "env" else "1").spell(CLI_SPELLING))]
    if field == "framework":
        argv[-1] = "mpi"
    assert _submit_parser().parse_args(argv).target == "train.py:main"


@pytest.mark.parametrize("field", sorted(MAGIC_SPELLING.fields))
def test_every_magic_spelling_is_a_flag_of_the_cell(field):
    from IPython.core import magic_arguments
    value = "mpi" if field == "framework" else "1"
    line = Fix.set(field, value).spell(MAGIC_SPELLING)
    magic_arguments.parse_argstring(GpuJobMagics.gpujob, line)  # SystemExit/UsageError if not a flag


def test_a_front_end_falls_back_to_python_for_what_it_does_not_spell():
    bare = Spelling(fields={}, commands={})
    assert Fix.set("image", "img:1", "pass {}").spell(bare) == "pass .image('img:1')"
    assert Fix.run("jobs", text="list jobs with {}").spell(bare) == "list jobs with gpujobs.jobs()"
    assert Fix.set("some_field", 3).spell(bare) == "some_field=3"
    assert Fix.say("ask the admin").spell(CLI_SPELLING) == "ask the admin"


def test_a_plain_string_fix_is_still_accepted():
    exc = SpecError("gpus", "bad", "do this")
    assert exc.fix == "do this" and exc.remedy == Fix.say("do this") and str(exc) == "gpus: bad (fix: do this)"
    assert SpecError("gpus", "bad").remedy is None and str(SpecError("gpus", "bad")) == "gpus: bad"


@pytest.mark.parametrize("exc", [
    SpecError("queue", "no such queue", Fix.set("queue", "NAME", "use one of them: {}")),
    PreflightError("WorkloadPriorityClass x", "does not exist", Fix.set("priority", "NAME", "pass {}")),
    WaitTimeout("job j still running", Fix.run("cancel", "j", "{} stops it")),
], ids=lambda e: type(e).__name__)
def test_a_fix_crosses_the_agent_socket_and_is_spelled_there(exc):
    reply = json.loads(json.dumps(protocol.error_reply(exc)))
    with pytest.raises(type(exc)) as got:
        protocol.raise_reply(reply)
    assert got.value.remedy == exc.remedy and str(got.value) == str(exc)
    assert cli_message(got.value) == cli_message(exc) != str(exc)
