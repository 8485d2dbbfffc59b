"""The user's own modules (a script's siblings, a notebook's .py files, an editable package)
travel with the call by value; what cannot travel is refused before submit."""
from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpujobs.errors import PayloadError
from gpujobs.payload import _ShippedFinder, needed_modules, pack_call, unpack_call

ROOT = Path(__file__).resolve().parents[2]

MYLIB = """\
import helper                      # used only indirectly, through load()
def load(n):
    return helper.double(n) + 1
class Config:
    def __init__(self, k):
        self.k = k
"""
HELPER = "def double(n):\n    return 2 * n\n"
SCRIPT = """\
import gpujobs
from mylib import load
def f(n):
    return load(n)
if __name__ == "__main__":
    job = gpujobs.job(f, 20).ddp(gpus_per_node=0, procs_per_node=1).submit()
    print("RESULT", job.result(timeout=240))
"""
K8S_SCRIPT = """\
import os, tempfile
import gpujobs
from gpujobs_sim import SimCluster
from mylib import load
def f(n):
    return load(n)
if __name__ == "__main__":
    with SimCluster(gpus=1, bootstrap=True) as sim, tempfile.TemporaryDirectory() as tmp:
        os.environ["KUBECONFIG"] = sim.write_kubeconfig(os.path.join(tmp, "kubeconfig"))
        job = (gpujobs.job(f, 20).ddp(gpus_per_node=1).queue("q")
               .on("kubernetes", kind="PyTorchJob").submit())
        print("RESULT", job.result(timeout=240))
"""


def write_project(root: Path) -> Path:
    proj = root / "proj"
    (proj / "pkg").mkdir(parents=True)
    (proj / "mylib.py").write_text(MYLIB)
    (proj / "helper.py").write_text(HELPER)
    (proj / "script.py").write_text(SCRIPT)
    (proj / "k8s_script.py").write_text(K8S_SCRIPT)
    (proj / "pkg" / "__init__.py").write_text("from .inner import triple\n")
    (proj / "pkg" / "inner.py").write_text("def triple(n):\n    return 3 * n\n")
    return proj


@pytest.fixture
def project(tmp_path, monkeypatch):
    """proj/ importable in this process (as a notebook's folder is); forgotten afterwards."""
    proj = write_project(tmp_path)
    monkeypatch.syspath_prepend(str(proj))
    before = set(sys.modules)
    yield proj
    for name in set(sys.modules) - before:
        del sys.modules[name]
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _ShippedFinder)]


def forget(proj: Path) -> None:
    """This process can no longer import proj/ from disk: only what travelled can be used."""
    sys.path[:] = [p for p in sys.path if p != str(proj)]
    for name in ("mylib", "helper", "pkg", "pkg.inner", "notebook_cell_mod"):
        sys.modules.pop(name, None)
    importlib.invalidate_caches()


def test_sibling_and_indirect_modules_travel(project):
    mylib = importlib.import_module("mylib")

    def f(n):
        return mylib.load(n)

    assert {"mylib", "helper"} <= set(needed_modules(f))
    data = pack_call(f, (20,), {}, limit=1 << 20)
    forget(project)
    fn, args, kwargs = unpack_call(data)
    assert fn(*args, **kwargs) == 41


def test_import_inside_the_function_body_travels(project):
    def f(n):
        import pkg   # not imported anywhere before submit
        return pkg.triple(n)

    assert {"pkg", "pkg.inner"} <= set(needed_modules(f))
    data = pack_call(f, (5,), {}, limit=1 << 20)
    forget(project)
    fn, args, _ = unpack_call(data)
    assert fn(*args) == 15


def test_argument_of_a_local_class_brings_its_module(project):
    cfg = importlib.import_module("mylib").Config(7)

    def f(c):
        return c.k

    assert "mylib" in needed_modules(f, (cfg,))
    data = pack_call(f, (cfg,), {}, limit=1 << 20)
    forget(project)
    fn, args, _ = unpack_call(data)
    assert fn(*args) == 7


def test_notebook_cell_using_a_local_py_file_travels(project):
    pytest.importorskip("IPython")
    from gpujobs_magic.cell import compile_cell
    ns = {"mylib": importlib.import_module("mylib")}
    cell = compile_cell("from pkg import triple\nmylib.load(triple(2))", ns)
    assert {"mylib", "helper", "pkg", "pkg.inner"} <= set(needed_modules(cell.fn))
    data = pack_call(cell.fn, (), {}, limit=1 << 20)
    forget(project)
    fn, _, _ = unpack_call(data)
    assert fn() == 13


def test_installed_and_stdlib_modules_do_not_travel():
    import json

    import yaml

    def f():
        return json.dumps(yaml.safe_dump({"a": 1}))

    assert not {"json", "yaml"} & set(needed_modules(f))
    import pickle
    call = pickle.loads(pack_call(f, (), {}, limit=1 << 20))
    assert call[0] is not None  # shipped modules would come first (unpickled as None)


def test_compiled_extension_outside_site_packages_is_refused(project, monkeypatch):
    (project / "fastext.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF not really")
    (project / "uses_ext.py").write_text("def g():\n    import fastext\n    return fastext.go()\n")
    g = importlib.import_module("uses_ext").g
    monkeypatch.delenv("PYTHONPATH", raising=False)
    with pytest.raises(PayloadError) as err:
        needed_modules(g)  # ranks elsewhere (Kubernetes)
    msg = str(err.value)
    assert "fastext" in msg and "compiled extension" in msg and ".image(" in msg
    with pytest.raises(PayloadError, match="PYTHONPATH="):
        needed_modules(g, shares_pythonpath=True)
    # on the local backend, a folder on PYTHONPATH is importable by the ranks: allowed
    monkeypatch.setenv("PYTHONPATH", str(project))
    assert "fastext" not in needed_modules(g, shares_pythonpath=True)  # no error: it is importable there


def test_the_spec_lets_a_pythonpath_module_stay_home_only_on_the_local_backend(project, monkeypatch):
    """The spec says whether the ranks share this PYTHONPATH (its backend, else the default
    one); packing is told, it does not look the backend up."""
    from gpujobs.spec import JobSpec
    (project / "fastext.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF not really")
    (project / "uses_ext.py").write_text("def g():\n    import fastext\n    return fastext.go()\n")
    g = importlib.import_module("uses_ext").g
    monkeypatch.setenv("PYTHONPATH", str(project))
    monkeypatch.setenv("GPUJOBS_BACKEND", "local")
    assert JobSpec(fn=g).payload()
    assert JobSpec(fn=g, backend="local").payload()
    with pytest.raises(PayloadError, match="fastext"):
        JobSpec(fn=g, backend="kubernetes")
    monkeypatch.setenv("GPUJOBS_BACKEND", "kubernetes")
    with pytest.raises(PayloadError, match="fastext"):
        JobSpec(fn=g)


def _run(script: Path, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, str(script)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.slow
@pytest.mark.parametrize("script", ["script.py", "k8s_script.py"], ids=["local", "simulated_k8s"])
def test_script_with_sibling_module_from_another_cwd(tmp_path, script):
    proj = write_project(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = _run(proj / script, elsewhere)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "RESULT 41" in out.stdout
