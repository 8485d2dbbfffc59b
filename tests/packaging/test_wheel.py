"""The wheel built from pyproject.toml ships the product only: no simulated cluster, no CRD reader."""
from __future__ import annotations

import re
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_holds_no_simulator_code(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith((".dist-info", ".data"))}
    assert tops == {"gpujobs", "gpujobs_magic"}, tops
    assert "gpujobs/backends/kubernetes/render/job.py" in names  # the product is there
    assert {"gpujobs/py.typed", "gpujobs_magic/py.typed"} <= set(names)  # its annotations too (PEP 561)
    sim_files = [n for n in names if "gpujobs_sim" in n or n.startswith("gpujobs/sim/") or
                 n.endswith(("/crds.py", "/cel.py", "/apiserver.py", "/kubelet.py"))]
    assert sim_files == []
    # no shipped module reads the CRD folder of a checkout at run time
    z = zipfile.ZipFile(wheel)
    readers = [n for n in names if n.endswith(".py") and
               re.search(rb"GPUJOBS_CRDS_DIR|[\"']shared[\"']\s*/|crds_dir\(|import crds", z.read(n))]
    assert readers == []
