"""Slurm value syntax and the site mapping file."""
from __future__ import annotations

import warnings

import pytest

from gpujobs.errors import SpecError
from gpujobs.slurm import from_sbatch, load_mapping
from gpujobs.slurm import units


@pytest.mark.parametrize("text,secs", [("90", 5400), ("5:30", 330), ("01:30:00", 5400),
                                       ("2-0", 172800), ("1-12:30", 131400), ("1-00:00:01", 86401)])
def test_time(text, secs):
    assert units.parse_time(text) == secs


@pytest.mark.parametrize("text", ["UNLIMITED", "infinite"])
def test_unlimited_time(text):
    assert units.parse_time(text) is None


@pytest.mark.parametrize("text", ["", "1h", "1:2:3:4", "-5", "0"])
def test_bad_time(text):
    with pytest.raises(units.ValueProblem):
        units.parse_time(text)


@pytest.mark.parametrize("text,mib", [("4000", 4000), ("64G", 65536), ("1T", 1048576),
                                      ("512K", 0.5), ("2gb", 2048)])
def test_memory(text, mib):
    assert units.parse_mem_mib(text) == mib


def test_quantities():
    assert units.mib_to_quantity(65536) == "64Gi"
    assert units.mib_to_quantity(1536) == "1536Mi"
    assert units.mib_to_quantity(0.5) == "512Ki"


def test_gres():
    assert units.parse_gres("gpu") == (units.GpuRequest(1), [])
    assert units.parse_gres("gpu:4") == (units.GpuRequest(4), [])
    assert units.parse_gres("gpu:v100") == (units.GpuRequest(1, "v100"), [])
    assert units.parse_gres("gpu:a100:8(S:0-1),nvme:1") == (units.GpuRequest(8, "a100"), ["nvme:1"])
    with pytest.raises(units.ValueProblem):
        units.parse_gres("gpu:1,gpu:2")


def test_array():
    assert units.parse_array("0-15:4").indices == (0, 4, 8, 12)
    assert units.parse_array("1,3,5-6%2") == units.ArraySpec((1, 3, 5, 6), 2)
    for bad in ("5-1", "a-b", "1-3:0", "0-100000", "1%x"):
        with pytest.raises(units.ValueProblem):
            units.parse_array(bad)


SCRIPT = "#!/bin/bash\n#SBATCH -p {part}\n#SBATCH -q {qos}\n#SBATCH --gres=gpu:{gtype}:2\npython t.py\n"


def test_mapping_overrides_and_mig(tmp_path):
    m = tmp_path / "m.yaml"
    m.write_text("partitions: {Big_GPU: team-b}\nqos: {urgent: high}\n"
                 "gres: {a100_small: {mig: 2g.20gb}, l4: {resource: nvidia.com/gpu, "
                 "tolerations: [{key: l4, operator: Exists}]}}\n")
    spec = from_sbatch(SCRIPT.format(part="Big_GPU", qos="urgent", gtype="a100_small"), m).spec()
    assert (spec.queue, spec.priority, spec.gpu_resource) == ("team-b", "high", "nvidia.com/mig-2g.20gb")
    spec = from_sbatch(SCRIPT.format(part="Big_GPU", qos="urgent", gtype="l4"), m).spec()
    assert spec.tolerations == ({"key": "l4", "operator": "Exists"},)


def test_unmapped_partition_with_bad_name_says_how_to_map():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(SpecError, match=r"<sbatch>:2 --partition.*partitions: \{Big_GPU"):
            from_sbatch(SCRIPT.format(part="Big_GPU", qos="x", gtype="v100"))


@pytest.mark.parametrize("text,words", [
    ("queues: {a: b}", "not a mapping section"),
    ("gres: {a100: {flavor: nope}}", "not in `flavors`"),
    ("gres: {a100: {colour: red}}", "unknown key"),
    ("partitions: [a, b]", "must be a mapping"),
    ("partitions: {a: [}", "not valid YAML"),
])
def test_bad_mapping(tmp_path, text, words):
    m = tmp_path / "m.yaml"
    m.write_text(text + "\n")
    with pytest.raises(SpecError, match=words.replace("[", r"\[").replace("`", "`")):
        load_mapping(m)


def test_unknown_constraint_refused():
    text = "#!/bin/bash\n#SBATCH --gpus=1\n#SBATCH -C skylake\npython t.py\n"
    with pytest.raises(SpecError, match=r"<sbatch>:3 --constraint.*skylake"):
        from_sbatch(text)
