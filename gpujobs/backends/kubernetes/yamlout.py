"""YAML for ``kubectl apply -f -`` (the CLI's ``gpujobs render``)."""
from __future__ import annotations

import yaml

from ...spec import JobSpec


class _Dumper(yaml.SafeDumper):
    """Block style for multi-line strings (the bootstrap script stays readable)."""


def _str(dumper: yaml.SafeDumper, data: str):
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(objects: list[dict]) -> str:
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                         width=120)


def render_yaml(spec: JobSpec, kind: str | None = None, *, save_key: bool = True) -> str:
    """The objects ``submit`` would create, as a multi-document YAML string.

    With ``save_key`` (default) the job's HMAC key is also stored locally (as submit
    does), so ``gpujobs.attach("<namespace>/<name>")`` can read the results of a job
    created with ``kubectl apply``.
    """
    from ...backends import get_backend
    from .naming import save_key as _save

    backend = get_backend("kubernetes")
    rendered = backend.render_job(spec, kind)
    if save_key:
        _save(rendered.namespace, rendered.name, rendered.key, backend.home)
    return to_yaml(rendered.objects)
