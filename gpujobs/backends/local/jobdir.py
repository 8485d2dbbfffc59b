"""The on-disk layout of one local job (payload, key, results, logs, checkpoints)."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Iterator

from ...rank.contract import OUTCOME, RANK_LOG, JobFolder
from ...errors import StateError
from ...payload import new_key, seal
from .diskspace import describe, is_no_space
from .private import write_private


class JobDir(JobFolder):
    """``$GPUJOBS_HOME/jobs/<id>/`` (names: :class:`gpujobs.rank.contract.JobFolder`), made and read:
    spec.json, payload.bin, key (0600), results/, logs/, checkpoint/."""

    def create(self, spec_dict: dict, payload: bytes) -> bytes:
        """Write everything a gang needs; return the job's HMAC key.

        A full or unwritable disk is a StateError and leaves no half-made directory.
        """
        try:
            return self._create(spec_dict, payload)
        except OSError as exc:  # [hardening] ENOSPC, EDQUOT, EACCES …
            shutil.rmtree(self.root, ignore_errors=True)
            why = exc.strerror or str(exc)
            if is_no_space(exc):
                why = f"{why}; {describe(self.root, len(payload) + len(json.dumps(spec_dict)) + 4096)}"
            raise StateError(f"cannot write the job directory {self.root}: {why} "
                             f"(fix: free space or fix permissions under {self.root.parent.parent}, "
                             f"or point GPUJOBS_HOME elsewhere); nothing was submitted") from None

    def _create(self, spec_dict: dict, payload: bytes) -> bytes:
        self.root.mkdir(parents=True, exist_ok=False, mode=0o700)  # [hardening] private to the user
        os.chmod(self.root, 0o700)  # explicit: whatever the umask or a setgid parent (SECURITY.md)
        for d in (self.result_dir, self.log_dir, self.checkpoint_dir):
            d.mkdir(mode=0o700)
        key = new_key()
        fd = os.open(self.key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(key.hex().encode())
        write_private(self.payload_file, seal(payload, key) if payload else b"")
        write_private(self.spec_file, json.dumps(spec_dict))
        return key

    def key(self) -> bytes:
        return bytes.fromhex(self.key_file.read_text().strip())

    def outcomes(self) -> dict[int, bytes]:
        out = {}
        for p in self.result_dir.glob(OUTCOME.glob):
            rank = OUTCOME.rank_of(p.name)
            if rank is not None:
                out[rank] = p.read_bytes()
        return out

    def log_files(self, rank: int | None = None) -> list[tuple[int, Path]]:
        files = []
        for p in self.log_dir.glob(RANK_LOG.glob):
            r = RANK_LOG.rank_of(p.name)
            if r is not None and (rank is None or r == rank):
                files.append((r, p))
        return sorted(files)

    def read_logs(self, rank: int | None = None) -> Iterator[str]:
        for r, path in self.log_files(rank):
            with open(path, "r", errors="replace") as fh:
                for line in fh:
                    yield f"[rank {r}] {line if line.endswith(chr(10)) else line + chr(10)}"
