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
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                         width=120)


def render_yaml(spec: JobSpec, kind: str | None = None, *, save_key: bool = True,
                job_only: bool = False, notes: list[str] | None = None) -> str:
    """The objects ``submit`` would create, as a multi-document YAML string.

    ``job_only``: only the job's own objects (the job, and its payload Secret when the call is
    too big for the annotations); a line saying which shared objects must already exist in
    the namespace is appended to ``notes``.

    With ``save_key`` (default) the job's HMAC key is also stored locally (as submit
    does), so ``gpujobs.attach("<namespace>/<name>")`` can read the results of a job
    created with ``kubectl apply``.
    """
    from ... import get_backend
    from ..naming import save_key as _save

    backend = get_backend("kubernetes")
    kb = cast("KubernetesBackend", backend)
    rendered = kb.render_job(spec, kind)
    if save_key:
        _save(rendered.namespace, rendered.name, rendered.key, kb.home)
    if not job_only:
        return to_yaml(rendered.objects)
    if notes is not None:
        shared = ", ".join(f"{o['kind']} {o['metadata']['name']}" for o in rendered.shared)
        notes.append(f"also needed in namespace {rendered.namespace}: {shared} (shared by every "
                     f"gpujobs job there; `gpujobs submit` creates them once, or print them with "
                     f"`gpujobs render` without --job-only)")
    return to_yaml([o for o in rendered.objects if o not in rendered.shared])
