"""JobMetrics: the agent-side sampler + bounded history + bounded file."""
from __future__ import annotations

import os
import time
import types

from gpujobs.metrics import JobMetrics, parse_metrics_line, ranks_of_gang, read_history

ME = os.getpid()


def test_history_file_and_updates(fake_nvml, tmp_path):
    path = tmp_path / "metrics.log"
    seen = []
    jm = JobMetrics({0: (ME, [0]), 1: (ME, [2])}, path=path, on_update=seen.append,
                    interval=0.02, maxlen=4)
    jm.start()
    deadline = time.monotonic() + 10
    while len(seen) < 12 and time.monotonic() < deadline:
        time.sleep(0.01)
    jm.stop()
    rounds = len(seen)
    assert rounds >= 12
    assert [(s.rank, s.device) for s in seen[-1]] == [(0, 0), (1, 2)]
    assert len(jm.samples()) == 8  # 4 per (rank, device)
    lines = path.read_text().splitlines()
    assert 4 < len(lines) <= 8 < rounds  # trimmed back to maxlen rounds at 2 x maxlen
    assert all(parse_metrics_line(line) for line in lines)
    other = read_history(path, maxlen=4)  # what another process (the client) reads back
    assert same(other.latest(), jm.latest())
    # a restarted gang picks the history up again
    again = JobMetrics({0: (ME, [0])}, path=path, interval=5, maxlen=4)
    assert same(again.latest(), jm.latest())
    again.stop()


def same(a, b):
    """Equal samples, times to the millisecond the file keeps."""
    return [s.__class__(**{**vars(s), "time": round(s.time, 3)}) for s in a] == [
        s.__class__(**{**vars(s), "time": round(s.time, 3)}) for s in b]


def test_read_history_without_file(tmp_path):
    assert len(read_history(tmp_path / "none.log")) == 0


def test_ranks_of_gang():
    gang = types.SimpleNamespace(procs={0: types.SimpleNamespace(pid=11),
                                        1: types.SimpleNamespace(pid=12)}, devices=[[0], [1, 2]])
    assert ranks_of_gang(gang) == {0: (11, [0]), 1: (12, [1, 2])}
    gang.devices = None
    assert ranks_of_gang(gang) == {0: (11, []), 1: (12, [])}


def test_ranks_of_a_launcher_gang_and_device_override():
    gang = types.SimpleNamespace(procs={0: types.SimpleNamespace(pid=21)}, devices=[[0], [1]])
    assert ranks_of_gang(gang) == {0: (21, [0, 1])}  # mpirun / Ray driver: one tree, all GPUs
    adopted = types.SimpleNamespace(procs={0: types.SimpleNamespace(pid=31),
                                           1: types.SimpleNamespace(pid=32)})
    assert ranks_of_gang(adopted, [[4], [5]]) == {0: (31, [4]), 1: (32, [5])}


def test_stop_without_waiting_closes_nvml_from_the_thread(fake_nvml):
    jm = JobMetrics({0: (ME, [0])}, interval=0.01).start()
    time.sleep(0.1)
    jm.stop(wait=False)
    deadline = time.monotonic() + 5
    while jm.sampler.running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not jm.sampler.running and fake_nvml.initialised == 0
