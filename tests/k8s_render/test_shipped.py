"""The gpujobs code shipped into pods (lib.zip) is computed from the package: a pod runs a call
from lib.zip alone, and leaving out a module the runner needs fails here."""
from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import pytest

import gpujobs
from gpujobs import contract
from gpujobs.backends.kubernetes.render import bootstrap_script, payload_objects, shipped
from gpujobs.contract import RankEnv
from gpujobs.payload import new_key, open_envelope, pack_call, seal
from gpujobs.runner import RESULT_MARKER


def report_and_return():
    ctx = gpujobs.context()
    ctx.progress(1, total=1, loss=0.5)  # gpujobs.progress, imported on first use
    return {"value": 42, "job": ctx.job_id, "contract": gpujobs.contract.JOB_ID}


def _clear() -> None:
    for f in (shipped.closure, shipped.gpujobs_files, payload_objects.shipped_files,
              payload_objects.lib_zip, payload_objects.runtime_digest, payload_objects._runtime_body):
        f.cache_clear()


@pytest.fixture
def fresh_lib():
    """lib.zip recomputed for this test (and again afterwards, for the other tests)."""
    _clear()
    yield
    _clear()


def run_from_lib(tmp_path: Path, fn) -> tuple[subprocess.CompletedProcess, bytes]:
    """``python -S`` with lib.zip alone on its path (no site-packages, no checkout) runs the
    runner on a sealed call, as a pod does (framework set-up skipped: no torch here)."""
    lib = tmp_path / "lib.zip"
    lib.write_bytes(payload_objects.lib_zip())
    key = new_key()
    (tmp_path / "key").write_text(key.hex())
    (tmp_path / "payload.bin").write_bytes(seal(pack_call(fn, (), {}, limit=1 << 20,
                                                         shares_pythonpath=False), key))
    env = {"PATH": os.environ.get("PATH", ""), contract.PROGRESS_INTERVAL: "0",
           **RankEnv(job_id="pod-job", framework="ddp", payload=str(tmp_path / "payload.bin"),
                     key_file=str(tmp_path / "key"), result_sink="log",
                     checkpoint_dir=str(tmp_path / "ckpt")).to_env()}
    code = (f"import sys; sys.path[:0] = [{str(lib)!r}]; import gpujobs.runner as r; "
            "import gpujobs.runner.frameworks as f; f.setup = lambda fw, ctx: None; "
            "f.teardown = lambda fw, state: None; r.main()")
    p = subprocess.run([sys.executable, "-S", "-c", code], env=env, capture_output=True,
                       text=True, timeout=120, cwd=tmp_path)
    return p, key


def test_a_pod_runs_a_call_from_lib_zip_alone(tmp_path, fresh_lib):
    """Runner, payload, contract, context and progress all come from lib.zip (progress.py was
    missing from the hand-kept list: ctx.progress failed in a stock image)."""
    p, key = run_from_lib(tmp_path, report_and_return)
    assert p.returncode == 0, p.stderr
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith(RESULT_MARKER))
    outcome = open_envelope(base64.b64decode(line.split()[2]), key)
    assert outcome.ok and outcome.value == {"value": 42, "job": "pod-job",
                                            "contract": "GPUJOBS_JOB_ID"}
    assert "GPUJOBS-PROGRESS" in p.stdout


def test_a_module_left_out_of_lib_zip_fails_the_pod(tmp_path, fresh_lib, monkeypatch):
    monkeypatch.setitem(shipped.SUBMITTER_ONLY, "gpujobs.progress", "wrongly left out")
    assert "gpujobs/progress.py" not in payload_objects.shipped_files()
    p, _ = run_from_lib(tmp_path, report_and_return)
    assert p.returncode != 0 and "gpujobs.progress" in p.stderr


def test_a_module_imported_at_the_top_cannot_be_left_out(fresh_lib, monkeypatch):
    monkeypatch.setitem(shipped.SUBMITTER_ONLY, "gpujobs.contract", "wrongly left out")
    with pytest.raises(RuntimeError, match="gpujobs.contract cannot stay out of pods"):
        shipped.closure()


def test_what_ships_is_the_runner_closure_and_no_client_side():
    names = set(payload_objects.shipped_files())
    assert {"gpujobs/runner/__init__.py", "gpujobs/contract.py", "gpujobs/progress.py",
            "gpujobs/payload/envelope.py", "gpujobs/payload/shipping.py",
            "gpujobs/metrics/sampler.py", "cloudpickle/__init__.py"} <= names
    assert not {n for n in names if n.startswith(("gpujobs/backends/", "gpujobs/views/",
                                                  "gpujobs/admission/"))}
    assert not names & {"gpujobs/builder.py", "gpujobs/spec.py", "gpujobs/handle.py",
                        "gpujobs/metrics/tracker.py", "gpujobs/metrics/frame.py"}


def test_pruned_package_inits_name_what_a_pod_lacks(tmp_path):
    lib = tmp_path / "lib.zip"
    lib.write_bytes(payload_objects.lib_zip())
    code = (f"import sys; sys.path[:0] = [{str(lib)!r}]\n"
            "import gpujobs, gpujobs.metrics as m\n"
            "assert gpujobs.fsdp.__file__.startswith(sys.path[0]) and callable(gpujobs.context)\n"
            "assert m.Sampler and gpujobs.errors.SpecError\n"
            "assert callable(gpujobs.checkpoint.resumable) and callable(gpujobs.fsdp.shard)\n"
            "for owner, name in ((gpujobs, 'submit'), (m, 'JobMetrics')):\n"
            "    try:\n"
            "        getattr(owner, name)\n"
            "    except AttributeError as exc:\n"
            "        print(exc)\n")
    p = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [
        "gpujobs.submit is not available inside the pod (only the runner subset is shipped); "
        "install gpujobs in the image to use it there",
        "gpujobs.metrics.JobMetrics is not available inside the pod (only the runner subset is "
        "shipped); install gpujobs in the image to use it there"]


def test_the_bootstrap_reads_the_contract_s_config_name():
    """bootstrap.json is read before lib.zip can be imported: its name is spelt there once more."""
    assert bootstrap_script.CONFIG == contract.POD_CONFIG
    assert bootstrap_script.MPI_DNS_WAIT == contract.MPI_DNS_WAIT_S
    assert set(shipped.bootstrap_imports()) <= {"gpujobs.contract", "gpujobs.metrics.podlaunch",
                                                "gpujobs.metrics.sampler"}
