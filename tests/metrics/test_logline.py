"""The GPUJOBS-METRICS pod-log line: format, parse, edge cases."""
from __future__ import annotations

import json

from gpujobs.metrics import METRICS_MARKER, format_metrics_line, metrics_reason, parse_metrics_line
from gpujobs.status import GpuSample


def gpu(rank, dev, **kw):
    base = dict(time=1764431100.5, rank=rank, device=dev, util=97.0, mem_used=73400320000.0,
                mem_total=85899345920.0, power_w=612.25, temp_c=71.0, source="nvml",
                host="train-worker-0", proc_mem=70123000000.0)
    return GpuSample(**(base | kw))


def test_round_trip_keeps_every_field():
    samples = [gpu(0, d) for d in range(8)]
    line = format_metrics_line(samples)
    assert line.startswith(METRICS_MARKER + " {") and "\n" not in line
    assert len(line.encode()) < 4096  # one write() keeps it whole in a pipe (PIPE_BUF)
    assert parse_metrics_line(line) == samples


def test_missing_readings_stay_missing_and_mixed_sources_survive():
    samples = [gpu(0, 0, power_w=None, temp_c=None, proc_mem=None),
               gpu(1, -1, source="psutil", util=None, host="other")]
    doc = json.loads(format_metrics_line(samples).split(" ", 1)[1])
    assert "p" not in doc["g"][0] and doc["g"][1]["s"] == "psutil" and doc["g"][1]["h"] == "other"
    assert parse_metrics_line(format_metrics_line(samples)) == samples


def test_marker_after_a_prefix_or_partial_output():
    line = format_metrics_line([gpu(0, 0)])
    assert parse_metrics_line(f"[rank 0] {line}\n") == [gpu(0, 0)]
    assert parse_metrics_line(f"epoch 3 loss=0.1{line}") == [gpu(0, 0)]


def test_nothing_to_report_line():
    line = format_metrics_line([], reason="NVML not available", now=5.0, host="pod-1")
    assert parse_metrics_line(line) == []
    assert metrics_reason(line) == "NVML not available"
    assert metrics_reason(format_metrics_line([gpu(0, 0)])) is None


def test_other_lines_are_not_metrics():
    assert parse_metrics_line("GPUJOBS-RESULT 0 abc") is None
    assert parse_metrics_line("plain training output") is None
    assert parse_metrics_line(f"{METRICS_MARKER} {{not json") is None
    assert parse_metrics_line(f"{METRICS_MARKER} [1, 2]") is None
    assert parse_metrics_line(f'{METRICS_MARKER} {{"t": 1, "g": [{{"d": 0}}]}}') is None
    assert metrics_reason("hello") is None


def test_pod_side_needs_neither_pandas_nor_psutil():
    """The sampler side runs in pod images: without pandas, psutil or NVML it says why."""
    import subprocess
    import sys
    code = (
        "import sys, io\n"
        "sys.modules['pandas'] = None; sys.modules['psutil'] = None; sys.modules['pynvml'] = None\n"
        "from gpujobs.metrics import Sampler, log_sink, parse_metrics_line, metrics_reason\n"
        "import gpujobs.rank.podlaunch\n"
        "out = io.StringIO()\n"
        "s = Sampler({0: (1, [0])})\n"
        "log_sink(out, reason=lambda: s.reason)(s.sample_once())\n"
        "line = out.getvalue()\n"
        "assert parse_metrics_line(line) == [], line\n"
        "print(metrics_reason(line))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "neither NVML nor psutil is available"
