"""Say which device is full and how much was needed (ENOSPC, EDQUOT, SQLITE_FULL)."""
from __future__ import annotations

import errno
import os
from pathlib import Path

NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
LOW_SPACE_BYTES = 256 * 1024  # below this a result that was not written is taken as "no space"


def mount_of(path: Path) -> tuple[str, str]:
    """(device, mount point) of the file system holding ``path`` (its nearest existing parent)."""
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    best = ("?", "/")
    try:
        with open("/proc/self/mounts") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) < 2:
                    continue
                dev, mnt = parts[0], parts[1].replace("\\040", " ")
                if (str(p) == mnt or str(p).startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best[1]):
                    best = (dev, mnt)
    except OSError:
        pass
    return best


def free_bytes(path: Path) -> int | None:
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        st = os.statvfs(p)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def is_no_space(exc: BaseException) -> bool:
    return getattr(exc, "errno", None) in NO_SPACE_ERRNOS or "database or disk is full" in str(exc) \
        or "No space left" in str(exc)


def describe(path: Path, needed: int | None = None) -> str:
    """'no space left on device tmpfs (mounted at /x): about N bytes needed, M bytes free'."""
    dev, mnt = mount_of(path)
    free = free_bytes(path)
    need = f"about {needed} bytes needed, " if needed else ""
    have = f"{free} bytes free" if free is not None else "free space unknown"
    return f"no space left on device {dev} (mounted at {mnt}): {need}{have}"
