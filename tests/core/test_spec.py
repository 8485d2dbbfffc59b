"""JobSpec / builder validation: every bad input is a SpecError naming the field and the fix."""
from __future__ import annotations

import socket
import threading

import pytest

import gpujobs
from gpujobs.errors import PayloadError, SpecError
from gpujobs.spec import JobSpec


def noop():
    return 1


@pytest.mark.parametrize("gpus, problem", [
    (0, ">= 1"), (-2, ">= 1"), (1.5, "integer"), (True, "integer"), ("4", "integer"), (None, "integer"),
])
def test_submit_rejects_bad_gpus(gpus, problem):
    with pytest.raises(SpecError) as err:
        gpujobs.submit(noop, gpus=gpus)
    assert err.value.field == "gpus"
    assert problem in str(err.value) and "fix:" in str(err.value)


def test_nodes_must_be_positive_and_divide_gpus():
    with pytest.raises(SpecError, match="nodes"):
        gpujobs.submit(noop, gpus=2, nodes=0)
    with pytest.raises(SpecError) as err:
        gpujobs.submit(noop, gpus=3, nodes=2)
    assert err.value.field == "gpus" and "evenly" in err.value.problem


def test_unknown_framework_lists_known():
    with pytest.raises(SpecError) as err:
        gpujobs.submit(noop, gpus=1, framework="horovod")
    assert err.value.field == "framework" and "ddp" in err.value.fix


def test_non_callable_fn():
    with pytest.raises(SpecError) as err:
        gpujobs.submit(noop(), gpus=1)
    assert err.value.field == "fn" and "not callable" in err.value.problem


@pytest.mark.parametrize("make_bad, name", [
    (threading.Lock, "lock"),
    (socket.socket, "socket"),
])
def test_unpicklable_argument_is_named(make_bad, name):
    bad = make_bad()
    try:
        with pytest.raises(PayloadError) as err:
            gpujobs.job(lambda *a: a, 1, bad).spec()
        assert "args[1]" in err.value.field
        assert "not serialisable" in err.value.problem
        assert isinstance(err.value, ValueError)
    finally:
        if hasattr(bad, "close"):
            bad.close()


def test_unpicklable_global_of_fn_is_named(tmp_path):
    fh = open(tmp_path / "f.txt", "w")
    try:
        def uses_file():
            return fh.name
        with pytest.raises(PayloadError) as err:
            gpujobs.job(uses_file).spec()
        assert "fh" in err.value.field and "TextIOWrapper" in err.value.problem
    finally:
        fh.close()


def test_payload_size_limit_has_hint():
    big = b"x" * 4096
    with pytest.raises(PayloadError) as err:
        gpujobs.job(lambda *a: a, big).options(max_payload_bytes=1024).spec()
    assert "over the limit" in err.value.problem and "args[0]" in err.value.problem
    assert "inside the function" in err.value.fix


@pytest.mark.parametrize("call, field", [
    (lambda b: b.mpi(ranks=6, ranks_per_node=4), "ranks_per_node"),
    (lambda b: b.ddp(nodes=2, gpus=3), "gpus"),
    (lambda b: b.ddp(gpus_per_node=0), "procs_per_node"),
    (lambda b: b.ray(workers=0), "workers"),
    (lambda b: b.name("Bad_Name"), "name"),
    (lambda b: b.queue("Team A"), "queue"),
    (lambda b: b.env(**{"1X": "v"}), "env"),
    (lambda b: b.env(X=3), "env[X]"),
    (lambda b: b.resources(memory="lots"), "memory"),
    (lambda b: b.options(kind="Deployment"), "kind"),
    (lambda b: b.options(volcano="maybe"), "volcano"),
    (lambda b: b.options(nonsense=1), "nonsense"),
    (lambda b: b.secret_env(TOKEN="plain-value"), "secret_env[TOKEN]"),
    # non-finite limits passed the `<= 0` / `< 0` checks (nan compares False) and reached the agent
    # and the renderers (activeDeadlineSeconds=int(inf) raises there)
    (lambda b: b.max_runtime(float("nan")), "max_runtime_s"),
    (lambda b: b.max_runtime(float("inf")), "max_runtime_s"),
    (lambda b: b.max_runtime(2**31), "max_runtime_s"),  # Kueue's maximumExecutionTimeSeconds: int32
    (lambda b: b.options(grace_period_s=float("nan")), "grace_period_s"),
    (lambda b: b.options(grace_period_s=float("inf")), "grace_period_s"),
    (lambda b: b.options(grace_period_s="30"), "grace_period_s"),
])
def test_builder_bad_input(call, field):
    with pytest.raises(SpecError) as err:
        call(gpujobs.job(noop)).spec()
    assert err.value.field == field
    assert err.value.fix


