"""Whether a running local gang's ranks have reached the job's function.

Between launch and the function lie a Python start (or a fork of the warm zygote), imports
(torch: seconds of CPU each, far more on a loaded machine, and more again for a new agent's
first gang, whose zygote may still be warming so that every rank starts a fresh interpreter)
and the gang's rendezvous. A rank writes ``started-<rank>`` (:data:`gpujobs.rank.contract.STARTED`)
just before calling the function; a gang still missing some of them ``GPUJOBS_STARTUP_NOTE_S``
(default 20) after launch says so in its status, long before a time limit or the stall floor
(60 s) would show anything.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from ...rank import contract

DEFAULT_NOTE_S = 20.0


def note_after(env: dict[str, str] | None = None) -> float:
    """Seconds after launch before the note (the job's env, then this process's; 0: never)."""
    raw = (env or {}).get(contract.STARTUP_NOTE_S, os.environ.get(contract.STARTUP_NOTE_S, ""))
    try:
        return float(raw) if str(raw).strip() else DEFAULT_NOTE_S
    except ValueError:
        return DEFAULT_NOTE_S


def not_started(result_dir: Path, ranks: Iterable[int]) -> list[int]:
    """The ranks that have not reached the job's function yet."""
    return [r for r in ranks if not (result_dir / contract.STARTED.name(r)).exists()]


def startup_note(result_dir: Path, ranks: Iterable[int], launched_at: float, now: float,
                 after: float) -> str:
    """'ranks 1, 3 have not started the job's function 45 s after launch (…)', or ''."""
    waited = now - launched_at
    if after <= 0 or waited < after:
        return ""
    late = not_started(result_dir, ranks)
    if not late:
        return ""
    who = f"rank {late[0]} has" if len(late) == 1 else \
        f"ranks {', '.join(map(str, late))} have"
    return (f"{who} not started the job's function {int(waited)} s after launch (still "
            f"starting Python, importing modules or joining the gang)")
