"""A kubeconfig with a token, written as a login would (the access and realcp login tests).

Kept out of tests/support.py: test modules that import that one ship it with their functions, and
the payload-size tests count its bytes."""
from __future__ import annotations

from pathlib import Path


def token_kubeconfig(path: Path, server: str, token: str | None, at: float, ca: Path | None = None,
                     namespace: str | None = None) -> Path:
    """A kubeconfig at ``path`` whose user is ``token`` (None: a broken, half-written file), its
    modification time set to ``at``: a new login, seen as a change however fast the writes come."""
    import os

    import yaml
    cluster: dict[str, str] = {"server": server}
    if ca is not None:
        cluster["certificate-authority"] = str(ca)
    context: dict[str, str] = {"cluster": "c", "user": "u"}
    if namespace is not None:
        context["namespace"] = namespace
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": cluster}], "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": context}]}) if token else "{broken")
    os.utime(path, (at, at))
    return path
