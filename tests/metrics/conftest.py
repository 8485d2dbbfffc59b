"""Fixtures for the metrics tests: a fake pynvml injected through sys.modules."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.metrics.fake_nvml import make_fake_nvml

DATA = Path(__file__).parent / "data"


@pytest.fixture
def fake_nvml(monkeypatch):
    """A 3-GPU fake pynvml module, installed as ``pynvml`` for the test."""
    mod = make_fake_nvml(3)
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    return mod


@pytest.fixture
def no_nvml(monkeypatch):
    """A pynvml whose nvmlInit raises NVMLError_LibraryNotFound (as on this machine)."""
    mod = make_fake_nvml(0, init_error=True)
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    return mod
