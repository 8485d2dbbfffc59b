"""The fixed public names (issue 32): each one the README's API and the architecture guide spell as
``gpujobs.NAME`` is an attribute of ``import gpujobs`` and listed in ``gpujobs.__all__``."""
from __future__ import annotations

import re
from pathlib import Path

import gpujobs

ROOT = Path(__file__).resolve().parents[2]

PUBLIC_NAMES = (
    # functions and types of the Public API
    "submit", "job", "jobs", "attach", "queue", "usage", "context",
    "JobBuilder", "JobSpec", "Job", "JobStatus", "JobEvent", "GpuSample", "Plan", "JobContext",
    # modules a caller reaches as gpujobs.X.Y with no other import
    "errors", "checkpoint", "fsdp", "slurm",
)
"""The architecture guide's Public API, names users, examples and outside checks rely on."""


def readme_names() -> set[str]:
    """``gpujobs.NAME(`` calls and ``gpujobs.NAME.attr`` uses in the README's code and prose, less
    the module paths its Layout section names (``gpujobs.backends.local``…)."""
    text = (ROOT / "README.md").read_text()
    called = set(re.findall(r"\bgpujobs\.([A-Za-z_]\w*)\(", text))
    lazy = set(re.findall(r"\bgpujobs\.(checkpoint|fsdp|slurm)\.\w+", text))
    return called | lazy


def test_every_public_name_is_exported_and_in_all():
    names = set(PUBLIC_NAMES) | readme_names()
    assert readme_names() <= set(PUBLIC_NAMES), "a README name missing from PUBLIC_NAMES"
    missing_attr = sorted(n for n in names if not hasattr(gpujobs, n))
    missing_all = sorted(names - set(gpujobs.__all__))
    assert (missing_attr, missing_all) == ([], [])


def test_all_lists_only_names_that_exist():
    assert sorted(n for n in gpujobs.__all__ if not hasattr(gpujobs, n)) == []
    assert len(gpujobs.__all__) == len(set(gpujobs.__all__))
