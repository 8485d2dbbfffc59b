"""Metrics on the Kubernetes path: the pod bootstrap's sampler -> GPUJOBS-METRICS pod-log lines
-> JobStatus.metrics / job.metrics(); the lines are hidden from job.logs().

The SimCluster runs the real bootstrap.py + lib.zip from the runtime ConfigMap (bootstrap=True);
there is no GPU here, so samples are psutil CPU readings (source "psutil", device -1).
"""
from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support import free_port, wait_for

import gpujobs
from gpujobs.backends.kubernetes.render.payload_objects import RUNTIME_DIR, lib_zip
from tests.support import unpack_pod
from gpujobs.backends.kubernetes.render.job import RenderOptions, render_job
from gpujobs.handle import Job
from gpujobs.metrics import METRICS_MARKER, parse_metrics_line
from gpujobs.payload import open_envelope
from gpujobs.rank.wire import RESULT_MARKER

pytestmark = pytest.mark.slow


def burn(seconds, tag):
    import time as _t
    print(f"hello from {tag}", flush=True)
    end, n = _t.time() + seconds, 0
    while _t.time() < end:
        n += 1
    return tag


def test_sim_job_status_and_metrics_carry_pod_cpu_samples(make_cluster):
    sim, be = make_cluster(bootstrap=True)
    spec = gpujobs.job(burn, 4.0, "m").ddp(nodes=2, gpus_per_node=0, procs_per_node=1) \
        .kubernetes(kind="PyTorchJob").queue("q").env(GPUJOBS_METRICS_INTERVAL="0.3").spec()
    job = Job(be.submit(spec), be)

    st = wait_for(lambda: (lambda s: s if {m.rank for m in s.metrics} == {0, 1} else None)(job.status()), timeout=60.0, every=0.2)
    assert not st.terminal, "metrics should be visible while the job runs"
    for m in st.metrics:
        assert m.source == "psutil" and m.device == -1, m
        assert m.mem_used and m.mem_used > 0 and m.mem_total and m.mem_total >= m.mem_used

    assert job.result(timeout=120) == "m"
    final = job.status()
    assert final.phase == "succeeded" and {m.rank for m in final.metrics} == {0, 1}

    frame = job.metrics()
    assert set(frame["source"]) == {"psutil"} and set(frame["rank"]) == {0, 1}
    assert frame.is_cpu
    assert (frame.groupby("rank").size() >= 3).all(), frame  # ~4 s at 0.3 s per round
    assert frame["util"].max() > 20, frame["util"].tolist()  # the busy loop shows up
    assert frame["time"].is_monotonic_increasing
    again = job.metrics()  # a second read (the job is over) adds no duplicates
    assert len(again) == len(frame)

    text = job.logs()
    assert "[rank 0] hello from m" in text and "[rank 1] hello from m" in text
    assert METRICS_MARKER not in text and RESULT_MARKER not in text
    followed = "".join(job.logs(follow=True))
    assert "hello from m" in followed
    assert METRICS_MARKER not in followed and RESULT_MARKER not in followed

    # the raw pod logs do hold the lines (so the client really read them from there)
    raw = "".join(sim.server.logs.read("default", p["metadata"]["name"])[0].decode()
                  for p in sim.store.list("v1", "Pod"))
    assert raw.count(METRICS_MARKER) >= 6 and RESULT_MARKER in raw


# ------------------------------------------------------------- the bootstrap alone
def unpack(r, root: Path) -> dict[str, str]:
    return unpack_pod(r, r.job["spec"]["tasks"][0]["template"], root)


def run_bootstrap(tmp_path, procs, extra_env, block=()):
    spec = gpujobs.job(burn, 1.5, "b").ddp(nodes=1, gpus_per_node=0, procs_per_node=procs) \
        .options(volcano="job", return_all=True).spec()
    r = render_job(spec, opts=RenderOptions(namespace="ml"))
    repl = unpack(r, tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUJOBS_")}
    for e in r.job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"]:
        if "value" in e:
            v = e["value"]
            for a, b in repl.items():
                v = v.replace(a, b)
            env[e["name"]] = v
    # a pod has a network namespace of its own; here the rendezvous takes a free port of this
    # machine, not the default 29500 another test may hold
    env.update(GPUJOBS_DEVICE="cpu", MASTER_PORT=str(free_port()), **extra_env)
    if block:  # an image without these packages: their import fails
        blocker = tmp_path / "blocker"
        blocker.mkdir()
        for mod in block:
            (blocker / f"{mod}.py").write_text(f"raise ImportError('no {mod} in this image')\n")
        env["PYTHONPATH"] = str(blocker)
    p = subprocess.run([sys.executable, str(Path(repl[RUNTIME_DIR]) / "bootstrap.py"), "rank"],
                       env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    results = {int(m.group(1)): open_envelope(base64.b64decode(m.group(2)), r.key)
               for m in re.finditer(rf"^{RESULT_MARKER} (\d+) (\S+)$", p.stdout, re.M)}
    return p, results


def test_bootstrap_without_psutil_or_nvml_runs_the_job_without_metrics(tmp_path):
    p, results = run_bootstrap(tmp_path, 1, {"GPUJOBS_METRICS_INTERVAL": "0.2"},
                               block=("psutil", "pynvml"))
    assert p.returncode == 0, p.stderr[-2000:]
    assert sorted(results) == [0] and results[0].ok and results[0].value == "b"
    assert METRICS_MARKER not in p.stdout
    notes = [line for line in p.stderr.splitlines() if "no metrics" in line]
    assert len(notes) == 1, p.stderr
    assert "psutil" in notes[0] and "pip install" in notes[0]


def test_bootstrap_samples_its_ranks_without_splitting_result_lines(tmp_path):
    p, results = run_bootstrap(tmp_path, 2, {"GPUJOBS_METRICS_INTERVAL": "0.2"})
    assert p.returncode == 0, p.stderr[-2000:]
    assert sorted(results) == [0, 1] and all(o.ok and o.value == "b" for o in results.values())
    rounds = [parse_metrics_line(line) for line in p.stdout.splitlines() if METRICS_MARKER in line]
    assert len(rounds) >= 3 and all(r is not None for r in rounds), p.stdout[-2000:]
    samples = [s for r in rounds for s in r]
    assert {s.rank for s in samples} == {0, 1}
    assert {(s.source, s.device) for s in samples} == {("psutil", -1)}
    assert "no metrics" not in p.stderr
    # every metrics line starts a line: nothing of a rank's output was split around it
    assert all(line.startswith(METRICS_MARKER) for line in p.stdout.splitlines()
               if METRICS_MARKER in line)


def test_lib_zip_ships_the_sampler_but_no_pandas_views():
    import io
    import zipfile
    names = set(zipfile.ZipFile(io.BytesIO(lib_zip())).namelist())
    assert {"gpujobs/rank/sampler.py", "gpujobs/rank/cpu.py", "gpujobs/rank/nvml.py",
            "gpujobs/rank/wire.py"} <= names
    assert not {n for n in names if n.startswith(("gpujobs/metrics/", "gpujobs/status.py"))}
    # a tripwire far below the 1 MiB a ConfigMap may hold (payload_objects.OBJECT_LIMIT): was 64 KiB;
    # the rank package also ships progress, contract and the runner (~70 KB)
    assert len(lib_zip()) < 96 * 1024
