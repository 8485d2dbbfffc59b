"""The simulated kubelet's volume plumbing: a pod's configMap / secret / downwardAPI volumes
written to a local folder, as the real kubelet projects them into the container.

``materialize(pod, lookup, root, claims)`` writes each mounted volume of the pod's first
container under ``root`` + its mount path (``/opt/gpujobs/job`` -> ``root/opt/gpujobs/job``), so
relative layouts (the bootstrap finds ``../job`` beside its own folder) hold locally too.

Storage lives as long as it does on a node: ``root`` is the pod's own folder (its container's
filesystem and its emptyDir volumes: "When a Pod is removed from a node for any reason, the data
in the emptyDir is deleted permanently", Kubernetes docs, Volumes: emptyDir), which the kubelet
deletes with the pod; a persistentVolumeClaim volume is the claim's folder under ``claims``
(``claims/<namespace>/<claimName>``), which outlives every pod that mounts it.
"""
from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any, Callable

Lookup = Callable[[str, str], "dict | None"]
"""(kind, name) -> the object in the pod's namespace, or None."""

_ANNOTATION = re.compile(r"^metadata\.annotations\['([^']+)'\]$")
_LABEL = re.compile(r"^metadata\.labels\['([^']+)'\]$")


class MissingSource(Exception):
    """A volume's ConfigMap / Secret does not exist (the pod stays in ContainerCreating)."""


def volume_files(pod: dict, vol: dict, lookup: Lookup) -> dict[str, bytes]:
    """path -> contents of one volume, as the kubelet would project it."""
    if "configMap" in vol:
        src = vol["configMap"]
        cm = lookup("ConfigMap", src["name"])
        if cm is None:
            raise MissingSource(f"ConfigMap {src['name']}")
        everything = {k: v.encode() for k, v in (cm.get("data") or {}).items()}
        everything.update({k: base64.b64decode(v) for k, v in (cm.get("binaryData") or {}).items()})
    elif "secret" in vol:
        src = vol["secret"]
        secret = lookup("Secret", src["secretName"])
        if secret is None:
            raise MissingSource(f"Secret {src['secretName']}")
        everything = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
    elif "downwardAPI" in vol:
        md = pod.get("metadata") or {}
        out = {}
        for item in vol["downwardAPI"].get("items") or []:
            path = (item.get("fieldRef") or {}).get("fieldPath", "")
            m_ann, m_lab = _ANNOTATION.match(path), _LABEL.match(path)
            if m_ann:
                out[item["path"]] = (md.get("annotations") or {}).get(m_ann.group(1), "").encode()
            elif m_lab:
                out[item["path"]] = (md.get("labels") or {}).get(m_lab.group(1), "").encode()
            elif path in ("metadata.name", "metadata.namespace"):
                out[item["path"]] = str(md.get(path.split(".")[1], "")).encode()
        return out
    else:
        return {}
    items = src.get("items")
    if not items:
        return everything
    missing = [it["key"] for it in items if it["key"] not in everything and not src.get("optional")]
    if missing:  # the real kubelet fails the mount (FailedMount) and retries
        raise MissingSource(f"key {missing[0]!r} of {src.get('name') or src.get('secretName')}")
    return {it["path"]: everything[it["key"]] for it in items if it["key"] in everything}


def materialize(pod: dict, lookup: Lookup, root: Path, claims: Path | None = None) -> dict[str, Path]:
    """Write the first container's mounted volumes under ``root`` (a claim's volume: its folder
    under ``claims``); mount path -> local folder."""
    vols = {v["name"]: v for v in (pod.get("spec") or {}).get("volumes") or []}
    c0: dict[str, Any] = ((pod.get("spec") or {}).get("containers") or [{}])[0]
    out: dict[str, Path] = {}
    for m in c0.get("volumeMounts") or []:
        vol = vols.get(m["name"])
        if vol is None:
            continue
        if "persistentVolumeClaim" in vol and claims is not None:
            d = claims / str((pod.get("metadata") or {}).get("namespace", "default")) / \
                vol["persistentVolumeClaim"]["claimName"]
            d.mkdir(parents=True, exist_ok=True)
            out[m["mountPath"]] = d
            continue
        if "emptyDir" in vol:
            out[m["mountPath"]] = root / m["mountPath"].lstrip("/")
            out[m["mountPath"]].mkdir(parents=True, exist_ok=True)
            continue
        files = volume_files(pod, vol, lookup)
        if not files and not any(k in vol for k in ("configMap", "secret", "downwardAPI")):
            continue
        d = root / m["mountPath"].lstrip("/")
        d.mkdir(parents=True, exist_ok=True)
        for rel, data in files.items():
            (d / rel).parent.mkdir(parents=True, exist_ok=True)
            (d / rel).write_bytes(data)
        out[m["mountPath"]] = d
    return out


def refresh_downward(pod: dict, root: Path) -> int:
    """Re-project a running pod's downwardAPI volumes (its annotations/labels changed), as the
    kubelet does on its sync loop ("the kubelet updates downwardAPI volume files when the
    fields change", Kubernetes docs, Downward API: volume files); the number of files changed.
    Each file is replaced atomically (the kubelet swaps a ``..data`` symlink)."""
    import os
    vols = {v["name"]: v for v in (pod.get("spec") or {}).get("volumes") or []}
    c0: dict[str, Any] = ((pod.get("spec") or {}).get("containers") or [{}])[0]
    changed = 0
    for m in c0.get("volumeMounts") or []:
        vol = vols.get(m["name"])
        if vol is None or "downwardAPI" not in vol:
            continue
        d = root / m["mountPath"].lstrip("/")
        for rel, data in volume_files(pod, vol, lambda *_: None).items():
            path = d / rel
            try:
                if path.read_bytes() == data:
                    continue
            except OSError:
                pass
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)
            changed += 1
    return changed


def local_path(path: str, mounts: dict[str, Path]) -> str:
    """``path`` inside the container -> the local file (unchanged when under no mount)."""
    for mount, d in sorted(mounts.items(), key=lambda kv: -len(kv[0])):
        if path == mount or path.startswith(mount.rstrip("/") + "/"):
            return str(d / path[len(mount):].lstrip("/"))
    return path


def container_path(path: str, mounts: dict[str, Path], root: Path) -> str:
    """``path`` inside the container -> the local file: under a mount, that volume's folder;
    elsewhere the container's own filesystem (under the pod's ``root``, gone with the pod)."""
    local = local_path(path, mounts)
    return local if local != path else str(root / "rootfs" / path.lstrip("/"))