def test_spec_shape_and_roundtrip():
    spec = (gpujobs.job(noop).ddp(nodes=2, gpus_per_node=4).queue("team-a").priority("high")
            .env(A="1").secret_env(TOKEN=("hf", "token")).volume("data").spec())
    assert (spec.world_size, spec.total_gpus, spec.gang_size) == (8, 8, 2)
    again = JobSpec.from_dict(spec.to_dict(), payload=spec.payload())
    assert again == spec and again.payload() == spec.payload()
    mpi = gpujobs.job(noop).mpi(ranks=8, gpus_per_rank=1, ranks_per_node=4).spec()
    assert (mpi.nodes, mpi.procs_per_node, mpi.world_size) == (2, 4, 8)
    ray = gpujobs.job(noop).ray(workers=3, gpus_per_worker=2).spec()
    assert (ray.nodes, ray.total_gpus) == (3, 6)


def test_builders_are_immutable():
    base = gpujobs.job(noop).queue("a")
    other = base.queue("b")
    assert base.spec().queue == "a" and other.spec().queue == "b"


def test_attach_unknown_job_is_job_not_found():
    from gpujobs.errors import JobNotFound
    with pytest.raises(JobNotFound) as err:
        gpujobs.attach("no-such-job-123")
    assert isinstance(err.value, LookupError) and isinstance(err.value, SpecError)
    assert err.value.field == "job_id" and "gpujobs.jobs()" in err.value.fix


def takes_x(x, lr=0.1):
    return x


def takes_any(**kw):
    return kw


@pytest.mark.parametrize("fn, call, opt", [
    (takes_x, dict(gpu=2), "gpus"), (takes_any, dict(gpu=2), "gpus"),
    (takes_x, dict(queu="a"), "queue"), (takes_x, dict(node=2), "nodes"),
    (takes_x, dict(gpus_per_nod=2), "gpus_per_node"),
])
def test_misspelt_submit_option_is_refused_with_did_you_mean(fn, call, opt):
    args = (1,) if fn is takes_x else ()
    with pytest.raises(SpecError) as err:
        gpujobs.submit(fn, *args, **call)
    assert err.value.field == next(iter(call))
    assert f"did you mean {opt}=?" in err.value.problem and err.value.fix


def test_keywords_the_function_does_not_accept_are_refused():
    with pytest.raises(SpecError, match="unexpected keyword argument 'lrr'") as err:
        gpujobs.submit(takes_x, 1, lrr=0.2)
    assert err.value.field == "args" and "takes_x takes (x, lr=0.1)" in err.value.fix
    with pytest.raises(SpecError, match="missing a required argument: 'x'"):
        gpujobs.submit(takes_x)


def test_job_builder_checks_its_call_against_the_signature():
    # the same check as submit(): arguments that do not bind are refused in gpujobs.job(...)
    with pytest.raises(SpecError, match="unexpected keyword argument 'lrr'") as err:
        gpujobs.job(takes_x, 1, lrr=0.2)
    assert err.value.field == "args" and "takes_x takes (x, lr=0.1)" in err.value.fix
    with pytest.raises(SpecError, match="missing a required argument: 'x'"):
        gpujobs.job(takes_x)
    with pytest.raises(SpecError, match="too many positional arguments"):
        gpujobs.job(takes_x, 1, 2, 3)
    assert gpujobs.job(takes_x, 1, lr=0.5).spec().kwargs == {"lr": 0.5}


