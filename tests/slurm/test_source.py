"""One rule for "a file path or the text itself" (sbatch, mapping, teams YAML, slurm.conf)."""
from __future__ import annotations


import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpujobs import admin
from gpujobs.admin.teams import load_table
from gpujobs.errors import SpecError
from gpujobs.quantity import parse_quantity
from gpujobs.slurm import from_sbatch
from gpujobs.slurm.site_mapping import load_mapping
from gpujobs.slurm.source import read_source
from gpujobs.slurm.units import mib_to_quantity

LOADERS = [("sbatch", from_sbatch), ("mapping", load_mapping), ("table", load_table),
           ("slurm.conf", admin.table_from_slurm_conf)]


@pytest.mark.parametrize("what,load", LOADERS)
def test_missing_file_is_one_error_everywhere(tmp_path, what, load):
    missing = str(tmp_path / "nope.txt")
    with pytest.raises(SpecError) as err:
        load(missing)
    assert err.value.field == what
    assert err.value.problem == f"file {missing!r} does not exist"
    assert err.value.fix == f"pass the path of an existing {what} file, or the {what} text itself"


@pytest.mark.parametrize("what,load", LOADERS)
def test_a_directory_is_a_read_error(tmp_path, what, load):
    with pytest.raises(SpecError, match="cannot read") as err:
        load(tmp_path)
    assert err.value.field == what


def test_path_pathlike_and_text_give_the_same_text(tmp_path):
    f = tmp_path / "m.yaml"
    f.write_text("partitions: {gpu: a100}\n")
    assert read_source(f, "mapping") == (str(f), "partitions: {gpu: a100}\n")
    assert read_source(str(f), "mapping") == (str(f), "partitions: {gpu: a100}\n")
    assert read_source("partitions: {gpu: a100}", "mapping") == ("mapping", "partitions: {gpu: a100}")
    assert read_source("#!/bin/bash", "sbatch", "<sbatch>") == ("<sbatch>", "#!/bin/bash")
    assert read_source("NodeName=n1 CPUs=4", "slurm.conf")[0] == "slurm.conf"
    assert read_source("a\nb", "table") == ("table", "a\nb")
    assert load_mapping("partitions: {gpu: a100}").partitions == {"gpu": "a100"}


def test_not_text_is_a_type_error():
    with pytest.raises(SpecError, match="got int") as err:
        read_source(42, "mapping")
    assert err.value.field == "mapping" and "file path" in err.value.fix


@given(st.floats(min_value=0, max_value=2**24, allow_nan=False))
def test_mib_to_quantity_is_exact_to_the_kib(mib):
    """Slurm MiB -> quantity: whole KiB, at most Gi, and it parses back to the same bytes."""
    text = mib_to_quantity(mib)
    assert parse_quantity(text, "memory") == round(mib * 1024) * 1024
    assert not text.endswith(("Ti", "Pi", "Ei"))


def test_long_one_line_text_is_text_not_a_file_name():
    text = "partitions: {" + ", ".join(f"p{i}: q{i}" for i in range(40)) + "}"
    assert len(text) > 255
    assert read_source(text, "mapping") == ("mapping", text)
