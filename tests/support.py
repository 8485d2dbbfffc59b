"""Helpers shared by test modules (importable because pytest puts tests/ on sys.path)."""
from __future__ import annotations

import time
from typing import Any, Callable


def wait_for(pred: Callable[[], Any], timeout: float = 30.0, every: float = 0.05) -> Any:
    """Poll ``pred`` until it returns something truthy (returned); AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"condition not reached within {timeout} s")
