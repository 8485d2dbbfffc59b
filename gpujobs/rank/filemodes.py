"""Files gpujobs writes, private to their user whatever the umask (SECURITY.md): created 0600,
the mode set explicitly (a umask of 002 or 000 changes nothing). Standard library only: the
agent, the ranks (outcomes, failure markers, progress, stacks, exit files) and pods use it."""
from __future__ import annotations

import os
from pathlib import Path

FILE_MODE = 0o600
DIR_MODE = 0o700


def private_file(path: Path | str, flags: int = os.O_WRONLY | os.O_CREAT | os.O_APPEND) -> int:
    """An fd on ``path`` opened with ``flags``; a file it creates, or one of ours, is 0600."""
    fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
    except PermissionError:  # not ours (root-made in a shared set-up): leave its mode
        pass
    return fd


def open_private(path: Path | str, mode: str = "ab", **kw):
    """Like ``open(path, mode)`` (w/a modes only), the file 0600."""
    flags = os.O_WRONLY | os.O_CREAT
    flags |= os.O_APPEND if "a" in mode else os.O_TRUNC
    if "+" in mode:
        flags = (flags & ~os.O_WRONLY) | os.O_RDWR
    return os.fdopen(private_file(path, flags), mode, **kw)


def write_private(path: Path | str, data: bytes | str) -> None:
    """``path`` holds ``data`` (0600)."""
    with open_private(path, "wb") as fh:
        fh.write(data.encode() if isinstance(data, str) else data)


def replace_private(path: Path | str, data: bytes | str, sync: bool = False) -> None:
    """``path`` holds ``data`` (0600), replaced atomically: a reader never sees it half
    written; ``sync``: on disk before it is in place."""
    tmp = f"{path}.tmp"
    with open_private(tmp, "wb") as fh:
        fh.write(data.encode() if isinstance(data, str) else data)
        if sync:
            fh.flush()
            os.fsync(fh.fileno())
    os.replace(tmp, path)
