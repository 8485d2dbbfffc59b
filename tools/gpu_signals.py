"""What NVML says about one GPU while it idles, computes, and waits in a spinning kernel.

A rank blocked in an NCCL collective keeps a kernel resident that spins on a flag: to
NVML's ``utilization.gpu`` ("a kernel was running") that looks like work. This probe
measures, for each phase, the readings a stall detector could use: NVML utilisation,
power, the GPM metrics of Hopper and later (SM utilisation, occupancy), and the host
process's CPU use while its thread waits in ``torch.cuda.synchronize``.

    python3 tools/gpu_signals.py [--seconds 4] [--json OUT.json]

Phases: ``idle`` (nothing queued), ``compute`` (bf16 matrix products, back to back),
``spin`` (``torch.cuda._sleep``: one thread spinning on the clock, the shape of a
collective's wait), and ``nccl-pair`` (two NCCL ranks on this one GPU, one waiting in
``all_reduce`` for the other; NCCL may refuse two ranks on one device, which is reported).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpujobs.rank.nvml import gpm_metrics  # noqa: E402


def gpm_read(nvml, handle, seconds: float) -> dict:
    """SM utilisation, SM occupancy and graphics utilisation over ``seconds`` (GPM), or why not."""
    try:
        if not nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice:
            return {"gpm": "not supported on this device"}
        s1, s2 = nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()
        nvml.nvmlGpmSampleGet(handle, s1)
        time.sleep(seconds)
        nvml.nvmlGpmSampleGet(handle, s2)
        ids = {"sm_util": nvml.NVML_GPM_METRIC_SM_UTIL, "sm_occupancy": nvml.NVML_GPM_METRIC_SM_OCCUPANCY,
               "graphics_util": nvml.NVML_GPM_METRIC_GRAPHICS_UTIL}
        out = dict(zip(ids, gpm_metrics(nvml, s1, s2, list(ids.values()))))
        nvml.nvmlGpmSampleFree(s1)
        nvml.nvmlGpmSampleFree(s2)
        return out
    except Exception as exc:  # noqa: BLE001 - a probe reports what fails
        return {"gpm": f"{type(exc).__name__}: {exc}"}


def measure(nvml, handle, seconds: float) -> dict:
    """NVML utilisation and power (means of 10 reads), GPM over the same window, this
    process's CPU use (% of one core)."""
    import psutil
    me = psutil.Process()
    c0, t0 = sum(me.cpu_times()[:2]), time.monotonic()
    utils, powers = [], []
    box: dict = {}
    g = threading.Thread(target=lambda: box.update(gpm_read(nvml, handle, seconds)))
    g.start()
    for _ in range(10):
        utils.append(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        powers.append(nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0)
        time.sleep(seconds / 10)
    g.join()
    cpu = 100.0 * (sum(me.cpu_times()[:2]) - c0) / (time.monotonic() - t0)
    return {"nvml_util": round(sum(utils) / len(utils), 1), "power_w": round(sum(powers) / len(powers), 1),
            "cpu_pct": round(cpu, 1), **box}


def phase(nvml, handle, seconds: float, work) -> dict:
    stop = threading.Event()
    t = threading.Thread(target=work, args=(stop,), daemon=True)
    t.start()
    time.sleep(0.5)  # let the work start
    out = measure(nvml, handle, seconds)
    stop.set()
    t.join(timeout=seconds * 4 + 30)
    return out


def nccl_pair(seconds: float) -> dict:
    """Two NCCL ranks on GPU 0; rank 1 joins the all_reduce ``seconds`` late; rank 0's wait
    is measured from the parent. NCCL may refuse a second rank on the same GPU."""
    import subprocess
    code = f"""
import os, time, torch, torch.distributed as dist
rank = int(os.environ["RANK"])
torch.cuda.set_device(0)
dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
x = torch.ones(1 << 20, device="cuda")
dist.all_reduce(x); torch.cuda.synchronize()
if rank == 0:
    print("WAITING", flush=True)
else:
    time.sleep({seconds} + 3)
dist.all_reduce(x); torch.cuda.synchronize()
print("DONE", rank, x[0].item(), flush=True)
dist.destroy_process_group()
"""
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT="29533", WORLD_SIZE="2")
    procs = [subprocess.Popen([sys.executable, "-c", code], env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    try:
        import pynvml as nvml
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        line = procs[0].stdout.readline()  # WAITING, or "" if rank 0 died
        if "WAITING" not in line:
            raise RuntimeError("rank 0 never reached the waiting all_reduce")
        time.sleep(1.0)
        out = measure(nvml, handle, seconds)
        for p in procs:
            p.wait(timeout=seconds + 60)
        out["exit_codes"] = [p.returncode for p in procs]
        return out
    except Exception as exc:  # noqa: BLE001
        for p in procs:
            p.kill()
        errs = [(p.communicate(timeout=10)[1] or "")[-600:] for p in procs]
        return {"error": f"{type(exc).__name__}: {exc}", "stderr": errs}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    import pynvml as nvml
    import torch
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    print("gpu:", nvml.nvmlDeviceGetName(handle), "driver", nvml.nvmlSystemGetDriverVersion())
    try:
        print("mig mode (current, pending):", nvml.nvmlDeviceGetMigMode(handle))
    except Exception as exc:  # noqa: BLE001
        print("mig mode:", type(exc).__name__, exc)
    torch.cuda.init()
    mhz = nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM)

    def compute(stop):
        a_ = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        while not stop.is_set():
            for _ in range(50):
                a_ @ a_
            torch.cuda.synchronize()

    def spin(stop):
        torch.cuda._sleep(int((a.seconds + 2.0) * mhz * 1e6))
        torch.cuda.synchronize()  # the host waits as it would behind a collective

    results = {"idle": measure(nvml, handle, a.seconds)}
    results["compute"] = phase(nvml, handle, a.seconds, compute)
    results["spin"] = phase(nvml, handle, a.seconds, spin)
    results["nccl-pair"] = nccl_pair(a.seconds)
    for name, row in results.items():
        print(f"{name:>10}: " + json.dumps(row))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
