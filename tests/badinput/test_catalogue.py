"""The bad-input catalogue: one table, every entry point (builder / gpujobs.submit, Kubernetes
submit, the %%gpujob magic, the installed CLI, sbatch files, config files).

Each row asserts the error class, that the message names the field or object AND the fix,
and that nothing was created: no job process (env GPUJOBS_JOB_ID under this GPUJOBS_HOME),
no job dir / key / record under GPUJOBS_HOME, no object in the fake apiserver.
The count is printed and written to tests/artifacts/badinput_catalogue.json.
"""
from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest
from tests.support import ipython_shell

import gpujobs
from gpujobs.errors import PayloadError, PreflightError, QuotaError, SpecError
from gpujobs.slurm import from_sbatch

from .conftest import NS, job_processes, k8s_objects, state_entries

GPUJOBS_CLI = Path(sys.executable).parent / "gpujobs"
ARTIFACT = Path(__file__).resolve().parents[1] / "artifacts" / "badinput_catalogue.json"


def train(x=1):
    return x


@dataclass
class Case:
    id: str
    entry: str                      # api | k8s | magic | cli | sbatch | config
    run: Any                        # callable / (line, cell) / argv / sbatch text
    error: Any                      # exception class, or the CLI exit code
    names: tuple[str, ...]          # words naming the field or object (all must appear)
    fix: tuple[str, ...]            # words of the fix (all must appear)
    config: str | None = None       # TOML written to GPUJOBS_CONFIG first
    env: dict = field(default_factory=dict)
    xfail: str | None = None


H = "#!/bin/bash\n"
B = gpujobs.job


def k8s(builder: Callable[[], Any]):
    """Submit through a KubernetesBackend pointed at the fake apiserver."""
    def go(be):
        return be.submit(builder().spec())
    go.k8s = True
    return go


