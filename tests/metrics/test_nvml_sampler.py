"""The sampler against a fake pynvml module: several GPUs, changing values, a lost GPU, errors."""
from __future__ import annotations

import os
import time

import pytest

from gpujobs.errors import SpecError
from gpujobs.metrics import MetricsHistory, Sampler, machine_gpus
from gpujobs.rank.nvml import NvmlReader, parse_visible_devices

ME = os.getpid()


def test_reads_each_rank_gpus_with_changing_values(fake_nvml):
    s = Sampler({0: (ME, [0]), 1: (ME, [1, 2])}, interval=2.0, host="node-a")
    assert s.nvml_available
    first = s.sample_once(now=100.0)
    second = s.sample_once(now=102.0)
    assert [(x.rank, x.device) for x in first] == [(0, 0), (1, 1), (1, 2)]
    assert all(x.source == "nvml" and x.host == "node-a" and not x.is_cpu for x in first)
    # values come from NVML each round: they change with the device's read count
    assert [x.util for x in first] == [7.0, 17.0, 27.0]
    assert [x.util for x in second] == [14.0, 24.0, 34.0]
    assert second[0].mem_used == 2**30 + 2 * 2**20 and second[0].mem_total == 80 * 2**30
    assert second[0].power_w == pytest.approx(302.0)  # mW -> W
    assert [x.temp_c for x in first] == [40.0, 41.0, 42.0]
    assert {x.time for x in second} == {102.0}
    s.stop()
    assert fake_nvml.initialised == 0  # nvmlShutdown called once per nvmlInit


def test_per_process_memory_counts_only_the_rank_tree(fake_nvml):
    fake_nvml.gpus[0].procs = {ME: 3 * 2**30, 999_999_1: 5 * 2**30}
    fake_nvml.gpus[1].procs = {ME: None}  # NVML_VALUE_NOT_AVAILABLE
    s = Sampler({0: (ME, [0, 1, 2])}, host="h")
    by_dev = {x.device: x for x in s.sample_once()}
    assert by_dev[0].proc_mem == 3 * 2**30
    assert by_dev[1].proc_mem is None
    assert by_dev[2].proc_mem == 0.0
    s.stop()


def test_gpu_lost_mid_run_keeps_other_gpus(fake_nvml):
    fake_nvml.gpus[1].lost_after = 3  # vanishes during its third read
    hist = MetricsHistory()
    s = Sampler({0: (ME, [0]), 1: (ME, [1])}, sink=hist)
    rounds = [s.sample_once(now=float(t)) for t in range(4)]
    hist.add([x for r in rounds for x in r])
    assert [sorted(x.device for x in r) for r in rounds] == [[0, 1], [0, 1], [0], [0]]
    assert "GpuIsLost" in s.errors[1] and 0 not in s.errors
    latest = {(x.rank, x.device): x.time for x in hist.latest()}
    assert latest == {(0, 0): 3.0, (1, 1): 1.0}  # the lost GPU's last reading stays visible as old
    s.stop()


def test_unsupported_power_is_none_not_zero(fake_nvml):
    fake_nvml.gpus[0].power_supported = False
    s = Sampler({0: (ME, [0])})
    (x,) = s.sample_once()
    assert x.power_w is None and x.util is not None
    s.stop()


def test_uuid_devices_from_cuda_visible_devices(fake_nvml):
    devices = parse_visible_devices(f"{fake_nvml.gpus[2].uuid},0")
    assert devices == [fake_nvml.gpus[2].uuid, 0]
    s = Sampler({3: (ME, devices)})
    got = s.sample_once()
    assert [(x.rank, x.device, x.temp_c) for x in got] == [(3, 0, 42.0), (3, 0, 40.0)]
    s.stop()


def test_parse_visible_devices_edge_cases():
    assert parse_visible_devices(None) is None
    assert parse_visible_devices("") == []
    assert parse_visible_devices("1, 3") == [1, 3]
    assert parse_visible_devices("0,-1,2") == [0]  # CUDA ignores everything after an invalid id


def test_nvml_missing_falls_back_to_cpu_readings(no_nvml):
    assert NvmlReader.open() is None
    s = Sampler({0: (ME, [0, 1])}, host="h")
    assert not s.nvml_available
    s.sample_once()
    (x,) = s.sample_once()
    assert x.source == "psutil" and x.is_cpu and x.device == -1
    assert x.mem_used > 10 * 2**20 and x.util is not None


