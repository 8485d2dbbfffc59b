"""How a gang ended, read back from its exit files after an agent restart."""
from __future__ import annotations

import json
import os

from gpujobs.backends.local.agent import Adopted, exit_from_files


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


def test_missing_exit_file_is_lost(tmp_path):
    write_exits(tmp_path, {0: 0})
    assert exit_from_files(tmp_path, 2).message == "lost"


def test_adopted_gang_counts_ranks_not_launcher_pids(tmp_path):
    """Regression: an adopted mpirun/Ray gang had world_size = number of launcher pids."""
    gang = Adopted([os.getpid()], tmp_path, world_size=4)
    assert gang.world_size == 4 and gang.pids == [os.getpid()]
