"""A rank whose GPU only waits is quiet (gpujobs.progress.gpu_activity): NVML's utilisation
calls a GPU busy while any kernel is resident, also one that spins while a collective waits
for a peer, and the host spins with it in a synchronize. Numbers from an H200
(tools/gpu_signals.py, benchmarks/RESULTS.md): matrix products 93 % utilisation and 96 %
of SMs busy; a one-thread spinning kernel 100 % and 0.8 %."""
from __future__ import annotations

import pytest

from gpujobs.backends.kubernetes.status.pod_metrics import StallEvidence
from gpujobs.backends.local.liveness import GangWatch
from gpujobs.backends.kubernetes.status.pod_metrics import PodMetrics
from gpujobs.progress import DEFAULT_WAITING_SM_PCT, gpu_activity
from gpujobs.rank.wire import CPU_DEVICE, GpuSample, format_metrics_line, format_progress_line
from gpujobs.status import JobStatus


def gpu(t: float, util: float | None, sm: float | None, rank: int = 0, device: int = 0) -> GpuSample:
    return GpuSample(time=t, rank=rank, device=device, util=util, mem_used=1.0, mem_total=2.0, sm_util=sm)


@pytest.mark.parametrize("util, sm, says", [
    (93.0, 96.4, "busy"),        # matrix products
    (100.0, 0.8, "waiting"),     # a spinning kernel
    (100.0, 48.0, "waiting"),    # 64 NCCL channels spinning on a 132-SM GPU
    (100.0, DEFAULT_WAITING_SM_PCT, "busy"),
    (30.0, 15.0, "busy"),        # computing part of each round (input-bound): not resident throughout
    (94.0, 1.0, "busy"),
    (100.0, None, "busy"),       # no GPM: utilisation alone decides, as before
    (0.0, 0.0, "idle"),
    (4.0, None, "idle"),
    (None, None, "idle"),
])
def test_what_a_sample_says(util, sm, says):
    assert gpu_activity(gpu(0.0, util, sm)) == says


def test_a_cpu_sample_never_waits():
    cpu = GpuSample(time=0.0, rank=0, device=CPU_DEVICE, util=100.0, mem_used=None, mem_total=None,
                    source="psutil", sm_util=0.0)
    assert gpu_activity(cpu) == "busy"


def watch(tmp_path, **env: str) -> GangWatch:
    (tmp_path / "results").mkdir()
    w = GangWatch(tmp_path, {0: 2 ** 22 + 7}, {"GPUJOBS_STALL_FLOOR_S": "5", "GPUJOBS_STALL_FACTOR": "1", **env},
                  now=1000.0)
    w._cpu_busy = lambda rank, pid, now: True  # the host thread spins in a synchronize
    w._locate = lambda ranks: {}
    return w


def rounds(w: GangWatch, util: float | None, sm: float | None) -> list:
    return [w.observe((gpu(t, util, sm),), now=t) for t in (1002.0, 1004.0, 1006.0, 1008.0)]


def test_a_rank_whose_gpu_only_waits_is_flagged_although_its_cpu_spins(tmp_path):
    seen = rounds(watch(tmp_path), 100.0, 0.8)
    assert [s[1] for s in seen] == [None, None, 1000.0, 1000.0]
    assert "GPU waiting: a kernel resident, few SMs busy (a collective waiting for a peer?)" in seen[-1][2], \
        seen[-1][2]


@pytest.mark.parametrize("util, sm", [(93.0, 96.4), (100.0, None), (30.0, 15.0)])
def test_a_rank_that_computes_or_cannot_say_is_not(tmp_path, util, sm):
    assert [s[1] for s in rounds(watch(tmp_path), util, sm)] == [None] * 4


def test_the_job_can_turn_the_rule_off(tmp_path):
    assert [s[1] for s in rounds(watch(tmp_path, GPUJOBS_STALL_SM_PCT="0"), 100.0, 0.8)] == [None] * 4


def test_a_rank_with_one_gpu_computing_is_alive(tmp_path):
    w = watch(tmp_path)
    seen = [w.observe((gpu(t, 100.0, 0.8), gpu(t, 90.0, 80.0, device=1)), now=t)
            for t in (1002.0, 1004.0, 1006.0, 1008.0)]
    assert [s[1] for s in seen] == [None] * 4


def test_on_kubernetes_the_same_rule(monkeypatch):
    monkeypatch.setenv("GPUJOBS_STALL_FLOOR_S", "5")
    monkeypatch.setenv("GPUJOBS_STALL_FACTOR", "1")
    progress = [{"rank": 0, "time": 1000.0, "step": 3.0, "total": 10.0, "metrics": {}}]
    ev = StallEvidence()
    waiting = [gpu(t, 100.0, 0.8) for t in (1000.0, 1004.0, 1008.0)]
    since, quiet, limit = ev.verdict(progress, waiting, now=1008.0)
    assert since == 1000.0 and quiet == {0: 1000.0} and limit == 5.0 and ev.waiting == {0}
    computing = [gpu(t, 93.0, 96.0) for t in (1000.0, 1004.0, 1008.0)]
    assert ev.verdict(progress, computing, now=1008.0)[0] is None and ev.waiting == set()


def test_on_kubernetes_the_status_says_the_gpu_waits(monkeypatch):
    """From the pod-log lines to the status message, as `gpujobs status` reads them."""
    import time
    monkeypatch.setenv("GPUJOBS_STALL_FLOOR_S", "5")
    monkeypatch.setenv("GPUJOBS_STALL_FACTOR", "1")
    pm, jid, now = PodMetrics(api_client=None), "default/j", time.time()
    pm.feed(jid, format_progress_line(0, 3.0, 10.0, {}, now - 20))
    for t in (now - 12, now - 2):
        assert pm.feed(jid, format_metrics_line([gpu(t, 100.0, 0.8)]))
    pm._series(jid).read_at = time.monotonic()  # fresh: no pod log read (there is no cluster)
    st = pm.with_metrics(JobStatus(job_id=jid, phase="running"))
    assert st.stalled_since == pytest.approx(now - 12, abs=0.01)  # quiet since its first sample
    assert "GPU waiting: a kernel resident" in st.message and st.extra["stall"] in st.message, st.message


def test_a_round_without_an_sm_reading_does_not_end_a_wait(tmp_path, monkeypatch):
    """A failed GPM read gives a sample without ``sm_util``: alone it reads as busy (no GPM:
    utilisation decides), but a rank whose GPU waited and stays resident still waits."""
    w = watch(tmp_path)
    seen = [w.observe((gpu(t, 100.0, None if t == 1006.0 else 0.8),), now=t)
            for t in (1002.0, 1004.0, 1006.0, 1008.0)]
    assert [s[1] for s in seen] == [None, None, 1000.0, 1000.0]
    monkeypatch.setenv("GPUJOBS_STALL_FLOOR_S", "5")
    monkeypatch.setenv("GPUJOBS_STALL_FACTOR", "1")
    progress = [{"rank": 0, "time": 1000.0, "step": 3.0, "total": 10.0, "metrics": {}}]
    samples = [gpu(t, 100.0, None if t == 1004.0 else 0.8) for t in (1000.0, 1002.0, 1004.0, 1006.0, 1008.0)]
    assert StallEvidence().verdict(progress, samples, now=1008.0)[0] == 1000.0
