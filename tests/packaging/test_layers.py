"""The import-linter contract on the rank package names every other gpujobs module: a module
added to gpujobs is forbidden to the rank package unless it is placed below it on purpose."""
from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BELOW_RANK = {"gpujobs.rank", "gpujobs.errors", "gpujobs.tracebacks"}
"""The rank package itself and the errors layer under it (tracebacks.py: errors' IPython display)."""


def _contract(name_start: str) -> dict:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return next(c for c in config["contracts"] if c["name"].startswith(name_start))


def test_the_rank_contract_forbids_every_other_gpujobs_module():
    top = {f"gpujobs.{p.stem}" for p in (ROOT / "gpujobs").glob("*.py") if p.stem != "__init__"}
    top |= {f"gpujobs.{p.parent.name}" for p in (ROOT / "gpujobs").glob("*/__init__.py")}
    contract = _contract("the rank package imports nothing")
    assert contract["source_modules"] == ["gpujobs.rank"]
    assert set(contract["forbidden_modules"]) == (top - BELOW_RANK) | {"gpujobs_magic"}


def test_the_layers_put_the_rank_package_between_spec_and_errors():
    layers = _contract("gpujobs' layers")["layers"]
    assert layers[-3:] == ["gpujobs.spec : gpujobs.status", "gpujobs.rank",
                           "gpujobs.errors : gpujobs.tracebacks"]