CASES: list[Case] = [
    # ---------------------------------------------------------------- builder / gpujobs.submit
    Case("submit-gpus-zero", "api", lambda: gpujobs.submit(train, gpus=0), SpecError, ("gpus",), ("gpus=N",)),
    Case("submit-gpus-string", "api", lambda: gpujobs.submit(train, gpus="2"), SpecError, ("gpus", "integer"), ("gpus=N",)),
    Case("submit-gpus-bool", "api", lambda: gpujobs.submit(train, gpus=True), SpecError, ("gpus", "bool"), ("gpus=N",)),
    Case("submit-uneven-split", "api", lambda: gpujobs.submit(train, gpus=3, nodes=2), SpecError, ("gpus", "2 nodes"), ("multiple of nodes",)),
    Case("submit-unknown-framework", "api", lambda: gpujobs.submit(train, framework="jax"), SpecError, ("framework", "jax"), ("ddp", "mpi")),
    Case("submit-not-callable", "api", lambda: gpujobs.submit(42), SpecError, ("fn", "not callable"), ("function itself",)),
    Case("submit-none", "api", lambda: gpujobs.submit(None), SpecError, ("fn",), ("pass a callable",)),
    Case("submit-unknown-backend", "api", lambda: gpujobs.submit(train, backend="slurm"), SpecError, ("backend", "slurm"), ("kubernetes", "local")),
    Case("local-unknown-queue", "api", lambda: gpujobs.submit(train, queue="gpu-big"), SpecError, ("queue", "gpu-big"), ("[[local.queues]]", "config.toml")),
    Case("local-never-fits", "api", lambda: B(train).ddp(gpus=64).submit(), QuotaError, ("64", "gpu", "default"), ("fewer",)),
    Case("builder-name", "api", lambda: B(train).name("Bad_Name").submit(), SpecError, ("name", "Bad_Name"), ("lowercase",)),
    Case("builder-queue-name", "api", lambda: B(train).queue("Team A").submit(), SpecError, ("queue", "Team A"), ("lowercase",)),
    Case("builder-env-name", "api", lambda: B(train).env(**{"1BAD": "x"}).submit(), SpecError, ("env", "1BAD"), ("letters, digits",)),
    Case("builder-env-value", "api", lambda: B(train).env(LR=0.1).submit(), SpecError, ("env[LR]", "string"), ("str(value)",)),
    Case("builder-secret-env-value", "api", lambda: B(train).secret_env(TOKEN="plain").submit(), SpecError, ("secret_env[TOKEN]",), ("secret-name",)),
    Case("builder-memory", "api", lambda: B(train).resources(memory="lots").submit(), SpecError, ("memory", "lots"), ("16Gi",)),
    Case("builder-cpus", "api", lambda: B(train).resources(cpus_per_proc=-2).submit(), SpecError, ("cpus_per_proc",), ("cpus_per_proc=4",)),
    Case("builder-unknown-option", "api", lambda: B(train).options(nonsense=1), SpecError, ("nonsense", "not a job option"), ("use one of",)),
    Case("builder-gpus-twice", "api", lambda: B(train).ddp(gpus=2, gpus_per_node=1), SpecError, ("gpus", "gpus_per_node"), ("one of them",)),
    Case("builder-mpi-divisor", "api", lambda: B(train).mpi(ranks=6, ranks_per_node=4), SpecError, ("ranks_per_node",), ("ranks_per_node=3",)),
    Case("builder-cpu-gang-no-count", "api", lambda: B(train).ddp(gpus_per_node=0), SpecError, ("procs_per_node",), ("procs_per_node=N",)),
    Case("builder-procs-vs-gpus", "api", lambda: B(train).ddp(gpus_per_node=2, procs_per_node=3), SpecError, ("procs_per_node",), ("drop procs_per_node",)),
    Case("builder-nodes-zero", "api", lambda: B(train).ddp(nodes=0), SpecError, ("nodes",), ("nodes=1",)),
    Case("builder-ray-workers-zero", "api", lambda: B(train).ray(workers=0), SpecError, ("workers",), ("workers=1",)),
    Case("builder-unknown-kind", "api", lambda: B(train).options(kind="Deployment").submit(), SpecError, ("kind", "Deployment"), ("PyTorchJob",)),
    Case("builder-ray-as-pytorchjob", "api", lambda: B(train).ray().options(kind="PyTorchJob").submit(), SpecError, ("kind", "RayJob"), (".kubernetes(kind='RayJob'), or drop kind",)),
    Case("builder-volcano-mode", "api", lambda: B(train).options(volcano="maybe").submit(), SpecError, ("volcano", "maybe"), ("gang",)),
    Case("builder-mig-profile", "api", lambda: B(train).mig("bad profile!").submit(), SpecError, ("gpu_resource",), ("mig-1g.10gb",)),
    Case("builder-grace", "api", lambda: B(train).options(grace_period_s=-1).submit(), SpecError, ("grace_period_s",), ("grace_period_s=30",)),
    Case("builder-max-runtime", "api", lambda: B(train).options(max_runtime_s=-5).submit(), SpecError, ("max_runtime_s",), (".max_runtime(3600)",)),
    Case("builder-max-runtime-nan", "api", lambda: B(train).max_runtime(float("nan")).submit(), SpecError, ("max_runtime_s", "nan"), (".max_runtime(3600)",)),
    Case("builder-image-reference", "api", lambda: B(train).image("Pytorch/pytorch:2.5").submit(), SpecError, ("image", "Pytorch"), ("'pytorch/pytorch:2.5'",)),
    Case("builder-toleration-type", "api", lambda: B(train).tolerations("x").submit(), SpecError, ("tolerations",), ("operator",)),
    Case("builder-node-selector-value", "api", lambda: B(train).node_selector(zone=1).submit(), SpecError, ("node_selector[zone]",), ("'1'",)),
    Case("builder-volume-claim", "api", lambda: B(train).volume("Bad Claim").submit(), SpecError, ("volume", "Bad Claim"), ("claim's name",)),
    Case("builder-volume-relative-path", "api", lambda: B(train).volume("data", "mnt").submit(), SpecError, ("volume", "mnt"), ("absolute path",)),
    Case("builder-command-and-fn", "api", lambda: B(train).options(command=("ls",)).submit(), SpecError, ("command",), ("one of them",)),
    Case("payload-unpicklable-arg", "api", lambda: B(train, threading.Lock()).submit(), PayloadError, ("args[0]", "lock"), ("inside the function",)),
    Case("payload-generator-kwarg", "api", lambda: B(train, x=(i for i in range(3))).submit(), PayloadError, ("kwargs['x']", "generator"), ("inside the function",)),
    Case("payload-over-builder-limit", "api", lambda: B(train, b"x" * 50_000).options(max_payload_bytes=1000).submit(), PayloadError, ("payload", "args[0]"), ("max_payload_bytes",)),
    Case("attach-unknown-local", "api", lambda: gpujobs.attach("nope-123"), SpecError, ("job_id", "nope-123"), ("gpujobs.jobs()",)),
    Case("attach-k8s-bad-id", "api", lambda: gpujobs.attach("noslash", backend="kubernetes"), SpecError, ("job_id", "noslash"), ("<namespace>/<name>",)),
    # ---------------------------------------------------------------- Kubernetes submit (fake apiserver)
    Case("k8s-unknown-localqueue", "k8s", k8s(lambda: B(train).queue("nope").options(kind="PyTorchJob")), PreflightError, ("LocalQueue", "nope"), ("kubectl get localqueues",)),
    Case("k8s-unknown-priority", "k8s", k8s(lambda: B(train).queue("q").priority("urgent").options(kind="PyTorchJob")), PreflightError, ("WorkloadPriorityClass", "urgent"), ("kubectl get workloadpriorityclasses",)),
    Case("k8s-crd-missing", "k8s", k8s(lambda: B(train).queue("q").options(kind="TrainJob")), PreflightError, ("trainjobs.trainer.kubeflow.org",), ("install its operator",)),
    Case("k8s-never-fits-queue", "k8s", k8s(lambda: B(train).ddp(gpus=8).queue("q").options(kind="PyTorchJob")), QuotaError, ("ClusterQueue cq",), ("Ask for fewer",)),
    Case("k8s-secret-limit", "k8s", k8s(lambda: B(train, b"x" * 1_200_000).queue("q").options(kind="PyTorchJob")), PayloadError, ("payload", "usable bytes of a Kubernetes Secret"), ("PVC",)),
    Case("k8s-volcano-missing", "k8s", k8s(lambda: B(train).queue("q").options(kind="PyTorchJob", volcano="gang", volcano_queue="vq")), PreflightError, ("podgroups.scheduling.volcano.sh",), ("install Volcano",)),
    Case("k8s-bad-namespace", "k8s", k8s(lambda: B(train).queue("q").kubernetes(namespace="Bad NS")), SpecError, ("namespace", "Bad NS"), ("lowercase",)),
    # ---------------------------------------------------------------- %%gpujob magic
    Case("magic-gpus-zero", "magic", ("--gpus 0", "x = 1"), "UsageError", ("%%gpujob", "gpus"), ("--gpus N",)),
    Case("magic-gpus-not-int", "magic", ("--gpus two", "x = 1"), "UsageError", ("--gpus", "two"), ("int",)),
    Case("magic-framework", "magic", ("--framework jax", "x = 1"), "UsageError", ("--framework", "jax"), ("choose from",)),
    Case("magic-return-unassigned", "magic", ("--return nope -o j", "x = 1"), "UsageError", ("--return", "nope"), ("it assigns: x",)),
    Case("magic-out-not-a-name", "magic", ("-o 1bad", "x = 1"), "UsageError", ("-o", "1bad"), ("Python name",)),
    Case("magic-shell-escape", "magic", ("-o j", "!ls\nx = 1"), "UsageError", ("line 1", "!ls"), ("subprocess",)),
    Case("magic-line-magic", "magic", ("-o j", "%time x = 1"), "UsageError", ("line 1", "%time"), ("another cell",)),
    Case("magic-syntax", "magic", ("-o j", "x = (1,"), "UsageError", ("does not parse", "line 1"), ("never closed",)),
    Case("magic-uneven", "magic", ("--gpus 3 --nodes 2 -o j", "x = 1"), "UsageError", ("gpus", "2 nodes"), ("multiple of --nodes",)),
    Case("magic-unpicklable-global", "magic", ("-o j", "with lock:\n    x = 1"), "UsageError", ("global 'lock'",), ("inside the function",)),
    Case("magic-unknown-backend", "magic", ("--backend slurm -o j", "x = 1"), "UsageError", ("backend", "slurm"), ("kubernetes, local",)),
    Case("magic-local-queue", "magic", ("--queue gpu-big -o j", "x = 1"), "UsageError", ("queue", "gpu-big"), ("[[local.queues]]",)),
    Case("magic-line-backend", "magic", ("%backend slurm", None), "UsageError", ("backend", "slurm"), ("kubernetes, local",)),
    # ---------------------------------------------------------------- CLI (installed entry point)
    Case("cli-missing-file", "cli", ["submit", "nonexist.py:main"], 2, ("target", "nonexist.py"), ("path of the Python file",)),
    Case("cli-missing-function", "cli", ["submit", "train.py:missing"], 2, ("target", "missing"), ("define missing",)),
    Case("cli-gpus-negative", "cli", ["submit", "train.py:main", "--gpus", "-1"], 2, ("gpus",), ("fix:",)),
    Case("cli-time-not-a-limit", "cli", ["submit", "train.py:main", "--time", "1h"], 2, ("--time", "1h"), ("--time 01:00:00",)),
    Case("cli-k8s-mpi-no-image-no-cluster", "cli", ["submit", "train.py:main", "--framework", "mpi", "--backend", "kubernetes"], 2,
         ("image", "MPI"), ("--image gpujobs-mpi:py",), env={"KUBECONFIG": "/nonexistent/kubeconfig"}),
    Case("cli-uneven", "cli", ["submit", "train.py:main", "--gpus", "3", "--nodes", "2"], 2, ("--gpus",), ("multiple of --nodes",)),
    Case("cli-queue-name", "cli", ["submit", "train.py:main", "--queue", "Bad Q"], 2, ("queue", "Bad Q"), ("lowercase",)),
    Case("cli-env-syntax", "cli", ["submit", "train.py:main", "--env", "NOEQUALS"], 2, ("--env", "NOEQUALS"), ("KEY=VALUE",)),
    Case("cli-kind", "cli", ["render", "train.py:main", "--kind", "Deployment"], 2, ("kind", "Deployment"), ("PyTorchJob",)),
    Case("cli-framework", "cli", ["submit", "train.py:main", "--framework", "jax"], 2, ("--framework", "jax"), ("choose from",)),
    Case("cli-backend", "cli", ["submit", "train.py:main", "--backend", "slurm"], 2, ("backend", "slurm"), ("kubernetes, local",)),
    Case("cli-never-fits", "cli", ["submit", "train.py:main", "--gpus", "64"], 2, ("64", "gpu", "default"), ("fewer",)),
    Case("cli-status-unknown", "cli", ["status", "no-such-job"], 4, ("job_id", "no-such-job"), ("gpujobs queue -a",)),
    Case("cli-sbatch-args", "cli", ["submit", "job.sbatch", "extra"], 2, ("args", "sbatch"), ("launch line",)),
    # ---------------------------------------------------------------- sbatch files
    Case("sbatch-unknown-directive", "sbatch", H + "#SBATCH --frobnicate=1\nsrun python t.py\n", SpecError, (":2", "--frobnicate"), ("man sbatch",)),
    Case("sbatch-dependency", "sbatch", H + "#SBATCH --dependency=afterok:1\nsrun python t.py\n", SpecError, (":2", "--dependency"), ("job_a.result()",)),
    Case("sbatch-no-launch", "sbatch", H + "#SBATCH --nodes=1\necho hi\n", SpecError, ("body", "no launch line"), ("srun, torchrun",)),
    Case("sbatch-two-launches", "sbatch", H + "srun python a.py\nsrun python b.py\n", SpecError, ("2 launch lines",), ("separate jobs",)),
    Case("sbatch-array", "sbatch", H + "#SBATCH --array=0-3\nsrun python t.py\n", SpecError, ("--array", "4 jobs"), ("from_sbatch_array",)),
    Case("sbatch-nodes-zero", "sbatch", H + "#SBATCH --nodes=0\nsrun python t.py\n", SpecError, (":2", "--nodes"), (">= 1",)),
    Case("sbatch-time", "sbatch", H + "#SBATCH --time=forever\nsrun python t.py\n", SpecError, ("--time", "forever"), ("H:M:S",)),
    Case("sbatch-mem", "sbatch", H + "#SBATCH --mem=lots\nsrun python t.py\n", SpecError, ("--mem", "lots"), ("64G",)),
    Case("sbatch-nodelist", "sbatch", H + "#SBATCH --nodelist=node[1-4]\nsrun python t.py\n", SpecError, ("--nodelist",), ("--constraint",)),
    Case("sbatch-ranks-vs-gpus", "sbatch", H + "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=3\n#SBATCH --gpus-per-node=4\nsrun python t.py\n", SpecError, ("srun", "4 GPUs"), ("4 ranks per node",)),
    Case("sbatch-partition-name", "sbatch", H + "#SBATCH --partition=Big_GPU\nsrun python t.py\n", SpecError, ("--partition", "Big_GPU"), ("mapping file",)),
    Case("sbatch-missing-file", "sbatch", "/no/such/file.sbatch", SpecError, ("sbatch", "/no/such/file.sbatch"), ("existing sbatch file",)),
    Case("sbatch-not-text", "sbatch", 42, SpecError, ("sbatch", "int"), ("file path",)),
    # ---------------------------------------------------------------- config files (GPUJOBS_CONFIG)
    Case("config-broken-toml", "config", lambda: gpujobs.submit(train), SpecError, ("config file", "not valid TOML", "line 1"), ("GPUJOBS_CONFIG",), config="this is = not [toml\n"),
    Case("config-is-a-directory", "config", lambda: gpujobs.submit(train), SpecError, ("config file", "cannot be read"), ("GPUJOBS_CONFIG",), config="<dir>"),
    Case("config-binary-junk", "config", lambda: gpujobs.submit(train), SpecError, ("config file",), ("GPUJOBS_CONFIG",), config="<binary>"),
    Case("config-unknown-backend", "config", lambda: gpujobs.submit(train), SpecError, ("backend", "slurm"), ("kubernetes, local",), config='backend = "slurm"\n'),
    Case("config-backend-not-string", "config", lambda: gpujobs.submit(train), SpecError, ("backend", "3"), ("kubernetes, local",), config="backend = 3\n"),
    Case("config-k8s-namespace", "config", lambda: B(train).render(kind="PyTorchJob"), SpecError, ("namespace", "Bad NS", "config file"), ("lowercase",), config='[kubernetes]\nnamespace = "Bad NS"\n'),
    Case("config-cli-broken-toml", "cli", ["submit", "train.py:main"], 2, ("config file", "not valid TOML"), ("GPUJOBS_CONFIG",), config="[local\n"),
    Case("config-queue-unknown-field", "config", lambda: gpujobs.submit(train), SpecError, ("gpuz",), ("gpus",),
         config='[[local.queues]]\nname = "default"\ngpuz = 4\n'),
    Case("config-priority-not-int", "config", lambda: gpujobs.submit(train, priority="high"), SpecError, ("priorities", "high"), ("integer",),
         config='[priorities]\nhigh = "abc"\n'),
]

