"""%%gpujob and %gpujobs through IPython's InteractiveShell."""
from __future__ import annotations

import time

import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

import gpujobs
from gpujobs_magic.cell import analyse, compile_cell


def run(sh, line, cell):
    with capture_output() as cap:
        res = sh.run_cell(f"%%gpujob {line}\n{cell}")
    return res, cap


def local_jobs():
    return list(gpujobs.jobs())


# ------------------------------------------------------------------ bad input: one line, no job
@pytest.mark.parametrize("line,cell,needle", [
    ("--bogus", "x = 1", "unrecognized arguments: --bogus"),
    ("--framework tf", "x = 1", "invalid choice: 'tf'"),
    ("--gpus two", "x = 1", "invalid int value: 'two'"),
    ("--return y", "x = 1", "the cell never assigns 'y' (it assigns: x)"),
    ("--return 1x", "x = 1", "'1x' is not a Python name"),
    ("", "x = (1,\n", "the cell does not parse: line 1"),
    ("", "return 5", "the cell does not parse: line 1: 'return' outside function"),
    ("", "x = 1\n!nvidia-smi", "line 2 ('!nvidia-smi') uses IPython syntax"),
    ("", "%time x = 1", "uses IPython syntax"),
    ("", "get_ipython().system('ls')", "uses IPython syntax"),
    ("--gpus 0", "x = 1", "gpus: must be >= 1"),
    ("--queue Team_A", "x = 1", "queue: 'Team_A' is not a valid queue name"),
    ("-o 9lives", "x = 1", "'9lives' is not a Python name"),
    # an MPI cell on Kubernetes needs an image: the fix names the cell's flag (it said .image('…'))
    ("--framework mpi --backend kubernetes", "x = 1", "and pass --image gpujobs-mpi:py"),
    # --image reaches the spec: past the image check, the missing cluster is what remains
    ("--framework mpi --backend kubernetes --image gpujobs-mpi:py311", "x = 1", "no Kubernetes configuration"),
])
def test_bad_input_is_one_line_and_creates_no_job(shell, line, cell, needle, tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))  # no cluster, whatever the machine has
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    res, cap = run(shell, line, cell)
    assert isinstance(res.error_in_exec, UsageError), res.error_in_exec
    assert needle in str(res.error_in_exec)
    assert "Traceback" not in cap.stdout + cap.stderr
    assert len((cap.stdout + cap.stderr).strip().splitlines()) == 1, cap.stdout + cap.stderr
    assert local_jobs() == []


def test_line_expands_notebook_variables(shell):
    shell.user_ns["q"] = "Bad_Q"
    res, _ = run(shell, "--queue {q}", "x = 1")
    assert isinstance(res.error_in_exec, UsageError) and "'Bad_Q'" in str(res.error_in_exec)


def test_help_lists_the_options(shell):
    doc = shell.find_cell_magic("gpujob").__doc__
    for opt in ("--gpus", "--nodes", "--framework", "--queue", "--priority", "--return", "-o",
                "--wait", "--name", "--image", "--backend"):
        assert opt in doc


def test_extension_loads_once_and_unloads(shell):
    shell.run_line_magic("load_ext", "gpujobs_magic")  # already loaded: no error, one class
    assert "gpujob" in shell.magics_manager.magics["cell"]
    shell.run_line_magic("unload_ext", "gpujobs_magic")
    assert "gpujob" not in shell.magics_manager.magics["cell"]
    shell.run_line_magic("load_ext", "gpujobs_magic")
    assert "gpujobs" in shell.magics_manager.magics["line"]


# ---------------------------------------------------------------- capture analysis (no submit)
def test_analysis_finds_free_names_and_assignments():
    src = ("import math\nmodel = build(cfg)\nfor i in range(steps):\n    loss = step(model, i)\n"
           "def inner():\n    return scale * loss\nclass K:\n    attr = other\n"
           "total = sum(x * w for x in data)\n")
    reads, assigned = analyse(src)
    assert {"build", "cfg", "steps", "step", "scale", "other", "data", "w", "model"} <= reads
    assert "x" not in reads and "shape" not in reads
    assert {"math", "model", "i", "loss", "inner", "K", "total"} <= assigned


