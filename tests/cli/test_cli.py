"""The ``gpujobs`` command through its installed entry point: parsing, errors, exit codes,
render/admin output parsed back. (Real jobs: test_cli_jobs.py.)"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpujobs_sim import crds

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "slurm" / "corpus"
ADMIN = ROOT / "tests" / "admin" / "data"


def one_clean_line(stderr: str) -> None:
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("gpujobs:")]
    assert len(errors) == 1, stderr


def test_help_lists_every_verb(cli):
    r = cli("--help")
    assert r.returncode == 0
    for verb in ("submit", "sbatch", "queue", "status", "logs", "cancel", "render", "admin", "agent"):
        assert verb in r.stdout
    assert "exit codes" in r.stdout


@pytest.mark.parametrize("args", [("bogus",), (), ("submit",), ("status",), ("queue", "-o", "xml"),
                                  ("submit", "x.py:f", "--gpus", "two")])
def test_usage_errors_exit_2(cli, args):
    r = cli(*args)
    assert r.returncode == 2, r
    assert "Traceback" not in r.stderr


def test_unknown_job_is_4_with_one_line(cli):
    for verb in ("status", "logs", "cancel"):
        r = cli(verb, "no-such-job-123")
        assert r.returncode == 4, (verb, r)
        one_clean_line(r.stderr)
        assert "no-such-job-123" in r.stderr


def test_debug_shows_the_traceback(cli):
    r = cli("status", "no-such-job-123", env={"GPUJOBS_DEBUG": "1"})
    assert r.returncode != 0 and "Traceback" in r.stderr


def test_bad_target_and_backend_are_usage_errors(cli):
    r = cli("submit", "nothing_here:fn")
    assert r.returncode == 2
    one_clean_line(r.stderr)
    r = cli("queue", "--backend", "nope")
    assert r.returncode == 2 and "unknown backend" in r.stderr


def test_malformed_sbatch_names_the_line(cli):
    r = cli("sbatch", CORPUS / "malformed_time.sbatch")
    assert r.returncode == 2
    one_clean_line(r.stderr)
    assert "malformed_time.sbatch:3 --time" in r.stderr and "fix:" in r.stderr


def test_sbatch_refuses_plain_scripts(cli):
    (cli.cwd / "plain.py").write_text("print('hi')\n")
    r = cli("sbatch", "plain.py")
    assert r.returncode == 2 and "not an sbatch script" in r.stderr


def test_sbatch_shape_is_the_scripts(cli):
    r = cli("sbatch", CORPUS / "single_gpu.sbatch", "--gpus", "4")
    assert r.returncode == 2 and "#SBATCH" in r.stderr


def test_kubernetes_unreachable_is_3(cli, tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}]}))
    for kc in ("/nonexistent/kubeconfig", str(kubeconfig)):
        r = cli("queue", "--backend", "kubernetes", env={"KUBECONFIG": kc}, timeout=60)
        assert r.returncode == 3, r
        one_clean_line(r.stderr)
    # the server is named, not a watch that "did not sync within 10 s" (the wait ends at the
    # refused connects)
    assert "the Kubernetes API server at https://127.0.0.1:9 cannot be reached" in r.stderr, r.stderr


def test_render_sbatch_json_parses_back(cli):
    r = cli("render", CORPUS / "ddp_srun_torchrun.sbatch", "-o", "json")
    assert r.returncode == 0, r.stderr
    objs = json.loads(r.stdout)
    (job,) = [o for o in objs if o["kind"] in ("TrainJob", "PyTorchJob")]
    labels = job["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == "gpu"          # partition → LocalQueue
    assert labels["kueue.x-k8s.io/priority-class"] == "high"     # QoS → priority class
    assert labels["kueue.x-k8s.io/max-exec-time-seconds"] == "95040"  # 86400 + 10%, after the job's deadline
    assert "--output" in r.stderr  # the translator's warnings reach the user
    if crds.crds_available():
        for o in objs:
            if o.get("apiVersion", "v1") != "v1":
                assert crds.schema_errors(o) == [], o["kind"]


def test_render_sbatch_yaml_with_mapping(cli):
    r = cli("render", CORPUS / "constraint_mapped.sbatch", "--mapping", CORPUS / "site-mapping.yaml")
    assert r.returncode == 0, r.stderr
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    labels = next(d for d in docs if d["apiVersion"] != "v1")["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == "team-a-long"
    assert "NVIDIA-H100-80GB-HBM3" in r.stdout and "network.example.org/infiniband" in r.stdout


def test_render_function_and_queue_override(cli):
    (cli.cwd / "mod.py").write_text("def train(n):\n    return n\n")
    r = cli("render", "mod.py:train", "3", "--gpus", "4", "--nodes", "2", "--queue", "team-a",
            "--kind", "PyTorchJob", "-o", "json")
    assert r.returncode == 0, r.stderr
    objs = json.loads(r.stdout)
    kinds = [o["kind"] for o in objs]
    assert kinds == ["ConfigMap", "Secret", "PyTorchJob"]  # shared runtime + key, then the job
    job = objs[kinds.index("PyTorchJob")]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"


def test_admin_queues_from_table_json(cli):
    r = cli("admin", "queues", ADMIN / "teams.yaml", "-o", "json")
    assert r.returncode == 0, r.stderr
    objs = json.loads(r.stdout)
    assert {o["kind"] for o in objs} == {"ResourceFlavor", "WorkloadPriorityClass", "ClusterQueue", "LocalQueue"}
    if crds.crds_available():
        assert all(crds.schema_errors(o) == [] for o in objs)


def test_admin_queues_from_slurm_conf_yaml(cli):
    r = cli("admin", "queues", "--slurm-conf", ADMIN / "slurm.conf", "-n", "research")
    assert r.returncode == 0, r.stderr
    docs = list(yaml.safe_load_all(r.stdout))
    assert {d["metadata"]["name"] for d in docs if d["kind"] == "ClusterQueue"} == {"a100", "h100", "cpu", "debug-all"}
    assert all(d["metadata"]["namespace"] == "research" for d in docs if d["kind"] == "LocalQueue")
    assert "share 1 node" in r.stderr
    t = cli("admin", "queues", "--slurm-conf", ADMIN / "slurm.conf", "--table", "-n", "research")
    assert t.returncode == 0
    table = yaml.safe_load(t.stdout)
    assert table["teams"]["a100"]["quota"]["a100"]["gpu"] == 32
    # the printed table renders again, to the same objects
    (cli.cwd / "t.yaml").write_text(t.stdout)
    again = cli("admin", "queues", "t.yaml")
    assert list(yaml.safe_load_all(again.stdout)) == [d for d in docs if d]


def test_admin_queues_errors(cli):
    assert cli("admin", "queues").returncode == 2
    (cli.cwd / "bad.yaml").write_text("teams: {a: {quota: {nope: {gpu: 1}}}}\n")
    r = cli("admin", "queues", "bad.yaml")
    assert r.returncode == 2
    one_clean_line(r.stderr)
    assert "flavor 'nope'" in r.stderr


def test_queue_json_is_a_list(cli):
    r = cli("queue", "-o", "json")
    assert r.returncode == 0, r.stderr
    assert isinstance(json.loads(r.stdout), list)
    r = cli("queue")
    assert r.stdout.split()[:11] == ["JOBID", "NAME", "USER", "QUEUE", "GPUS", "PHASE", "POS", "AGE",
                                     "START", "REASON", "PROGRESS"]


def test_agent_stop_without_agent_is_fine(cli):
    r = cli("agent", "stop")
    assert r.returncode == 0, r.stderr


def test_function_arguments_are_converted_by_type_hint():
    from pathlib import Path

    from gpujobs.cli.targets import convert_args

    def f(n: int, x: float, flag: bool, p: Path, s: str | None, plain, *rest: int):
        pass  # annotations are strings here (from __future__ import annotations)
    values, as_str = convert_args(f, ["15", "0.5", "no", "/tmp", "s", "raw", "7", "8"])
    assert values == [15, 0.5, False, Path("/tmp"), "s", "raw", 7, 8]
    assert as_str == ["plain='raw'"]


def test_a_str_default_needs_no_warning_and_a_typo_gets_did_you_mean(cli):
    """#31: "passing name='hi' as str" when the default already says str; no "did you mean
    main?" for train.py:mian."""
    from gpujobs.cli.targets import convert_args

    def f(name="x", other=None):
        pass
    assert convert_args(f, ["hi", "y"])[1] == ["other='y'"]
    (cli.cwd / "train.py").write_text("def main():\n    return 1\n")
    r = cli("submit", "train.py:mian", "--gpus", "0")
    assert r.returncode == 2 and "did you mean main?" in r.stderr, r.stderr
    assert "train.py:main" in r.stderr, r.stderr


