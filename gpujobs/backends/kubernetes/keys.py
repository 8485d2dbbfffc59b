"""The submitter-side key store of Kubernetes jobs: each job's HMAC key and submit record, and
this submitter's key per namespace, kept as private files under ``GPUJOBS_HOME``.

- ``k8s-keys/_namespaces/<cluster>/<namespace>`` (mode 0600): this submitter's HMAC key for
  that namespace of that cluster (hex), shared by its jobs there;
- ``k8s-jobs/<namespace>/<name>.json`` (mode 0600): what submit remembers of a job: kind,
  apiVersion, plural, submission id and the job's own key (hex; results are checked with
  it), written once, before the job is created;
- ``k8s-keys/<namespace>/<name>`` (mode 0600): the key of a job rendered for
  ``kubectl apply`` (``gpujobs render``), which has no submit record.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from ...config import gpujobs_home
from ...errors import SpecError


def key_path(namespace: str, name: str, home: Path | None = None) -> Path:
    return (home or gpujobs_home()) / "k8s-keys" / namespace / name


def write_private(path: Path, text: str) -> Path:
    """Write ``text`` with mode 0600 (folders 0700), atomically: a reader never sees a
    half-written file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")  # a writer's own
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    try:
        fd = os.open(tmp, flags, 0o600)
    except FileNotFoundError:  # the first record in this folder
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(tmp, flags, 0o600)
    os.fchmod(fd, 0o600)  # a stale tmp file keeps its old mode through O_CREAT
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)
    return path


def save_key(namespace: str, name: str, key: bytes, home: Path | None = None) -> Path:
    """Write the key (hex) of a job rendered for ``kubectl apply``, mode 0600."""
    return write_private(key_path(namespace, name, home), key.hex())


def namespace_key_path(cluster: str, namespace: str, home: Path | None) -> Path:
    """The file of this submitter's key for ``namespace`` on ``cluster`` (its API server URL)."""
    tag = hashlib.sha256(cluster.encode()).hexdigest()[:12]
    return (home or gpujobs_home()) / "k8s-keys" / "_namespaces" / tag / namespace


def load_namespace_key(cluster: str, namespace: str, home: Path | None = None) -> bytes | None:
    """This submitter's key for ``namespace`` on ``cluster`` (its API server URL), if any."""
    try:
        key = bytes.fromhex(namespace_key_path(cluster, namespace, home).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    return key if len(key) == 32 else None  # damaged: a new key replaces it


def save_namespace_key(cluster: str, namespace: str, key: bytes, home: Path | None = None) -> None:
    write_private(namespace_key_path(cluster, namespace, home), key.hex())


def load_key(namespace: str, name: str, home: Path | None = None) -> bytes:
    """The job's key: from its submit record, else from a ``gpujobs render`` key file."""
    rec = record_path(namespace, name, home)
    try:
        key = json.loads(rec.read_text()).get("key")
    except (OSError, ValueError):
        key = None
    if key:
        return bytes.fromhex(key)
    path = key_path(namespace, name, home)
    if not path.exists():
        raise SpecError("job_id", f"no local key for {namespace}/{name} (looked in {rec} and {path})",
                        "results can be read only from the machine (GPUJOBS_HOME) that "
                        "submitted the job; copy that file here to attach")
    return bytes.fromhex(path.read_text().strip())


def forget(namespace: str, name: str, home: Path | None = None, restore: str | None = None) -> None:
    """Remove the job's submit record (and its key with it); ``restore``: put back instead the
    record ``save_record`` replaced (a job of that name from an earlier submission)."""
    path = record_path(namespace, name, home)
    if restore is not None:
        write_private(path, restore)
        return
    try:
        path.unlink()
    except FileNotFoundError:
        pass


@dataclass(frozen=True)
class JobRecord:
    """What the submitter remembers about a job (lets status/attach find its kind fast)."""
    namespace: str
    name: str
    kind: str
    api_version: str
    plural: str
    submission_id: str = ""


def record_path(namespace: str, name: str, home: Path | None = None) -> Path:
    return (home or gpujobs_home()) / "k8s-jobs" / namespace / f"{name}.json"


def save_record(rec: JobRecord, home: Path | None = None, key: bytes | None = None) -> str | None:
    """Write the job's record (with its key, if given): one private file, atomically. Returns
    the text of the record it replaced (None when there was none), for ``forget(restore=)``."""
    path = record_path(rec.namespace, rec.name, home)
    try:
        previous: str | None = path.read_text()
    except FileNotFoundError:
        previous = None
    data = asdict(rec)
    if key is not None:
        data["key"] = key.hex()
    write_private(path, json.dumps(data))
    return previous


_RECORD_FIELDS = {f.name for f in fields(JobRecord)}


def load_record(namespace: str, name: str, home: Path | None = None) -> JobRecord | None:
    path = record_path(namespace, name, home)
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    return JobRecord(**{k: v for k, v in data.items() if k in _RECORD_FIELDS})