def test_capture_takes_only_free_names_from_the_namespace_by_value():
    ns = {"cfg": {"lr": 0.1}, "unused": object(), "In": [], "_5": 1, "scale": 3}
    cf = compile_cell("y = cfg['lr'] * scale\nz = len(str(y))", ns, returns=("y",), name="cell_7")
    assert set(cf.captured) == {"cfg", "scale"}
    assert cf.fn() == {"y": pytest.approx(0.3)}
    assert cf.fn.__name__ == "cell_7" and cf.fn.__module__ == "__main__"
    ns["cfg"]["lr"] = 1.0  # captured dicts are shared until pickled; pickling freezes them
    import cloudpickle
    clone = cloudpickle.loads(cloudpickle.dumps(cf.fn))
    ns["cfg"]["lr"] = 5.0
    assert clone() == {"y": pytest.approx(3.0)}


def test_cell_keeps_module_semantics_and_returns_last_expression():
    cf = compile_cell("x = x + 1\ndef f():\n    return x * 2\nf()", {"x": 10})
    assert cf.fn() == 22
    cf2 = compile_cell("for i in range(3):\n    pass\n", {})
    assert cf2.fn() is None


def test_unpicklable_capture_is_a_one_line_usage_error(shell):
    import threading
    shell.user_ns["lock"] = threading.Lock()
    res, cap = run(shell, "--gpus 2", "with lock:\n    x = 1")
    assert isinstance(res.error_in_exec, UsageError)
    assert "lock" in str(res.error_in_exec) and "not serialisable" in str(res.error_in_exec)
    assert local_jobs() == []


def test_gpujobs_line_magic_usage_and_backend(shell):
    with capture_output() as cap:
        shell.run_line_magic("gpujobs", "backend local")
    assert "backend 'local'" in cap.stdout
    res = shell.run_cell("%gpujobs backend nowhere")
    assert isinstance(res.error_in_exec, UsageError) and "unknown backend 'nowhere'" in str(res.error_in_exec)
    res = shell.run_cell("%gpujobs frobnicate")
    assert isinstance(res.error_in_exec, UsageError)
    table = shell.run_line_magic("gpujobs", "jobs")
    assert isinstance(table, gpujobs.views.JobTable) and len(table) == 0
    q = shell.run_line_magic("gpujobs", "queue default")
    assert q.name == "default" and len(q.to_pandas()) == 0


# ----------------------------------------------------------------- real submits (local backend)
SHIFT = "class Shift:\n    def __init__(self, b):\n        self.b = b\n    def plus(self, r):\n        return self.b + r\n"

CELL = """import gpujobs, torch.distributed as dist
ctx = gpujobs.context()
t = torch.tensor([float(Shift(base).plus(ctx.rank))])  # a notebook class, by value
dist.all_reduce(t)
total = t.item()
world = ctx.world_size
print("rank", ctx.rank, "total", total)
"""


@pytest.mark.slow
def test_wait_returns_names_and_stores_the_job(shell, no_leftovers):
    shell.run_cell("import torch\nbase = 10\n" + SHIFT)
    res, cap = run(shell, "--gpus 2 --wait --return total,world -o job", CELL)
    assert res.error_in_exec is None, cap.stderr
    job = shell.user_ns["job"]
    assert isinstance(job, gpujobs.Job)
    assert shell.user_ns["total"] == 21.0 and shell.user_ns["world"] == 2  # 10 + 11 from 2 ranks
    st = job.status()
    assert st.phase == "succeeded" and (st.gang_ready, st.gang_size) == (2, 2)
    assert "rank 1 total 21.0" in job.logs()
    assert "succeeded · gang 2/2" in cap.stdout  # a terminal gets the final line
    shown = [o.data["text/plain"] for o in cap.outputs]
    assert shown and shown[0].startswith(f"Job {job.id}")  # the view displayed at submit
    no_leftovers(job.id)


@pytest.mark.slow
def test_mpi_cell_runs_on_every_rank_and_returns_rank0_names(shell, no_leftovers):
    shell.run_cell("samples = 20_000")
    res, cap = run(shell, "--framework mpi --gpus 2 --wait --return pi,size -o job", """
import random
from mpi4py import MPI
comm = MPI.COMM_WORLD
rng = random.Random(comm.Get_rank())
inside = sum(rng.random() ** 2 + rng.random() ** 2 <= 1 for _ in range(samples))
pi = 4 * comm.allreduce(inside) / (samples * comm.Get_size())
size = comm.Get_size()
""")
    assert res.error_in_exec is None, cap.stderr
    assert shell.user_ns["size"] == 2 and 3.0 < shell.user_ns["pi"] < 3.3
    st = shell.user_ns["job"].status()
    assert st.phase == "succeeded" and (st.gang_ready, st.gang_size) == (2, 2)
    no_leftovers(shell.user_ns["job"].id)


