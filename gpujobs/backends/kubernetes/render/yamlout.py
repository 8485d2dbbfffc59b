"""YAML for ``kubectl apply -f -`` (the CLI's ``gpujobs render``)."""
from __future__ import annotations

from typing import TYPE_CHECKING, cast

import yaml

from ....spec import JobSpec

if TYPE_CHECKING:
    from ..backend import KubernetesBackend


class _Dumper(yaml.SafeDumper):
    """Block style for multi-line strings (the bootstrap script stays readable)."""


def _str(dumper: yaml.SafeDumper, data: str):
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(objects: list[dict]) -> str:
    """The objects as YAML documents, each after a comment saying what it is and how many lines
    it takes (the shared runtime ConfigMap is most of a full render)."""
    docs = [yaml.dump(o, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120)
            for o in objects]
    return "---\n".join(_about(o, text) + text for o, text in zip(objects, docs))


def _about(obj: dict, text: str) -> str:
    """``# Kind name: what it is (N lines)`` before one document."""
    from .payload_objects import LABEL_SHARED
    md = obj.get("metadata") or {}
    lines = text.count("\n")
    shared = (md.get("labels") or {}).get(LABEL_SHARED)
    what = {"runtime": "gpujobs' runtime for stock images (bootstrap.py, readable, and lib.zip, gpujobs' "
                       f"runner: {len(((obj.get('binaryData') or {}).get('lib.zip') or '')) // 1024} KiB "
                       "of base64 on one line), shared by every job of this gpujobs version in the "
                       "namespace and made once; `gpujobs render --job-only` leaves it out",
            "key": "your HMAC key (this render's own: no cluster is configured)"}.get(
                shared or "", "the job" if obj.get("kind") not in ("Secret", "ConfigMap") else "the job's call")
    return f"# {obj.get('kind')} {md.get('name')}: {what} ({lines} lines)\n"


def render_yaml(spec: JobSpec, kind: str | None = None, *, save_key: bool = True,
                job_only: bool = False, notes: list[str] | None = None,
                backend: "KubernetesBackend | None" = None) -> str:
    """The objects ``submit`` would create, as a multi-document YAML string (see
    :func:`render_objects`)."""
    return to_yaml(render_objects(spec, kind, save_key=save_key, job_only=job_only, notes=notes,
                                  backend=backend))


def render_objects(spec: JobSpec, kind: str | None = None, *, save_key: bool = True,
                   job_only: bool = False, notes: list[str] | None = None,
                   backend: "KubernetesBackend | None" = None) -> list[dict]:
    """The objects ``submit`` would create, for ``kubectl apply -f -``.

    Signed with this submitter's key for the namespace, the one submit uses (made and kept
    locally when there is none yet), so a render applied where gpujobs already ran finds its key
    Secret there; that Secret is never printed (it holds the key): ``notes`` gets the command
    that creates it from the local key file. Without a reachable cluster configuration the
    render gets a key of its own, and its key Secret is printed with it.

    ``job_only``: only the job's own objects (the job, and its payload Secret when the call is
    too big for the annotations), without the shared runtime ConfigMap.

    With ``save_key`` (default) the job's HMAC key is also stored locally (as submit
    does), so ``gpujobs.attach("<namespace>/<name>")`` can read the results of a job
    created with ``kubectl apply``.
    """
    from ... import get_backend
    from ....errors import BackendUnavailable
    from ..keys import save_key as _save
    from .payload_objects import key_secret_command

    kb = backend or cast("KubernetesBackend", get_backend("kubernetes"))
    try:
        rendered = kb.render_job(spec, kind, for_submit=True)
        kept = True
    except BackendUnavailable:  # no cluster configured: a key of this render's own
        rendered = kb.render_job(spec, kind)
        kept = False
    if save_key:
        _save(rendered.namespace, rendered.name, rendered.key, kb.home)
    shared = [] if job_only else [rendered.runtime]
    if kept:
        kb.keep_signing_key(rendered.namespace, rendered.signing_key)
        if notes is not None:
            secret = rendered.key_secret["metadata"]["name"]
            notes.append(f"the job mounts Secret {secret} (your HMAC key, not printed); `gpujobs submit` "
                         f"creates it, or run: {key_secret_command(rendered.key_secret, kb.namespace_key_file(rendered.namespace))}")
    elif not job_only:
        shared.append(rendered.key_secret)
    if not kept and notes is not None:
        notes.append("no cluster configured: this render has a key of its own (its key Secret is "
                     "printed without --job-only); set KUBECONFIG to render with the key submit uses")
    if notes is not None and rendered_without_claim(spec, kb):
        notes.append(f"{rendered.name} checkpoints or asks should_stop(), and this render mounts no claim: "
                     "`gpujobs submit` would also make it a claim of the namespace's default StorageClass "
                     "(docs/configuration.md); applied as printed, its checkpoint folder goes with its pods. "
                     "Fix: render with --volume CLAIM")
    if job_only and notes is not None:
        also = [f"ConfigMap {rendered.runtime['metadata']['name']}"] + \
            ([] if kept else [f"Secret {rendered.key_secret['metadata']['name']}"])
        them = "them" if len(also) > 1 else "it"
        notes.append(f"also needed in namespace {rendered.namespace}: {', '.join(also)} (shared by every "
                     f"gpujobs job there; `gpujobs submit` creates {them} once, or print {them} with "
                     "`gpujobs render` without --job-only)")
    return [*shared, rendered.job] + ([rendered.payload_secret] if rendered.payload_secret else []) + \
        rendered.companions


def rendered_without_claim(spec: JobSpec, kb: "KubernetesBackend") -> bool:
    """Whether submit would give ``spec`` a default checkpoint claim that a render cannot."""
    from ....rank.checkpoint import watches_preemption
    return spec.volume is None and kb.options.checkpoint_volume is None and spec.fn is not None \
        and watches_preemption(spec.fn)
