"""The local state database (gpujobs.backends.local.store): an emptied one beside job folders
is refused, never re-created over them (issue 27)."""
from __future__ import annotations

import sqlite3

import pytest

from gpujobs.backends.local.store import Store
from gpujobs.errors import StateError


def _home_with_a_job(home):
    folder = home / "jobs" / "train-abc123"
    folder.mkdir(parents=True)
    (folder / "spec.json").write_text("{}")
    return home / "state.db"


@pytest.mark.parametrize("readonly", [False, True])
def test_a_zero_byte_database_beside_job_folders_is_refused_and_kept(tmp_path, readonly):
    db = _home_with_a_job(tmp_path)
    db.write_bytes(b"")
    with pytest.raises(StateError) as info:
        Store(db, readonly=readonly)
    msg = str(info.value)
    assert "is empty" in msg and "1 job folder" in msg and f"mv {db} {db}.bad" in msg, msg
    assert db.read_bytes() == b""  # not re-created silently


def test_a_database_without_the_jobs_table_is_refused(tmp_path):
    db = _home_with_a_job(tmp_path)
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE other (x)")
    con.commit()
    con.close()
    with pytest.raises(StateError, match="no jobs table"):
        Store(db)
    con = sqlite3.connect(db)
    tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    con.close()
    assert tables == ["other"]


def test_a_new_home_gets_its_schema_beside_its_first_job_folder(tmp_path):
    db = _home_with_a_job(tmp_path)  # the client writes the folder before the agent starts
    store = Store(db)
    try:
        assert store.all() == [] and store.max_seq() == 0
    finally:
        store.close()