@pytest.mark.slow
def test_ray_cell_runs_tasks_on_a_private_ray(shell, no_leftovers):
    res, cap = run(shell, "--framework ray --gpus 1 --wait --return squares -o job", """
import ray

@ray.remote
def square(x):
    return x * x

squares = ray.get([square.remote(i) for i in range(4)])
""")
    assert res.error_in_exec is None, cap.stderr
    assert shell.user_ns["squares"] == [0, 1, 4, 9]
    no_leftovers(shell.user_ns["job"].id)


@pytest.mark.slow
def test_non_blocking_returns_at_once_and_fills_names_later(shell, no_leftovers):
    shell.run_cell("import torch\nbase = 1\n" + SHIFT)
    res, _ = run(shell, "--gpus 2 --return total -o job --name quick",
                 CELL + "import time\ntime.sleep(4)\n")
    assert res.error_in_exec is None and res.result is shell.user_ns["job"]
    job = shell.user_ns["job"]
    assert not job.done() and "total" not in shell.user_ns  # returned before the job ended
    assert job.status().name == "quick"
    assert job.wait(60).phase == "succeeded"
    deadline = time.monotonic() + 10
    while "total" not in shell.user_ns and time.monotonic() < deadline:
        time.sleep(0.05)
    assert shell.user_ns["total"] == 3.0
    no_leftovers(job.id)


@pytest.mark.slow
def test_remote_error_with_wait_is_raised_as_its_own_type(shell, no_leftovers):
    res, _ = run(shell, "--gpus 2 --wait -o job", "import gpujobs\nif gpujobs.context().rank == 1:\n"
                 "    raise KeyError('rank one broke')\n")
    assert isinstance(res.error_in_exec, KeyError) and "rank one broke" in str(res.error_in_exec)
    tb = res.error_in_exec.remote_traceback  # #31: the cell's own line, not just <dynamic-code>
    assert "raise KeyError('rank one broke')" in tb and "<dynamic-code>" not in tb, tb
    assert shell.user_ns["job"].status().phase == "failed"
    no_leftovers(shell.user_ns["job"].id)


@pytest.mark.slow
def test_ctrl_c_during_wait_leaves_the_job_running_and_says_how_to_cancel(shell, no_leftovers):
    import os
    import signal
    import threading
    stop = threading.Event()

    def interrupt_once_running():  # Ctrl-C while the magic waits for a running job
        while not stop.wait(0.1):
            job = shell.user_ns.get("job")
            if job is not None and job.status().phase == "running":
                time.sleep(0.5)
                os.kill(os.getpid(), signal.SIGINT)
                return
    threading.Thread(target=interrupt_once_running, daemon=True).start()
    try:
        res, cap = run(shell, "--gpus 2 --wait -o job", "import time\ntime.sleep(60)")
    finally:
        stop.set()
    job = shell.user_ns["job"]
    assert res.error_in_exec is None                      # no traceback: one line
    lines = [ln for ln in cap.stderr.splitlines() if "interrupted" in ln]
    assert lines == [f"gpujobs: interrupted; job {job.id} keeps running "
                     "(cancel: job.cancel())"], cap.stderr
    assert job.status().phase == "running"                # Ctrl-C stopped the wait, not the job
    shell.run_cell(lines[0].split("(cancel: ", 1)[1][:-1])  # the line's call, run as written
    assert job.wait(15).phase == "cancelled"
    no_leftovers(job.id, within=10)


@pytest.mark.slow
def test_widget_cancel_button_cancels_a_real_job(shell, no_leftovers, recording_comm):
    from gpujobs.views import job_widget
    res, _ = run(shell, "--gpus 2 -o job", "import time\ntime.sleep(60)")
    job = shell.user_ns["job"]
    w = job_widget(job)
    deadline = time.monotonic() + 30
    while job.status().phase != "running" and time.monotonic() < deadline:
        time.sleep(0.1)
    w.cancel_button.click()
    assert w.updater.join(timeout=20)
    assert job.status().phase == "cancelled" and w.status.phase == "cancelled"
    assert w.cancel_button.disabled and "gpujobs-phase-cancelled" in w.header.value
    no_leftovers(job.id, within=10)