@pytest.mark.parametrize("call, fix", [
    (dict(gpu=2), "gpujobs.job(takes_x).ddp(gpus=2).submit()"),
    (dict(gpus=2), "gpujobs.job(takes_x).ddp(gpus=2).submit()"),
    (dict(queu="a"), "gpujobs.job(takes_x).queue('a').submit()"),
    (dict(worker=2), "gpujobs.job(takes_x).ray(workers=N).submit()"),
])
def test_job_builder_names_the_builder_method_for_an_option_typed_as_an_argument(call, fix):
    with pytest.raises(SpecError) as err:
        gpujobs.job(takes_x, 1, **call)
    assert err.value.field == next(iter(call)) and err.value.fix == f"use {fix}"
    assert "takes only takes_x's own arguments" in err.value.problem


def test_job_builder_passes_option_names_to_a_function_taking_kwargs():
    # what submit()'s hint recommends for fn(**kw): gpujobs.job(fn, gpu=2) passes gpu= on
    assert gpujobs.job(takes_any, gpu=2, gpus=3).spec().kwargs == {"gpu": 2, "gpus": 3}


def test_a_parameter_named_like_an_option_is_passed_on():
    def wants_gpu(gpu):
        return gpu
    job = gpujobs.job(wants_gpu, gpu=3)
    from gpujobs.builder import _SUBMIT_OPTIONS, check_call
    check_call(wants_gpu, (), {"gpu": 3}, _SUBMIT_OPTIONS)  # its own parameter: accepted
    assert job.spec().kwargs == {"gpu": 3}


def test_upper_case_job_name_is_explained_with_a_lower_case_suggestion():
    with pytest.raises(SpecError) as err:
        gpujobs.job(noop).name("Exp_1").spec()
    assert "DNS-1123" in err.value.problem and "lower case" in err.value.problem
    assert "use .name('exp-1')" in err.value.fix


def test_a_bad_queue_or_priority_name_gets_a_fix_that_runs_as_written():
    # the fix only described a Kubernetes name; for an int priority it asked for letters
    with pytest.raises(SpecError) as err:
        gpujobs.job(noop).queue("Team A").spec()
    assert err.value.fix.startswith("use .queue('team-a') (")
    with pytest.raises(SpecError) as err:
        gpujobs.job(noop).priority(5).spec()
    assert err.value.field == "priority" and "'high'" in err.value.fix
    with pytest.raises(SpecError) as err:
        gpujobs.job(noop).queue("!!").spec()
    assert err.value.fix.startswith("use lowercase letters")


@pytest.mark.parametrize("image", [
    "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime", "gpujobs-mpi:py311", "localhost:5000/gpujobs-mpi:py311",
    "nvcr.io/nvidia/pytorch:24.01-py3", "ghcr.io/org/team/img:Latest_1", "ubuntu@sha256:" + "a" * 64,
    "rayproject/ray:2.52.0-py311-gpu", "[::1]:5000/x"])
def test_image_references_the_kubelet_pulls_are_accepted(image):
    assert gpujobs.job(noop).image(image).spec().image == image


@pytest.mark.parametrize("image, fix", [
    # were accepted, and each pod would fail at pull time with InvalidImageName
    ("Pytorch/Pytorch:2.5-Cuda", "use .image('pytorch/pytorch:2.5-Cuda')"),
    ("pytorch/pytorch:2.5 ", "use .image('pytorch/pytorch:2.5')"),
    ("my image:1", "use registry/name:tag"),
    ("x:", "use registry/name:tag"),
    ("ubuntu@sha256:zz", "use registry/name:tag"),
])
def test_an_image_the_kubelet_cannot_parse_is_refused_with_a_fix(image, fix):
    with pytest.raises(SpecError) as err:
        gpujobs.job(noop).image(image).spec()
    assert err.value.field == "image" and err.value.fix.startswith(fix), err.value