_RECORD: collections.Counter = collections.Counter()


@pytest.fixture(scope="module")
def shell(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp, ipython_shell(mp, tmp_path_factory.mktemp("ipython")) as sh:
        sh.user_ns["lock"] = threading.Lock()
        yield sh


def _message_ok(text: str, case: Case) -> None:
    low = text.lower()
    for w in case.names:
        assert w.lower() in low, f"{case.id}: the message does not name {w!r}: {text}"
    for w in case.fix:
        assert w.lower() in low, f"{case.id}: the message does not give the fix {w!r}: {text}"


def _write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gpujobs.toml"
    if text == "<dir>":
        path.mkdir()
    elif text == "<binary>":
        path.write_bytes(b"\xff\xfe\x00junk")
    else:
        path.write_text(text)
    return path


def _params():
    for c in CASES:
        marks = []
        if c.entry == "cli":
            marks.append(pytest.mark.slow)
        if c.xfail:
            marks.append(pytest.mark.xfail(reason=c.xfail, strict=False))
        yield pytest.param(c, id=f"{c.entry}:{c.id}", marks=marks)


@pytest.mark.parametrize("case", list(_params()))
def test_bad_input(case: Case, gpujobs_home, tmp_path, monkeypatch, request):
    from gpujobs.backends import get_backend
    monkeypatch.setenv("GPUJOBS_LOCAL_GPUS", "2")
    if case.config is not None:
        monkeypatch.setenv("GPUJOBS_CONFIG", str(_write_config(tmp_path, case.config)))
    else:
        monkeypatch.setenv("GPUJOBS_CONFIG", str(tmp_path / "no-config.toml"))
    get_backend.cache_clear()
    server = None

    if case.entry in ("api", "config"):
        with pytest.raises(case.error) as info:
            made = case.run()
            if hasattr(made, "cancel"):  # accepted bad input: stop what it started, then fail
                made.cancel()
                made.wait(timeout=30)
        _message_ok(str(info.value), case)
        if isinstance(info.value, SpecError):
            assert info.value.field and info.value.fix, f"{case.id}: SpecError without field/fix"
    elif case.entry == "k8s":
        import kubernetes
        from gpujobs.backends.kubernetes import KubernetesBackend
        server = request.getfixturevalue("apiserver")
        before = k8s_objects(server)
        api = kubernetes.client.ApiClient(server.configuration())
        try:
            be = KubernetesBackend(api, namespace=NS, home=gpujobs_home, request_timeout=5.0)
            with pytest.raises(case.error) as info:
                case.run(be)
        finally:
            api.close()
        _message_ok(str(info.value), case)
        assert k8s_objects(server) == before, f"{case.id}: objects were created in the cluster"
    elif case.entry == "magic":
        from IPython.core.error import UsageError
        sh = request.getfixturevalue("shell")
        sh.user_ns.pop("j", None)
        line, cell = case.run
        with pytest.raises(UsageError) as info:
            if cell is None:
                sh.run_line_magic("gpujobs", line.lstrip("%"))
            else:
                sh.run_cell_magic("gpujob", line, cell)
        _message_ok(str(info.value), case)
        assert "j" not in sh.user_ns, f"{case.id}: -o bound a job handle"
    elif case.entry == "cli":
        work = tmp_path / "work"
        work.mkdir()
        (work / "train.py").write_text("def main(x=1):\n    return x\n")
        (work / "job.sbatch").write_text(H + "#SBATCH --nodes=1\nsrun python train.py\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUJOBS_")}
        env.update(GPUJOBS_HOME=str(gpujobs_home), GPUJOBS_LOCAL_GPUS="2",
                   GPUJOBS_CONFIG=os.environ["GPUJOBS_CONFIG"], **case.env)
        proc = subprocess.run([str(GPUJOBS_CLI), *case.run], cwd=work, env=env, capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == case.error, (proc.returncode, proc.stderr)
        err = proc.stderr.strip().splitlines()
        assert err and err[-1].startswith("gpujobs: "), proc.stderr
        assert "Traceback" not in proc.stderr
        _message_ok(err[-1], case)
        assert "submitted" not in proc.stdout
    elif case.entry == "sbatch":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # setup lines ignored by the translator warn
            with pytest.raises(case.error) as info:
                from_sbatch(case.run).spec()
        _message_ok(str(info.value), case)
    else:  # pragma: no cover
        raise AssertionError(case.entry)

    assert state_entries(gpujobs_home) == [], f"{case.id}: state was written under GPUJOBS_HOME"
    assert job_processes(gpujobs_home) == [], f"{case.id}: a job process was started"
    _RECORD[case.entry] += 1


def test_catalogue_size():
    """At least 40 cases over all six entry points; the count is recorded as an artifact."""
    by_entry = collections.Counter(c.entry for c in CASES)
    assert len(CASES) >= 40 and set(by_entry) == {"api", "k8s", "magic", "cli", "sbatch", "config"}
    assert len({c.id for c in CASES}) == len(CASES), "duplicate case ids"
    ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
    ARTIFACT.write_text(json.dumps({"cases": len(CASES), "by_entry": dict(sorted(by_entry.items())),
                                    "expected_failures": [c.id for c in CASES if c.xfail]}, indent=1))
    print(f"\nbad-input catalogue: {len(CASES)} cases {dict(sorted(by_entry.items()))}")
