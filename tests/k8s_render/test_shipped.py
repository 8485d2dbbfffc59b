"""The gpujobs code shipped into pods (lib.zip) is the rank package whole: a pod runs a call from
lib.zip alone, and the rank package imports nothing a pod lacks."""
from __future__ import annotations

import ast
import base64
import os
import subprocess
import sys
from pathlib import Path

import pytest

import gpujobs
from gpujobs.backends.kubernetes.render import bootstrap_script, payload_objects, shipped
from gpujobs.payload import new_key, open_envelope, pack_call, seal
from gpujobs.rank import contract
from gpujobs.rank.contract import RankEnv
from gpujobs.rank.wire import RESULT_MARKER

GPUJOBS = Path(gpujobs.__file__).parent


def report_and_return():
    ctx = gpujobs.context()
    ctx.progress(1, total=1, loss=0.5)  # gpujobs.progress, imported on first use
    import gpujobs.checkpoint as ck  # a public module re-exporting the rank package
    return {"value": 42, "job": ctx.job_id, "contract": gpujobs.rank.contract.JOB_ID,
            "checkpoint": ck.resumable.__module__}


def _clear() -> None:
    for f in (shipped.gpujobs_files, payload_objects.shipped_files,
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
    code = (f"import sys; sys.path[:0] = [{str(lib)!r}]; import gpujobs.rank.runner as r; "
            "import gpujobs.rank.runner.frameworks as f; f.setup = lambda fw, ctx: None; "
            "f.teardown = lambda fw, state: None; r.main()")
    p = subprocess.run([sys.executable, "-S", "-c", code], env=env, capture_output=True,
                       text=True, timeout=120, cwd=tmp_path)
    return p, key


def test_a_pod_runs_a_call_from_lib_zip_alone(tmp_path, fresh_lib):
    """Runner, payload, contract, context and progress all come from lib.zip; the client's
    gpujobs.progress (imported here, as a status read does) is named by the pickled function
    (``ctx.progress``) and imports in the pod as a stand-in, not a ModuleNotFoundError."""
    import gpujobs.progress  # noqa: F401 - cloudpickle then records it for report_and_return
    p, key = run_from_lib(tmp_path, report_and_return)
    assert p.returncode == 0, p.stderr
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith(RESULT_MARKER))
    outcome = open_envelope(base64.b64decode(line.split()[2]), key)
    assert outcome.ok and outcome.value == {"value": 42, "job": "pod-job",
                                            "contract": "GPUJOBS_JOB_ID",
                                            "checkpoint": "gpujobs.rank.checkpoint"}
    assert "GPUJOBS-PROGRESS" in p.stdout


def test_what_ships_is_the_rank_package_whole_and_no_client_side():
    names = set(payload_objects.shipped_files())
    rank = {p.relative_to(GPUJOBS.parent).as_posix() for p in (GPUJOBS / "rank").rglob("*.py")}
    assert rank <= names
    assert {n for n in names if n.startswith("gpujobs/")} == rank | {
        "gpujobs/__init__.py", "gpujobs/errors.py", "gpujobs/checkpoint.py", "gpujobs/fsdp.py"}
    assert payload_objects.shipped_files()["gpujobs/__init__.py"] == \
        (GPUJOBS / "rank" / "pod_package.py").read_text()
    assert "cloudpickle/__init__.py" in names


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(absolute module, at the module's top level) of every import in ``path``."""
    tree = ast.parse(path.read_text())
    top = {id(n) for n in tree.body}
    parts = path.relative_to(GPUJOBS.parent).with_suffix("").parts
    package = parts[:-1]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, id(node) in top) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package)[:len(package) - (node.level - 1)]
                out.append((".".join(base + ([node.module] if node.module else [])), id(node) in top))
            else:
                out.append((node.module or "", id(node) in top))
    return out


LAZY_IN_RANK = {"torch", "ray", "mpi4py", "pynvml", "psutil"}
"""What a rank imports only inside the functions that need it (the framework set-up, the
samplers, ``ctx.save``): a stock image without them still runs the others."""


def _stdlib(name: str) -> bool:
    return name.split(".")[0] in sys.stdlib_module_names


def test_the_rank_package_imports_the_standard_library_cloudpickle_and_gpujobs_errors_only():
    """At a module's top level: the standard library, cloudpickle, the rank package and
    gpujobs.errors; inside functions also the optional LAZY_IN_RANK packages, no other."""
    bad = []
    for path in sorted((GPUJOBS / "rank").rglob("*.py")) + [GPUJOBS / n for n in shipped.BELOW_RANK + shipped.PUBLIC_REEXPORTS]:
        for name, top in _imports(path):
            ok = _stdlib(name) or name == "__future__" or name.split(".")[0] == "cloudpickle" or \
                name.startswith(("gpujobs.rank", "gpujobs.errors")) or name == "gpujobs" or \
                (not top and name.split(".")[0] in LAZY_IN_RANK)
            if path.name == "errors.py" and name == "gpujobs.tracebacks" and not top:
                ok = True  # IPython's hook only (_render_traceback_): never called in a pod
            if not ok:
                bad.append(f"{path.relative_to(GPUJOBS.parent)}: {name} ({'top' if top else 'in a function'})")
    assert not bad, bad


def test_the_pod_package_names_what_a_pod_lacks(tmp_path):
    lib = tmp_path / "lib.zip"
    lib.write_bytes(payload_objects.lib_zip())
    code = (f"import sys; sys.path[:0] = [{str(lib)!r}]\n"
            "import gpujobs, gpujobs.rank.sampler as s\n"
            "assert gpujobs.fsdp.__file__.startswith(sys.path[0]) and callable(gpujobs.context)\n"
            "assert s.Sampler and gpujobs.errors.SpecError is gpujobs.SpecError\n"
            "assert callable(gpujobs.checkpoint.resumable) and callable(gpujobs.fsdp.shard)\n"
            "import gpujobs.checkpoint as ck\n"
            "assert ck.Checkpointable.__module__ == 'gpujobs.rank.checkpoint'\n"
            "import gpujobs.spec as spec\n"
            "for owner, name in ((gpujobs, 'submit'), (spec, 'JobSpec')):\n"
            "    try:\n"
            "        getattr(owner, name)\n"
            "    except AttributeError as exc:\n"
            "        print(exc)\n")
    p = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [
        "gpujobs.submit is not available inside the pod (only the rank package is shipped); "
        "install gpujobs in the image to use it there",
        "gpujobs.spec.JobSpec is not available inside the pod (only the rank package is shipped); "
        "install gpujobs in the image to use it there"]


def test_the_bootstrap_reads_the_contract_s_config_name():
    """bootstrap.json is read before lib.zip can be imported: its name is spelt there once more."""
    assert bootstrap_script.CONFIG == contract.POD_CONFIG
    assert bootstrap_script.MPI_DNS_WAIT == contract.MPI_DNS_WAIT_S
    used = {name for name, _ in _imports(Path(bootstrap_script.__file__)) if name.startswith("gpujobs")}
    assert used and all(name.startswith("gpujobs.rank.") for name in used), used
