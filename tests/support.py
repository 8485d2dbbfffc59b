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


def unpack_pod(r: Any, template: dict, root: Any) -> dict[str, str]:
    """A rendered job's pod volumes written as the kubelet would; mount path -> local folder."""
    from gpujobs_sim.volumes import materialize

    objs = {(o["kind"], o["metadata"]["name"]): o for o in r.objects}
    return {k: str(v) for k, v in materialize(template, lambda kind, n: objs.get((kind, n)),
                                               root).items()}
