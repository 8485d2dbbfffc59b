"""The local agent's state: one SQLite database (WAL) under GPUJOBS_HOME.

Table ``jobs``: one row per job — its JobStatus (with the event timeline) as JSON, its
spec as JSON, and ``runtime`` (pids with start times, devices, restarts, job directory).
Readers (clients, a fresh agent) open it read-only; only the agent writes. Writes are
batched: the agent marks rows dirty and flushes them in one transaction.
"""
from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Any, Iterable

from ...errors import StateError
from ...status import GpuSample, JobEvent, JobStatus, Progress
from .diskspace import describe, is_no_space
from .private import make_private_db

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    queue TEXT NOT NULL,
    phase TEXT NOT NULL,
    status TEXT NOT NULL,
    spec TEXT NOT NULL,
    runtime TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS jobs_phase ON jobs(phase);
"""


def status_from_dict(d: dict[str, Any]) -> JobStatus:
    d = dict(d)
    d.pop("terminal", None)
    d["events"] = tuple(JobEvent(**e) for e in d.get("events", ()))
    d["metrics"] = tuple(GpuSample(**m) for m in d.get("metrics", ()))
    if d.get("progress") is not None:
        d["progress"] = Progress(**d["progress"])
    return JobStatus(**d)


def _fail(path: Path, exc: Exception, doing: str, needed: int | None = None) -> StateError:
    if is_no_space(exc):
        return StateError(f"cannot write the gpujobs state database {path} while {doing}: "
                          f"{exc} ({describe(path, needed)}). Free space there (the state "
                          f"recovers by itself once there is room), or point GPUJOBS_HOME elsewhere")
    if isinstance(exc, sqlite3.DatabaseError) and "not a database" in str(exc) or \
            "malformed" in str(exc):
        return StateError(f"the gpujobs state database {path} is corrupt ({exc}) while {doing}; "
                          f"it was left untouched. Move it aside (e.g. mv {path} {path}.bad) to start "
                          f"fresh, or point GPUJOBS_HOME elsewhere")
    return StateError(f"cannot use the gpujobs state database {path} while {doing}: {exc}. "
                      f"Check that GPUJOBS_HOME ({path.parent}) exists and is writable, "
                      f"or point GPUJOBS_HOME elsewhere")


def _empty_error(path: Path, folders: int) -> StateError:
    return StateError(
        f"the gpujobs state database {path} is empty (it has no jobs table) although {folders} "
        f"job folder(s) exist under {path.parent / 'jobs'}; it was left untouched, and is not "
        f"re-created over them. Restore it from a backup, or move it aside to start a new one "
        f"(mv {path} {path}.bad: those jobs then stay on disk but are no longer listed), or "
        f"point GPUJOBS_HOME elsewhere")


def _job_folders(home: Path) -> int:
    """How many job folders (with their spec) lie under ``home``/jobs."""
    from ...rank.contract import SPEC_FILE
    return sum(1 for _ in (home / "jobs").glob(f"*/{SPEC_FILE}"))


class Store:
    def __init__(self, path: Path, readonly: bool = False):
        self.path = Path(path)
        self.readonly = readonly
        self._lock = threading.Lock()
        try:
            if readonly:
                self._db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True,
                                           check_same_thread=False, timeout=10)
            else:
                existed = self.path.exists()  # a new one is empty before its schema
                make_private_db(self.path)  # 0600 whatever the umask (its WAL/SHM follow)
                self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=10,
                                           isolation_level=None)
                if existed:
                    self._refuse_if_emptied()
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.executescript(SCHEMA)
            if readonly:
                self._refuse_if_emptied()
            self._db.execute("SELECT count(*) FROM jobs").fetchone()
        except sqlite3.Error as exc:
            raise _fail(self.path, exc, "opening it") from None

    def _refuse_if_emptied(self) -> None:
        """A database found without its jobs table (zero bytes, or another schema) beside job
        folders lost its jobs: a StateError, never a fresh schema over them (the first
        agent's new file is not checked: the first job's folder is already there)."""
        has = self._db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'jobs'")
        if has.fetchone() is None:
            folders = _job_folders(self.path.parent)
            if folders:
                self._db.close()
                raise _empty_error(self.path, folders)

    def close(self) -> None:
        self._db.close()

    def _query(self, sql: str, args: Iterable = ()) -> list[tuple]:
        try:
            with self._lock:
                return self._db.execute(sql, tuple(args)).fetchall()
        except sqlite3.Error as exc:
            raise _fail(self.path, exc, "reading it") from None

    # ----------------------------------------------------------------- writes
    def write(self, rows: Iterable[tuple[str, int, JobStatus, dict, dict]]) -> None:
        """Upsert ``(id, seq, status, spec_dict, runtime)`` rows in one transaction."""
        data = [(jid, seq, st.queue, st.phase, json.dumps(st.to_dict()), json.dumps(spec),
                 json.dumps(runtime)) for jid, seq, st, spec, runtime in rows]
        if not data:
            return
        try:
            with self._lock:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    self._db.executemany(
                        "INSERT INTO jobs(id, seq, queue, phase, status, spec, runtime) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET "
                        "queue=excluded.queue, phase=excluded.phase, status=excluded.status, "
                        "runtime=excluded.runtime", data)
                    self._db.execute("COMMIT")
                except BaseException:
                    # SQLite may have rolled back already (SQLITE_FULL): a failing ROLLBACK
                    # ("no transaction is active") must not hide the real error.
                    if self._db.in_transaction:
                        try:
                            self._db.execute("ROLLBACK")
                        except sqlite3.Error:
                            pass
                    raise
        except sqlite3.Error as exc:
            needed = sum(len(x) for row in data for x in row[4:])
            raise _fail(self.path, exc, "writing job records", needed) from None

    # ------------------------------------------------------------------ reads
    def status(self, job_id: str) -> JobStatus | None:
        rows = self._query("SELECT status FROM jobs WHERE id = ?", (job_id,))
        return status_from_dict(json.loads(rows[0][0])) if rows else None

    def all(self, queue: str | None = None) -> list[tuple[str, int, JobStatus, dict, dict]]:
        rows = self._in_order("id, seq, status, spec, runtime", queue)
        return [(r[0], r[1], status_from_dict(json.loads(r[2])), json.loads(r[3]), json.loads(r[4]))
                for r in rows]

    def status_rows(self, queue: str | None = None) -> list[tuple[str, str]]:
        """``(id, status JSON)`` of every job in submit order, not parsed: a caller that holds
        a fresher status for most of them (the agent's live records) parses only the rest."""
        return [(r[0], r[1]) for r in self._in_order("id, status", queue)]

    def _in_order(self, columns: str, queue: str | None) -> list[tuple]:
        """``columns`` of every job (of ``queue``), in submit order."""
        if queue is None:
            return self._query(f"SELECT {columns} FROM jobs ORDER BY seq")
        return self._query(f"SELECT {columns} FROM jobs WHERE queue = ? ORDER BY seq", (queue,))

    def max_seq(self) -> int:
        return self._query("SELECT coalesce(max(seq), 0) FROM jobs")[0][0]
