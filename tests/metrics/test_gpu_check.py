"""tools/gpu_check.sh on a machine without a GPU: a clear message and exit code 3."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "gpu_check.sh"


def run(tmp_path, nvidia_smi: str | None):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("bash", "dirname", "mktemp", "rm", "python3", "env", "cat"):
        src = subprocess.run(["which", tool], capture_output=True, text=True).stdout.strip()
        if src:
            (bindir / tool).symlink_to(src)
    if nvidia_smi is not None:
        fake = bindir / "nvidia-smi"
        fake.write_text(nvidia_smi)
        fake.chmod(0o755)
    env = dict(os.environ, PATH=str(bindir), GPU_CHECK_PYTHON=sys.executable)
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)


def test_no_nvidia_smi(tmp_path):
    p = run(tmp_path, None)
    assert p.returncode == 3, p.stderr
    assert "no NVIDIA GPU here (nvidia-smi not found)" in p.stderr


def test_nvidia_smi_without_driver(tmp_path):
    p = run(tmp_path, "#!/bin/sh\necho 'NVIDIA-SMI has failed because it couldn'\"'\"'t "
                      "communicate with the NVIDIA driver.'\nexit 9\n")
    assert p.returncode == 3
    assert "sees no GPU" in p.stderr and "couldn't communicate" in p.stderr


@pytest.mark.skipif(subprocess.run([sys.executable, "-c", "import pynvml; pynvml.nvmlInit()"],
                                   capture_output=True).returncode == 0,
                    reason="this machine has NVML")
def test_nvidia_smi_ok_but_nvml_sees_nothing(tmp_path):
    p = run(tmp_path, "#!/bin/sh\necho 'GPU 0: NVIDIA H100 (UUID: GPU-x)'\n")
    assert p.returncode == 3
    assert "NVML (pynvml) cannot see a GPU" in p.stderr
