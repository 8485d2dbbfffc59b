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
#    (target: gpujobs / torchrun >= 0.99).
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

PY="${GPU_CHECK_PYTHON:-.venv/bin/python}"
if [ ! -x "$PY" ]; then
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
          f"power {s.power_w} W temp {s.temp_c} C")
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

"$PY" "$WORK/gpu_check_driver.py" "$@"
