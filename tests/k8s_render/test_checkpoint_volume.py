"""[k8s-parity] 1: where ctx.checkpoint_dir lives on Kubernetes: a claim given with --volume /
.volume() / %%gpujob --volume / [kubernetes] checkpoint_volume, and the warning when none is."""
from __future__ import annotations

import json
import re

import pytest

import gpujobs
from gpujobs.backends.kubernetes.render.job import RenderOptions, render_job
from gpujobs.checkpoint import uses_checkpoints
from gpujobs.cli import build_parser, cli_message
from gpujobs.cli.commands import apply_common
from gpujobs.errors import SpecError
from gpujobs.spec import Volume


def plain(x):
    return x


def saves(n):
    import gpujobs.checkpoint as ck
    for _ in ck.resumable(n):
        pass


def writes_dir():
    import gpujobs as g

    def inner():
        return g.context().checkpoint_dir
    return inner()


def _config(rendered) -> dict:
    ann = rendered.job["spec"]
    text = json.dumps(ann)
    start = text.index("checkpoint_dir")
    return text[start:start + 120]


@pytest.mark.parametrize("text, claim, path", [("ckpt", "ckpt", "/mnt/data"),
                                               ("ckpt:/mnt/ckpt", "ckpt", "/mnt/ckpt")])
def test_volume_parses_claim_and_path(text, claim, path):
    assert Volume.parse(text) == Volume(claim, path)


@pytest.mark.parametrize("text", ["", ":/mnt", "ckpt:"])
def test_a_bad_volume_names_the_field_and_a_fix(text):
    with pytest.raises(SpecError, match=r"volume.*fix: .*\.volume\('ckpt'\)") as err:
        Volume.parse(text)
    assert re.match(r"--volume.*fix: .*--volume ckpt\)$", cli_message(err.value)), cli_message(err.value)


def test_cli_volume_mounts_the_claim_and_puts_checkpoints_there():
    args = build_parser().parse_args(["submit", "m:f", "--volume", "ckpt:/mnt/ckpt"])
    spec = apply_common(gpujobs.job(plain, 1).ddp(gpus=1), args).spec()
    assert spec.volume == Volume("ckpt", "/mnt/ckpt")
    r = render_job(spec)
    assert "/mnt/ckpt/gpujobs-checkpoints/" in json.dumps(r.job)


def test_configured_checkpoint_volume_is_the_default_claim():
    r = render_job(gpujobs.job(plain, 1).ddp(gpus=1).spec(),
                   opts=RenderOptions(checkpoint_volume=Volume("team-ckpt", "/ckpt")))
    text = json.dumps(r.job)
    assert '"claimName": "team-ckpt"' in text and "/ckpt/gpujobs-checkpoints/" in text
    # without one, the folder is the container's own /tmp
    assert "/tmp/gpujobs-checkpoints" in json.dumps(render_job(gpujobs.job(plain, 1).ddp(gpus=1).spec()).job)


def test_uses_checkpoints_reads_the_code_nested_functions_included():
    assert uses_checkpoints(saves) and uses_checkpoints(writes_dir)
    assert not uses_checkpoints(plain)


def test_submit_volume_keyword_reaches_the_spec(monkeypatch):
    from gpujobs import builder
    got = {}
    monkeypatch.setattr(builder.JobBuilder, "submit", lambda self: got.setdefault("spec", self.spec()))
    gpujobs.submit(plain, 1, volume="ckpt")
    assert got["spec"].volume == Volume("ckpt", "/mnt/data")
