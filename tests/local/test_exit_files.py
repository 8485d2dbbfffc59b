"""How a gang ended, read back from its exit files after an agent restart."""
from __future__ import annotations

import json
import os
import time

from gpujobs.backends.local.adoption import Adopted, exit_from_files


def write_exits(result_dir, codes, collateral=()):
    result_dir.mkdir(parents=True, exist_ok=True)
    for rank, code in codes.items():
        (result_dir / f"exit-{rank}").write_text(str(code))
    for rank in collateral:
        (result_dir / f"failure-{rank}.json").write_text(json.dumps({"collateral": True}))


def test_exit_files_blame_the_cause_not_the_peer_it_left_behind(tmp_path):
    """Regression: the lowest failed rank was blamed, even when it only lost its peer."""
    write_exits(tmp_path, {0: 1, 1: -9}, collateral=[0])
    done = exit_from_files(tmp_path, 2)
    assert not done.ok and done.failed_rank == 1 and done.message == "rank 1 killed by SIGKILL"


def test_a_failed_ranks_exception_leads_the_message(tmp_path):
    """#31: a local failed job said "rank 1 exit code 1"; Kubernetes already named the
    exception. The rank's failure marker (plain JSON) carries it."""
    write_exits(tmp_path, {0: 1, 1: 1}, collateral=[0])
    (tmp_path / "failure-1.json").write_text(json.dumps(
        {"type": "builtins.KeyError", "collateral": False, "message": "'missing_key'"}))
    done = exit_from_files(tmp_path, 2)
    assert done.failed_rank == 1 and done.message == "KeyError: 'missing_key' (rank 1); exit code 1"
    from gpujobs.backends.local.gang import failed_rank_message
    assert failed_rank_message(tmp_path, 0, 1) == "rank 0 exit code 1"  # no type: as before


def test_missing_exit_file_is_lost(tmp_path):
    write_exits(tmp_path, {0: 0})
    assert exit_from_files(tmp_path, 2).message == "lost"


def test_adopted_gang_counts_ranks_not_launcher_pids(tmp_path):
    """Regression: an adopted mpirun/Ray gang had world_size = number of launcher pids."""
    gang = Adopted([os.getpid()], tmp_path, world_size=4)
    assert gang.world_size == 4 and gang.pids == [os.getpid()]


def test_adopted_gang_waits_for_exit_files_written_after_the_reap(tmp_path):
    """Regression (CI flake in test_agent_crash_readopts_running_job): the zygote reaps a
    rank, then writes its exit file; an adopted gang polled in between was called lost."""
    gang = Adopted([], tmp_path, world_size=2, grace=30.0)  # every rank already reaped
    write_exits(tmp_path, {0: 0})
    assert gang.poll() is None and not gang.ended()  # rank 1's file is still on its way
    write_exits(tmp_path, {1: 0})
    done = gang.poll()
    assert gang.ended() and done is not None and done.ok and done.returncodes == {0: 0, 1: 0}


def test_adopted_gang_without_exit_files_is_lost_after_the_grace(tmp_path):
    gang = Adopted([], tmp_path, world_size=2, grace=0.2)
    assert gang.poll() is None
    time.sleep(0.25)
    done = gang.poll()
    assert done is not None and done.message == "lost" and gang.ended()
