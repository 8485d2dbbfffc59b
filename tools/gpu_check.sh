#!/usr/bin/env bash
# tools/gpu_check.sh: the GPU checks that cannot run on a CPU-only machine.
#
# On a machine with NVIDIA GPUs, from the repository root:
#   tools/gpu_check.sh [--steps 1500] [--size 8192] [--rounds 2]
# 1. creates .venv with `pip install -e .[dev]` if it is missing;
# 2. runs a DDP job (2 ranks, NCCL; 1 rank when only one GPU is visible) through gpujobs on
#    the local backend and prints the NVML samples the widget model (JobStatus.metrics)
#    received while it ran;
# 3. runs the same training loop under plain torchrun and compares step throughput
#    (target: gpujobs / torchrun >= 0.99);
# 4. tools/gpu_signals.py: what NVML reads while the GPU idles, computes and waits in a
#    spinning kernel (and two NCCL ranks on one GPU, where NCCL allows it);
# 5. the stall flag: a rank waiting in a spinning kernel is flagged, one computing without
#    reports is not; with two GPUs or more, a rank waiting in an NCCL all_reduce is flagged.
# GPU_CHECK_PARTS=signals,throughput,stall picks the parts (all by default).
# Exit codes: 0 all checks passed, 1 a check failed, 3 no NVIDIA GPU / NVML here.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "gpu_check: no NVIDIA GPU here (nvidia-smi not found); nothing to check." >&2
    exit 3
fi
if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu_check: nvidia-smi found but it sees no GPU (driver/NVML unavailable):" >&2
    nvidia-smi -L >&2 || true
    exit 3
fi

PY="$(command -v "${GPU_CHECK_PYTHON:-.venv/bin/python}" || true)"  # a path, or a name on PATH
if [ -z "$PY" ]; then
    echo "gpu_check: creating .venv (pip install -e .[dev]) ..." >&2
    python3 -m venv .venv
    .venv/bin/pip install -q --upgrade pip
    .venv/bin/pip install -q -e '.[dev]'
    PY=.venv/bin/python
fi

if ! "$PY" -c 'import pynvml; pynvml.nvmlInit(); assert pynvml.nvmlDeviceGetCount() > 0' 2>/dev/null; then
    echo "gpu_check: NVML (pynvml) cannot see a GPU from $PY; nothing to check." >&2
    exit 3
fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export GPUJOBS_HOME="$WORK/home"

cat >"$WORK/gpu_check_train.py" <<'EOF'
"""The training loop both arms run (gpujobs and torchrun)."""
import json
import os
import time


def train(steps: int, size: int, batch: int = 512, warmup: int = 30) -> dict:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank = dist.get_rank()
    dev = torch.device("cuda", torch.cuda.current_device())
    torch.manual_seed(rank)
    model = torch.nn.Sequential(torch.nn.Linear(size, size), torch.nn.ReLU(),
                                torch.nn.Linear(size, size)).to(dev)
    model = DDP(model, device_ids=[dev.index])
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(batch, size, device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        opt.step()

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    return {"rank": rank, "steps_per_s": steps / elapsed, "elapsed_s": elapsed,
            "device": str(dev), "backend": dist.get_backend()}


if __name__ == "__main__":  # the torchrun arm
    import torch
    import torch.distributed as dist
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl", device_id=torch.device("cuda", int(os.environ["LOCAL_RANK"])))
    out = train(int(os.environ["GPU_CHECK_STEPS"]), int(os.environ["GPU_CHECK_SIZE"]))
    if out["rank"] == 0:
        print("GPU_CHECK_RESULT " + json.dumps(out), flush=True)
    dist.barrier()
    dist.destroy_process_group()
EOF

cat >"$WORK/gpu_check_driver.py" <<'EOF'
import argparse
import json
import os
import subprocess
import sys
import time

import gpujobs
from gpujobs.metrics import machine_gpus

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=1500)
ap.add_argument("--size", type=int, default=8192)
ap.add_argument("--rounds", type=int, default=2)
ap.add_argument("--target", type=float, default=0.99)
a = ap.parse_args()
work = os.path.dirname(os.path.abspath(__file__))
ns = {"__name__": "gpu_check_train"}  # not importable: cloudpickle sends it by value
exec(compile(open(os.path.join(work, "gpu_check_train.py")).read(), "gpu_check_train.py", "exec"), ns)
train = ns["train"]  # a __main__-level function: travels by value

gpus = machine_gpus()
print("machine:", gpus.attrs["summary"])
print(gpus[["index", "name", "util", "mem_used", "mem_total", "free"]].to_string(index=False))
ranks = 2 if len(gpus) >= 2 else 1
if ranks == 1:
    print("gpu_check: only one GPU visible: running 1 rank (NCCL needs one GPU per rank)")
failures = []


