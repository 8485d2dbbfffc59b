"""docs/configuration.md names every GPUJOBS_* variable the code reads and every key of the
config file; the README links the configuration and troubleshooting pages."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG_DOC = (ROOT / "docs" / "configuration.md").read_text()


def variables_in_code() -> set[str]:
    found = set()
    for path in list((ROOT / "gpujobs").rglob("*.py")) + list((ROOT / "gpujobs_magic").rglob("*.py")):
        found |= set(re.findall(r"\bGPUJOBS_[A-Z][A-Z_]*[A-Z]\b", path.read_text()))
    return found - {"GPUJOBS_ROOT"}  # a module constant (_GPUJOBS_ROOT), not a variable


def config_keys_in_code() -> set[str]:
    """Every key the typed settings read (:mod:`gpujobs.config`: its sections' fields)."""
    from dataclasses import fields

    from gpujobs import config
    keys = {"backend", "priorities", "local", "kubernetes"}
    for section in (config.LocalSettings, config.KubernetesSettings, config.QueueSettings):
        keys |= {f.name for f in fields(section) if not f.name.endswith("_from")}
    return keys


@pytest.mark.parametrize("name", sorted(variables_in_code()))
def test_every_environment_variable_is_documented(name):
    assert f"`{name}`" in CONFIG_DOC, f"{name} is read by gpujobs but not in docs/configuration.md"


@pytest.mark.parametrize("key", sorted(config_keys_in_code()))
def test_every_config_key_is_documented(key):
    assert re.search(rf"^{key} *=|\[{key}\]|\.{key}\]", CONFIG_DOC, re.M), \
        f"config key {key!r} is not in docs/configuration.md"


def test_the_config_file_path_is_named():
    for where in ("$GPUJOBS_CONFIG", "$GPUJOBS_HOME/config.toml", "~/.config/gpujobs/config.toml"):
        assert where in CONFIG_DOC


def test_readme_links_the_pages():
    readme = (ROOT / "README.md").read_text()
    for page in ("docs/configuration.md", "docs/troubleshooting.md"):
        assert f"]({page})" in readme and (ROOT / page).is_file()


def test_troubleshooting_covers_each_state_with_commands():
    text = (ROOT / "docs" / "troubleshooting.md").read_text()
    for heading in ("## Pending", "## Stuck", "## Failed", "## Killed"):
        assert heading in text
    from tests.cli.test_hints import parses
    commands = re.findall(r"`(gpujobs [^`]+)`", text)
    assert len(commands) >= 8
    for c in commands:
        if "…" not in c:
            assert parses(c) is None, c
