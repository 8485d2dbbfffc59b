"""The rank contract (gpujobs.rank.contract): every GPUJOBS_* name and every job-folder file name is
defined there once, with a docstring; writers and the reader go through RankEnv."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from gpujobs.rank import contract
from gpujobs.rank.contract import EXIT, OUTCOME, RANK_LOG, JobFolder, RankEnv

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"GPUJOBS_[A-Z0-9_]+")
SIM_OWN = ("GPUJOBS_CRDS_DIR", "GPUJOBS_SIM_")  # the simulated cluster's own (not in the wheel)
BEFORE_LIB = {"gpujobs/backends/kubernetes/render/bootstrap_script.py": {"GPUJOBS_MPI_DNS_WAIT_S"},
              "gpujobs/tracebacks.py": {"GPUJOBS_DEBUG"}}
"""Read by the pod bootstrap where gpujobs cannot be imported (tests/k8s_render/test_shipped.py
checks each equals its contract name), and by the errors layer below the rank package
(test_the_errors_layer_spells_the_contract_s_debug_name)."""


def _names() -> dict[str, str]:
    return {v: k for k, v in vars(contract).items()
            if k.isupper() and isinstance(v, str) and NAME.fullmatch(v)}


def test_rank_env_round_trip_writes_only_what_is_set():
    told = RankEnv(job_id="j-1", framework="mpi", payload="/p", key_file="/k", key_context="j-1",
                   result_sink=contract.dir_sink("/r"), return_all=False, restarts=2,
                   command=("python", "x.py", "a b"), device="cpu")
    env = told.to_env()
    assert env[contract.RETURN_ALL] == "0" and env[contract.RESTARTS] == "2"
    assert env[contract.COMMAND] == '["python", "x.py", "a b"]'
    assert contract.TERMINATION_LOG not in env and contract.CHECKPOINT_DIR not in env
    assert RankEnv.from_env(env) == told
    assert contract.result_sink_dir(RankEnv.from_env(env).result_sink) == Path("/r")
    assert contract.result_sink_dir("log") is None
    assert RankEnv.from_env({}) == RankEnv()
    mine = {contract.PAYLOAD: "/pod/own"}
    RankEnv(payload="/fallback", job_id="j").setdefault_into(mine)
    assert mine == {contract.PAYLOAD: "/pod/own", contract.JOB_ID: "j"}  # the pod's own env wins


def test_every_name_has_a_one_line_docstring():
    tree = ast.parse((ROOT / "gpujobs" / "rank" / "contract.py").read_text())
    body = tree.body
    missing = []
    for i, node in enumerate(body):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and \
                isinstance(node.value.value, str) and (NAME.fullmatch(node.value.value)
                                                       or node.targets[0].id.endswith(("_FILE", "_DIR", "_LOG"))):
            doc = body[i + 1] if i + 1 < len(body) else None
            if not (isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant)
                    and isinstance(doc.value.value, str) and doc.value.value.strip()):
                missing.append(node.targets[0].id)
    assert missing == []


def _literal_names(path: Path) -> list[str]:
    """GPUJOBS_* names written in code as a whole string literal or a keyword argument."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and NAME.fullmatch(node.value):
            found.append(f"{node.value} (line {node.lineno})")
        elif isinstance(node, ast.keyword) and node.arg and NAME.fullmatch(node.arg):
            found.append(f"{node.arg}= (line {node.value.lineno})")
    return found


def test_no_gpujobs_name_is_spelt_outside_the_contract():
    """Launchers, runner, agent, renderers, bootstrap and simulator take the names from
    gpujobs.rank.contract (the simulator's own GPUJOBS_CRDS_DIR aside)."""
    spelt = {}
    for path in sorted([*(ROOT / "gpujobs").rglob("*.py"), *(ROOT / "gpujobs_sim").rglob("*.py"),
                        *(ROOT / "gpujobs_magic").rglob("*.py")]):
        if path.name == "contract.py" and path.parent.name == "rank":
            continue
        rel = str(path.relative_to(ROOT))
        names = [n for n in _literal_names(path) if not n.split()[0].rstrip("=").startswith(SIM_OWN)
                 and n.split()[0] not in BEFORE_LIB.get(rel, ())]
        if names:
            spelt[rel] = names
    assert spelt == {}


def test_every_name_the_package_mentions_is_defined_in_the_contract():
    known = set(_names())
    unknown = {}
    for path in sorted((ROOT / "gpujobs").rglob("*.py")):
        extra = set(NAME.findall(path.read_text())) - known - {"GPUJOBS_"}
        if extra:
            unknown[str(path.relative_to(ROOT))] = sorted(extra)
    assert unknown == {}


def test_rank_files_name_and_parse_back():
    assert OUTCOME.name(3) == "outcome-3.bin" and OUTCOME.rank_of("outcome-3.bin") == 3
    assert OUTCOME.rank_of("outcome-3.tmp") is None and EXIT.rank_of("exit-12") == 12
    assert RANK_LOG.glob == "rank-*.log" and OUTCOME.any_glob == "outcome-*"
    folder = JobFolder("/h/jobs/j")
    assert folder.result(OUTCOME, 1) == Path("/h/jobs/j/results/outcome-1.bin")
    assert folder.rank_log(0) == Path("/h/jobs/j/logs/rank-0.log")
    assert folder.payload_file.name == contract.PAYLOAD_FILE


def test_the_errors_layer_spells_the_contract_s_debug_name():
    from gpujobs import tracebacks
    assert tracebacks.DEBUG == contract.DEBUG