def run_gpujobs():
    job = gpujobs.job(train, a.steps, a.size).ddp(nodes=1, gpus_per_node=ranks).name("gpu-check").submit()
    seen = {}
    while not job.done():
        for s in job.status().metrics:
            seen[(s.rank, s.device, s.time)] = s
        time.sleep(0.5)
    out = job.result()
    return out, list(seen.values()), job.metrics()


def run_torchrun():
    env = dict(os.environ, GPU_CHECK_STEPS=str(a.steps), GPU_CHECK_SIZE=str(a.size))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={ranks}", os.path.join(work, "gpu_check_train.py")]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    for line in p.stdout.splitlines():
        if line.startswith("GPU_CHECK_RESULT "):
            return json.loads(line.split(" ", 1)[1])
    raise SystemExit(f"torchrun arm failed (exit {p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")


best = {"gpujobs": 0.0, "torchrun": 0.0}
samples, frame = [], None
for r in range(a.rounds):
    tr = run_torchrun()
    gj, got, frame = run_gpujobs()
    samples += got
    print(f"round {r + 1}: torchrun {tr['steps_per_s']:.2f} steps/s, gpujobs "
          f"{gj['steps_per_s']:.2f} steps/s ({gj['backend']}, {gj['device']})")
    best["torchrun"] = max(best["torchrun"], tr["steps_per_s"])
    best["gpujobs"] = max(best["gpujobs"], gj["steps_per_s"])
    if gj["backend"] != "nccl":
        failures.append(f"gpujobs ranks used {gj['backend']}, not nccl")

print(f"\nsamples the widget model (JobStatus.metrics) received: {len(samples)}")
for s in sorted(samples, key=lambda s: (s.time, s.rank, s.device))[-8:]:
    print(f"  t={s.time:.1f} rank {s.rank} gpu {s.device} {s.source}: busy {s.util}% "
          f"mem {s.mem_used / 2**30:.1f}/{s.mem_total / 2**30:.1f} GiB "
          f"proc {None if s.proc_mem is None else round(s.proc_mem / 2**30, 1)} GiB "
          f"power {s.power_w} W temp {s.temp_c} C SMs busy {s.sm_util}%")
if frame is not None:
    print(f"job.metrics(): {len(frame)} rows, sources {sorted(set(frame['source']))}")
if not samples or any(s.source != "nvml" for s in samples):
    failures.append("no NVML samples reached JobStatus.metrics" if not samples
                    else "some samples were not NVML")
elif max(s.util or 0 for s in samples) <= 0:
    failures.append("NVML samples never showed the GPU busy")

ratio = best["gpujobs"] / best["torchrun"]
print(f"\nstep throughput gpujobs/torchrun = {best['gpujobs']:.2f}/{best['torchrun']:.2f} = "
      f"{ratio:.4f} (target >= {a.target})")
if ratio < a.target:
    failures.append(f"throughput ratio {ratio:.4f} < {a.target}")
print("gpu_check: " + ("PASS" if not failures else "FAIL: " + "; ".join(failures)))
sys.exit(1 if failures else 0)
EOF

cat >"$WORK/gpu_check_stall.py" <<'EOF'
"""The stall flag on a GPU: a rank that waits in a spinning kernel (the shape of a rank blocked
in an NCCL collective: NVML calls the GPU busy) must be flagged; a rank that computes without
reporting must not be."""
import os
import sys
import time

os.environ.setdefault("GPUJOBS_METRICS_INTERVAL", "1")
import gpujobs  # noqa: E402


def waiting_in_a_gpu_kernel(seconds):
    import pynvml
    import torch
    pynvml.nvmlInit()
    mhz = pynvml.nvmlDeviceGetMaxClockInfo(pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.NVML_CLOCK_SM)
    torch.cuda._sleep(int(seconds * mhz * 1e6))
    torch.cuda.synchronize()


def computing_without_reports(seconds):
    import torch
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    end = time.time() + seconds
    while time.time() < end:
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()


def quiet_on_gpu(spin_s, compute_s):
    import time as t
    import gpujobs as g
    ctx = g.context()
    for i in range(5):
        ctx.progress(i, total=10)
        t.sleep(0.3)
    marks = {"spin_start": t.time()}
    waiting_in_a_gpu_kernel(spin_s)
    marks["spin_end"] = t.time()
    computing_without_reports(compute_s)
    marks["compute_end"] = t.time()
    for i in range(5, 10):
        ctx.progress(i, total=10)
        t.sleep(0.3)
    return marks


floor = 6.0
job = (gpujobs.job(quiet_on_gpu, 30.0, 20.0).ddp(nodes=1, gpus_per_node=1).name("gpu-stall")
       .env(GPUJOBS_STALL_FLOOR_S=str(floor), GPUJOBS_STALL_FACTOR="1", GPUJOBS_PROGRESS_INTERVAL="0.2")
       .submit())