def test_bad_typed_argument_and_too_many_are_usage_errors(cli):
    (cli.cwd / "t.py").write_text("def f(n: int):\n    return n\n")
    r = cli("submit", "t.py:f", "fifteen", "--gpus", "0")
    assert r.returncode == 2 and "argument n: 'fifteen' is not an int" in r.stderr, r.stderr
    r = cli("submit", "t.py:f", "1", "2", "--gpus", "0")
    assert r.returncode == 2 and "too many positional arguments" in r.stderr, r.stderr
    assert not (cli.home / "jobs").exists() or not list((cli.home / "jobs").iterdir())


def test_queue_with_an_unknown_name_is_a_usage_error_naming_the_known_queues(cli):
    r = cli("queue", "-q", "typo")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "unknown queue 'typo'" in r.stderr and "known: default" in r.stderr
    assert r.stdout == ""


def test_render_job_only_prints_the_job_and_names_what_else_must_exist(cli):
    import yaml
    (cli.cwd / "t.py").write_text("def f(n: int):\n    return n\n")
    full = cli("render", "t.py:f", "3", "--gpus", "2", "--kind", "PyTorchJob")
    only = cli("render", "t.py:f", "3", "--gpus", "2", "--kind", "PyTorchJob", "--job-only")
    assert full.returncode == 0 and only.returncode == 0, only.stderr
    kinds = [d["kind"] for d in yaml.safe_load_all(only.stdout) if d]
    assert kinds == ["PyTorchJob"]
    assert [d["kind"] for d in yaml.safe_load_all(full.stdout) if d][-1] == "PyTorchJob"
    assert len(only.stdout) < len(full.stdout) / 2
    assert "also needed in namespace default: ConfigMap gpujobs-runtime-" in only.stderr
    assert "Secret gpujobs-key-" in only.stderr


def test_a_warning_is_one_clean_line(cli):
    """[k8s-parity] 7: the PyTorchJob deprecation as ``gpujobs: warning: …``, not Python's
    ``file:line: Category: …`` plus the source line."""
    (cli.cwd / "t.py").write_text("def f(n: int):\n    return n\n")
    r = cli("render", "t.py:f", "3", "--gpus", "1", "--kind", "PyTorchJob", "--job-only")
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "PyTorchJob under Kueue" in ln]
    assert len(lines) == 1 and lines[0].startswith("gpujobs: warning: PyTorchJob under Kueue")
    assert "DeprecatedPathWarning" not in r.stderr and "kf.pytorchjob" not in r.stderr


def test_admin_mpi_image_prints_a_dockerfile_docker_builds_from_stdin(cli):
    """[k8s-parity] 7: the MPI image fix runs for a pip user (no docker/mpi folder)."""
    r = cli("admin", "mpi-image")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[1].startswith("FROM python:${PYTHON}-slim") and not any(ln.startswith(("COPY", "ADD")) for ln in lines)