def test_no_pynvml_module_at_all(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import raises ImportError
    assert NvmlReader.open() is None


def test_threaded_sampler_feeds_sink_until_stopped(fake_nvml):
    hist = MetricsHistory(maxlen=3)
    calls = []

    def sink(samples):
        calls.append(len(samples))
        hist.add(samples)
        if len(calls) == 2:
            raise RuntimeError("sink broke once")

    with Sampler({0: (ME, [0, 1])}, interval=0.05, sink=sink) as s:
        deadline = time.monotonic() + 5
        while len(calls) < 6 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert not s.running
    n = len(calls)
    time.sleep(0.2)
    assert len(calls) == n >= 6  # kept sampling past the sink error, stopped on exit
    assert "sink broke once" in s.sink_error
    assert len(hist) == 6  # bounded: 3 per (rank, device)
    assert s.cpu_seconds > 0 and s.rounds == n


def test_bad_ranks_and_interval_are_spec_errors(fake_nvml):
    with pytest.raises(SpecError, match="interval"):
        Sampler({0: (ME, [0])}, interval=0)
    with pytest.raises(SpecError, match=r"ranks\[0\]"):
        Sampler({0: ME})


def test_machine_gpus_with_nvml(fake_nvml):
    fake_nvml.gpus[1].procs = {1234: 2**30}
    df = machine_gpus()
    assert list(df["index"]) == [0, 1, 2]
    assert list(df["free"]) == [True, False, True]
    assert df.attrs["summary"] == "2 of 3 GPUs free"
    assert df["name"][0].startswith("NVIDIA H100")
    assert fake_nvml.initialised == 0


def test_machine_gpus_without_nvml(no_nvml, monkeypatch):
    monkeypatch.setenv("GPUJOBS_LOCAL_GPUS", "6")
    df = machine_gpus()
    assert df.empty and df.attrs["summary"] == "no GPU: 6 CPU slots"


def test_machine_gpus_when_the_count_fails(fake_nvml, monkeypatch):
    def broken():
        raise fake_nvml.NVMLError(999)
    monkeypatch.setattr(fake_nvml, "nvmlDeviceGetCount", broken)
    df = machine_gpus()
    assert df.empty and df.attrs["summary"].startswith("GPUs unreadable: NVMLError")
    assert fake_nvml.initialised == 0


def test_sm_utilisation_from_gpm_from_the_second_round_and_none_without_gpm(fake_nvml):
    fake_nvml.gpus[0].sm_util = 0.8  # Hopper: GPM; GPU 1 has none (older GPU, MIG slice)
    s = Sampler({0: (ME, [0, 1])})
    first = {x.device: x for x in s.sample_once(now=1.0)}
    second = {x.device: x for x in s.sample_once(now=3.0)}
    assert first[0].sm_util is None  # GPM reads between two samples: none in the first round
    assert second[0].sm_util == pytest.approx(0.8)
    assert first[1].sm_util is None and second[1].sm_util is None and second[1].util is not None
    fake_nvml.gpus[0].sm_util = 96.0
    assert {x.device: x for x in s.sample_once(now=5.0)}[0].sm_util == pytest.approx(96.0)
    s.stop()
    assert fake_nvml.gpm_allocated == 0  # every GPM sample freed, the last one at close


def test_sm_utilisation_survives_the_wire_and_the_metrics_frame(fake_nvml):
    from gpujobs.metrics.frame import metrics_frame
    from gpujobs.rank.wire import format_metrics_line, parse_metrics_line
    fake_nvml.gpus[0].sm_util = 24.5
    s = Sampler({0: (ME, [0])})
    s.sample_once(now=1.0)
    samples = s.sample_once(now=3.0)
    s.stop()
    (back,) = parse_metrics_line(format_metrics_line(samples))
    assert back == samples[0] and back.sm_util == pytest.approx(24.5)
    assert metrics_frame([back])["sm_util"].tolist() == [24.5]


def test_two_ranks_on_one_gpu_each_read_sm_utilisation_over_their_own_round(fake_nvml):
    fake_nvml.gpus[0].sm_util = 50.0
    s = Sampler({0: (ME, [0]), 1: (ME, [0])})
    s.sample_once(now=1.0)
    got = s.sample_once(now=3.0)
    assert [(x.rank, x.sm_util) for x in got] == [(0, 50.0), (1, 50.0)]
    # samples 1, 2: round one (ranks 0, 1); 3, 4: round two. Each rank's reading spans its own
    # round, not the few microseconds since the other rank's sample
    assert fake_nvml.gpm_pairs == [(1, 3), (2, 4)]
    s.stop()
    assert fake_nvml.gpm_allocated == 0


def test_one_failed_gpm_round_leaves_sm_readings_on(fake_nvml):
    fake_nvml.gpus[0].sm_util = 50.0
    s = Sampler({0: (ME, [0])})
    got = []
    for t in range(5):
        if t == 2:
            fake_nvml.gpus[0].gpm_fails = 1
        got += [x.sm_util for x in s.sample_once(now=float(t))]
    # round 2 fails and drops the kept sample; round 3 starts afresh; round 4 reads again
    assert got == [None, 50.0, None, None, 50.0]
    assert fake_nvml.gpm_allocated == 1  # only the last round's sample is held
    s.stop()
    assert fake_nvml.gpm_allocated == 0