seen = []  # (time, flagged, message, max NVML util of the round's samples)
while not job.done():
    st = job.status()
    utils = [s.util for s in st.metrics if s.source == "nvml" and s.util is not None]
    sms = [s.sm_util for s in st.metrics if s.sm_util is not None]
    seen.append((time.time(), st.stalled_since is not None, st.extra.get("stall", ""), max(utils, default=None),
                 max(sms, default=None)))
    time.sleep(0.5)
marks = job.result()
failures = []


def during(a, b):
    return [x for x in seen if a <= x[0] <= b]


spin = during(marks["spin_start"] + floor + 4, marks["spin_end"])
comp = during(marks["spin_end"] + 4, marks["compute_end"])
print(f"stall phase: {len(spin)} polls while the rank waited in a spinning kernel, "
      f"{sum(x[1] for x in spin)} flagged; NVML util seen {sorted(set(x[3] for x in spin if x[3] is not None))}, "
      f"SMs busy {sorted(set(x[4] for x in spin if x[4] is not None))}")
print(f"compute phase: {len(comp)} polls while it computed without reports, {sum(x[1] for x in comp)} flagged; "
      f"SMs busy {sorted(set(round(x[4]) for x in comp if x[4] is not None))}")
msgs = sorted({x[2] for x in seen if x[1]})
print("stall messages:", msgs)
print("events:", [(e.kind, e.message[:100]) for e in job.status().events if e.kind in ("stalled", "moving")])
if not any(x[1] for x in spin):
    failures.append("a rank waiting in a spinning GPU kernel was never flagged")
elif not any("waiting_in_a_gpu_kernel" in m for m in msgs):
    failures.append("the stall message does not name waiting_in_a_gpu_kernel")
if any(x[1] for x in comp):
    failures.append("a rank computing on the GPU without reports was flagged")


def held_in_all_reduce(late_s):
    """Two NCCL ranks; rank 1 comes late to an all_reduce, so rank 0 waits in it."""
    import time as t

    import torch
    import torch.distributed as dist

    import gpujobs as g
    ctx = g.context()
    x = torch.ones(1 << 20, device="cuda")
    for i in range(5):
        ctx.progress(i, total=10, rank=None)
        dist.all_reduce(x)
        torch.cuda.synchronize()
        t.sleep(0.3)
    marks = {"wait_start": t.time()}
    if ctx.rank == 1:
        t.sleep(late_s)
    dist.all_reduce(x)
    torch.cuda.synchronize()
    marks["wait_end"] = t.time()
    return marks


def gpu_count():
    import pynvml
    pynvml.nvmlInit()
    return pynvml.nvmlDeviceGetCount()


if gpu_count() >= 2:  # a real NCCL wait (one GPU cannot make one: NCCL refuses two ranks on it)
    job = (gpujobs.job(held_in_all_reduce, 30.0).ddp(nodes=1, gpus_per_node=2).name("gpu-nccl-wait")
           .env(GPUJOBS_STALL_FLOOR_S=str(floor), GPUJOBS_STALL_FACTOR="1", GPUJOBS_PROGRESS_INTERVAL="0.2")
           .submit())
    seen = []
    while not job.done():
        st = job.status()
        seen.append((time.time(), st.stalled_since is not None, st.extra.get("stall", ""),
                     sorted((s.rank, s.util, s.sm_util) for s in st.metrics)))
        time.sleep(0.5)
    marks = job.result()
    held = [x for x in seen if marks["wait_start"] + floor + 4 <= x[0] <= marks["wait_end"]]
    texts = sorted({x[2] for x in held if x[1]})
    print(f"nccl wait: {len(held)} polls while rank 0 waited in all_reduce, {sum(x[1] for x in held)} flagged; "
          f"last readings (rank, util, SMs) {held[-1][3] if held else None}; messages {texts}")
    if not any(x[1] for x in held):
        failures.append("a rank waiting in an NCCL all_reduce was never flagged")
    elif not any("rank 0" in m and "waiting" in m for m in texts):
        failures.append("the NCCL wait was flagged, but not as rank 0's GPU waiting")
else:
    print("nccl wait: not checked (one GPU: NCCL refuses two ranks on it)")
print("gpu_check stall: " + ("PASS" if not failures else "FAIL: " + "; ".join(failures)))
sys.exit(1 if failures else 0)
EOF

PARTS="${GPU_CHECK_PARTS:-signals,throughput,stall}"
rc=0
if [[ ",$PARTS," == *",signals,"* ]]; then
    "$PY" tools/gpu_signals.py || rc=1
fi
if [[ ",$PARTS," == *",throughput,"* ]]; then
    "$PY" "$WORK/gpu_check_driver.py" "$@" || rc=1
fi
if [[ ",$PARTS," == *",stall,"* ]]; then
    "$PY" "$WORK/gpu_check_stall.py" || rc=1
fi
exit $rc
