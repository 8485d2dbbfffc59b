"""The typed settings: read once (per file version and variables), checked with errors naming the
key, variables winning over the file, and no import cycle between config and devices."""
from __future__ import annotations

import ast
import dataclasses
import os
from pathlib import Path

import pytest

from gpujobs import config
from gpujobs.errors import SpecError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cfg_file(tmp_path, monkeypatch):
    path = tmp_path / "config.toml"
    monkeypatch.setenv("GPUJOBS_CONFIG", str(path))
    for name in config.ENV:
        monkeypatch.delenv(name, raising=False)

    def write(text: str) -> Path:
        path.write_text(text)
        os.utime(path, ns=(0, path.stat().st_mtime_ns + 1_000_000_000))  # a new mtime each time
        return path
    return write


def test_settings_are_typed_frozen_and_read_once_per_file_version(cfg_file):
    cfg_file('backend = "kubernetes"\n[local]\ngpus = 3\n[kubernetes]\nnamespace = "team-a"\n')
    s = config.settings()
    assert (s.backend, s.local.gpus, s.local.gpus_from, s.kubernetes.namespace) == \
        ("kubernetes", 3, "[local] gpus", "team-a")
    assert config.settings() is s  # cached
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.backend = "local"  # type: ignore[misc]
    cfg_file("[local]\ngpus = 5\n")
    assert config.settings().local.gpus == 5 and config.settings().backend == "local"
    first = config.settings()
    again = config.reload()  # read again, whatever changed
    assert again is not first and again == first and config.settings() is again


def test_variables_win_over_the_file(cfg_file, monkeypatch):
    cfg_file('backend = "kubernetes"\n[local]\ngpus = 3\ncpus = 6\nidle_timeout_s = 10\n')
    monkeypatch.setenv("GPUJOBS_BACKEND", "local")
    monkeypatch.setenv("GPUJOBS_LOCAL_GPUS", "2")
    monkeypatch.setenv("GPUJOBS_LOCAL_CPUS", "1.5")
    monkeypatch.setenv("GPUJOBS_AGENT_IDLE_S", "7")
    s = config.settings()
    assert (s.backend, s.local.gpus, s.local.gpus_from, s.local.cpus, s.local.idle_timeout_s) == \
        ("local", 2, "GPUJOBS_LOCAL_GPUS", 1.5, 7.0)


@pytest.mark.parametrize("text,field,words", [
    ("[local]\ngpu = 4\n", "[local] gpu", ("did you mean 'gpus'",)),
    ("[kubernetes]\nnamespce = \"a\"\n", "[kubernetes] namespce", ("did you mean 'namespace'",)),
    ("[kubernetes]\nnamespace = 3\n", "[kubernetes] namespace", ("must be a string",)),
    ("[local]\ngpus = 0\n", "[local] gpus", ("positive whole number",)),
    ("[local]\nidle_timeout_s = \"soon\"\n", "[local] idle_timeout_s", ("number of seconds",)),
    ("[local]\ndefault_priority = \"urgent\"\n", "[local] default_priority", ("urgent",)),
    ("[[local.queues]]\nname = \"a\"\nstrategy = \"LIFO\"\n", "[[local.queues]] #1 strategy", ("LIFO",)),
    ("local = 3\n", "[local]", ("must be a table",)),
])
def test_a_wrong_key_is_named_with_a_fix(cfg_file, text, field, words):
    path = cfg_file(text)
    with pytest.raises(SpecError) as err:
        config.settings()
    assert err.value.field == field
    assert all(w in str(err.value) for w in words), str(err.value)
    assert err.value.remedy is not None and err.value.remedy.spell()
    if "did you mean" in words[0]:
        assert str(path) in err.value.remedy.spell()


def test_the_documented_keys_are_all_accepted(cfg_file):
    """The example in docs/configuration.md reads without an error."""
    doc = (ROOT / "docs" / "configuration.md").read_text()
    example = doc.split("```toml", 1)[1].split("```", 1)[0]
    cfg_file(example)
    s = config.settings()
    assert s.local.queues and s.kubernetes.namespace


def _imports(path: Path) -> set[str]:
    """Modules ``path`` imports, at any level of the file (function bodies included)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            out |= {f"{'.' * node.level}{node.module or ''}.{a.name}".rstrip(".") for a in node.names}
            out.add(f"{'.' * node.level}{node.module or ''}")
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return out


def test_config_imports_neither_devices_nor_the_local_backend():
    """config <-> devices was a cycle through function-level imports; the local agent's queues
    are built in the local backend, which reads its part of the settings."""
    names = _imports(ROOT / "gpujobs" / "config.py")
    assert not any("devices" in n or "backends" in n for n in names), names
