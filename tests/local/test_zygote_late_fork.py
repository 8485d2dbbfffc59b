"""#31 item 8 (investigated): a first gang of a new agent can start a rank twice. When the
zygote is slow to answer a fork request (a loaded machine), ``Zygote.spawn`` gives up and the
gang starts that rank as a fresh interpreter; the zygote still forks it later. Two processes of
one rank join the rendezvous: the gang can hang before the job's function. A late fork is now
killed when it arrives."""
from __future__ import annotations

import time

import psutil
import pytest

from gpujobs.backends.local.zygote import Zygote


@pytest.mark.slow
def test_a_fork_that_arrives_after_spawn_gave_up_is_killed(tmp_path):
    z = Zygote(tmp_path / "zygote.log")
    try:
        assert z.ready(120), "the zygote did not warm up"
        z.SPAWN_TIMEOUT_S = 0.0  # give up at once: the fork's answer always comes too late
        (tmp_path / "results").mkdir()
        with pytest.raises(OSError, match="did not answer"):
            z.spawn(env={"GPUJOBS_TEST": "1"}, log_path=tmp_path / "rank.log", cwd=None,
                    exit_file=tmp_path / "results" / "exit-0")
        deadline = time.monotonic() + 30
        while not z.abandoned and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(z.abandoned) == 1, "the late fork was not noticed"
        pid = z.abandoned[0]
        while time.monotonic() < deadline:
            try:
                if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"the late fork {pid} still runs")
        deadline = time.monotonic() + 10
        while not (tmp_path / "results" / "exit-0").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (tmp_path / "results" / "exit-0").read_text() == "-9"  # killed, reaped
    finally:
        z.close()
        z.proc.wait(30)
