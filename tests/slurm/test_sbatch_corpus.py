"""Every realistic sbatch script under corpus/ translates as corpus/expected.yaml says."""
from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import yaml

from gpujobs.builder import JobBuilder
from gpujobs.errors import SpecError
from gpujobs.slurm import SbatchWarning, from_sbatch, from_sbatch_array

CORPUS = Path(__file__).parent / "corpus"
EXPECTED = yaml.safe_load((CORPUS / "expected.yaml").read_text())


def test_every_script_has_an_expectation():
    assert sorted(p.name for p in CORPUS.glob("*.sbatch")) == sorted(EXPECTED)


def _translate(name: str, exp: dict):
    mapping = CORPUS / exp["mapping"] if "mapping" in exp else None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = from_sbatch(CORPUS / name, mapping)
        except SpecError as exc:
            result = exc
    return result, [str(w.message) for w in caught if issubclass(w.category, SbatchWarning)]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_script(name):
    exp = EXPECTED[name]
    result, warned = _translate(name, exp)
    if "error" in exp:
        assert isinstance(result, SpecError), f"{name} translated but should fail"
        msg = str(result)
        assert msg.startswith(f"{CORPUS / name}:{exp['error']['line']} "), msg
        assert result.line == exp["error"]["line"]
        for w in exp["error"]["words"]:
            assert w in msg, (w, msg)
        assert result.fix, "every refusal says how to fix it"
        return
    assert isinstance(result, JobBuilder), result
    spec = result.spec()
    for field, want in exp["ok"].items():
        got = getattr(spec, field)
        if field == "command":
            got = list(got)
        assert got == want, (field, got, want)
    env = spec.env_dict()
    for k, v in exp.get("env", {}).items():
        assert env.get(k) == v, (k, env)
    for k in exp.get("no_env", []):
        assert k not in env
    for piece in exp.get("command_contains", []):
        assert piece in spec.command[-1], spec.command
    if "node_selector" in exp:
        assert dict(spec.node_selector) == exp["node_selector"]
    for w in exp.get("warns", []):
        assert any(w in m for m in warned), (w, warned)


def test_nothing_is_dropped_silently():
    """Every directive line of every translatable script either shaped the job or warned."""
    # single_gpu: --output is the only directive without a field; it warned (checked above).
    _, warned = _translate("mpi_srun.sbatch", EXPECTED["mpi_srun.sbatch"])
    lines = {int(m.split(":")[1].split()[0]) for m in warned}
    assert {9, 10, 12} <= lines


def test_array_gives_one_builder_per_task():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        builders = from_sbatch_array(CORPUS / "array.sbatch")
    assert any("%2" in str(w.message) for w in caught)
    specs = [b.spec() for b in builders]
    assert [s.env_dict()["SLURM_ARRAY_TASK_ID"] for s in specs] == ["0", "3", "6", "9"]
    assert [s.name for s in specs] == ["sweep-0", "sweep-3", "sweep-6", "sweep-9"]
    assert {s.env_dict()["SLURM_ARRAY_TASK_COUNT"] for s in specs} == {"4"}
    # $SLURM_ARRAY_TASK_ID in the command is expanded by a shell at run time
    assert specs[0].command[:2] == ("bash", "-c")
    assert '"$SLURM_ARRAY_TASK_ID"' in specs[0].command[2]
    assert all(s.max_runtime_s == 1800 and s.total_gpus == 1 for s in specs)


def test_plain_script_through_array_api_is_one_builder():
    assert len(from_sbatch_array(CORPUS / "single_gpu.sbatch")) == 1


def test_text_and_path_give_the_same_spec():
    text = (CORPUS / "mpi_mpirun_gpu.sbatch").read_text()
    from_path = from_sbatch(str(CORPUS / "mpi_mpirun_gpu.sbatch")).spec()
    assert from_path.name == "mpi-mpirun-gpu"   # sbatch's default job name: the file name
    assert from_path.env_dict()["SLURM_JOB_NAME"] == "mpi-mpirun-gpu"
    stripped = from_path.replace(name=None, env=tuple(e for e in from_path.env if e[0] != "SLURM_JOB_NAME"))
    assert from_sbatch(text).spec() == stripped


def test_text_errors_name_the_line():
    with pytest.raises(SpecError, match=r"^<sbatch>:3 --nodes"):
        from_sbatch("#!/bin/bash\n#SBATCH --gpus=1\n#SBATCH --nodes=zero\npython x.py\n")


def test_missing_file_is_a_spec_error():
    with pytest.raises(SpecError, match="does not exist"):
        from_sbatch("no/such/file.sbatch")


def test_framework_override():
    b = from_sbatch(CORPUS / "ddp_srun_torchrun.sbatch", framework="fsdp")
    assert b.spec().framework == "fsdp"
    with pytest.raises(SpecError, match="framework"):
        from_sbatch(CORPUS / "ddp_srun_torchrun.sbatch", framework="jax")