def test_display_job_publishes_widget_html_and_text(shell, monkeypatch, recording_comm):
    from tests.notebook.nbscript import ScriptedJob, script
    from gpujobs.views import display_job
    monkeypatch.setenv("GPUJOBS_DISPLAY", "widget")
    job = ScriptedJob(script()[-1:], value=7)
    updates = []
    from IPython.display import DisplayHandle
    monkeypatch.setattr(DisplayHandle, "update", lambda self, obj, **kw: updates.append(obj))
    with capture_output() as cap:
        w = display_job(job)
    # #31: the widget view alone, then its static copy (what a reopened notebook shows when
    # the kernel restarted and the widget's model is gone)
    view, copy = (o.data for o in cap.outputs)
    assert set(view) == {"application/vnd.jupyter.widget-view+json"}
    assert view["application/vnd.jupyter.widget-view+json"]["model_id"] == w.model_id
    assert set(copy) == {"text/html", "text/plain"} and "gpujobs-fallback" in copy["text/html"]
    assert "train: succeeded" in copy["text/plain"] and 'data-phase="succeeded"' in copy["text/html"]
    assert w.updater.join(timeout=5) and w.result_text == "7"
    assert "gpujobs-live" in w._dom_classes
    assert updates and "<code>7</code>" in updates[-1]["text/html"]  # the copy kept current
    monkeypatch.setenv("GPUJOBS_DISPLAY", "text")
    with capture_output() as cap:
        assert display_job(job) is None
    assert set(cap.outputs[0].data) == {"text/html", "text/plain"}


def test_job_names_are_derived_from_the_cell():
    from gpujobs_magic.cell import cell_job_name
    assert cell_job_name("# Train ResNet on CIFAR\nx = 1", 3) == "train-resnet-on-cifar"
    assert cell_job_name("t = f()\ntotal = t", 3, returns=("total",)) == "total"
    assert cell_job_name("import torch\nmodel = build()\ntrain_model(model)\n", 3) == "build"
    assert cell_job_name("import torch\nloss_value = torch.zeros(1)\n", 3) == "loss-value"
    assert cell_job_name("print(1)\n", 7) == "cell-7"
    assert cell_job_name("x = (", 2) == "cell-2"
    # #31: `ctx = gpujobs.context()` named every job "ctx"; tuple targets were skipped
    assert cell_job_name("import gpujobs\nctx = gpujobs.context()\nprint(ctx.rank)\n", 4) == "cell-4"
    assert cell_job_name("ctx = gpujobs.context()\nt = 1\ntotal, world = t, ctx.world_size\n", 4) \
        == "total-world"
    for cell in ("# Ünïcödé!!", "# " + "x" * 80, "# 9 lives"):
        gpujobs.job(print).name(cell_job_name(cell, 1)).spec()  # always a valid name


def test_gpujob_volume_reaches_submit(shell, monkeypatch):
    """[k8s-parity] 1: %%gpujob --volume CLAIM[:PATH] mounts a claim (checkpoints survive)."""
    from gpujobs_magic import magics
    seen: dict = {}
    monkeypatch.setattr(magics.gpujobs, "submit", lambda fn, **kw: seen.update(kw))
    shell.run_cell_magic("gpujob", "--volume ckpt:/mnt/ckpt", "x = 1\n")
    assert seen["volume"] == "ckpt:/mnt/ckpt"


def test_cell_number_in_names_is_the_prompt_number(shell, monkeypatch):
    """#31: a cell run as In [19] made a job named cell-20 (IPython 9 counts ahead)."""
    seen = {}

    def fake_submit(fn, **kw):
        seen.update(kw, fn=fn)
        return None
    monkeypatch.setattr(gpujobs, "submit", fake_submit)
    for _ in range(3):
        shell.run_cell("x = 1", store_history=True)
    res = shell.run_cell("%%gpujob\nprint(1)\n", store_history=True)
    assert res.error_in_exec is None, res.error_in_exec
    assert seen["name"] == f"cell-{res.execution_count}", (seen["name"], res.execution_count)
    assert seen["fn"].__name__ == f"cell_{res.execution_count}"
