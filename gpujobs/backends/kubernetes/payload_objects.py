"""The job's payload ConfigMap and HMAC-key Secret.

Choice: the pod runs gpujobs' runner from the ConfigMap, not from a pip install.
``lib.zip`` (deflated, imported in place by Python's zipimport) holds gpujobs' runner,
payload, context, fsdp and errors modules, plus status and the metrics sampler the bootstrap
runs (nvml/psutil readers, ``GPUJOBS-METRICS`` line writer), a minimal ``gpujobs`` package, and the
submitter's own cloudpickle, so a stock PyTorch image works unchanged and the pickling
library on both sides is the same version.
``bootstrap.py`` (see bootstrap_script.py) checks the Python version first.

ConfigMap ``<name>-gpujobs`` (mounted read-only at /opt/gpujobs)::

    bootstrap.py  bootstrap.json  spec.json  lib.zip, payload.bin (binaryData; payload sealed)

Secret ``<name>-gpujobs-key`` (key ``key``: the hex HMAC key), mounted at
/var/run/gpujobs/key; the runner reads it through ``GPUJOBS_KEY_FILE``.
Both are owned by the job object (ownerReferences set at submit), so they are
garbage-collected with it.
"""
from __future__ import annotations

import base64
import json
import sys
from functools import lru_cache
from pathlib import Path

from ...errors import PayloadError
from ...payload import seal
from ...spec import JobSpec
from . import naming

MOUNT_DIR = "/opt/gpujobs"
KEY_DIR = "/var/run/gpujobs/key"
KEY_FILE = f"{KEY_DIR}/key"
CONFIGMAP_LIMIT = 1024 * 1024
"""kube-apiserver refuses a ConfigMap whose keys + values exceed 1 MiB (MaxSecretSize)."""
_HEADROOM = 16 * 1024  # keys, spec.json growth, metadata

_GPUJOBS_ROOT = Path(__file__).resolve().parents[2]
SHIPPED_GPUJOBS = ("__init__.py", "errors.py", "payload.py", "context.py", "fsdp.py",
                   "runner/__init__.py", "runner/__main__.py", "runner/frameworks.py",
                   # the bootstrap's metrics sampler (GPUJOBS-METRICS lines); stdlib + optional
                   # pynvml/psutil only, no pandas: frame/usage/dcgm/tracker are not shipped
                   "status.py", "metrics/__init__.py", "metrics/logline.py", "metrics/model.py",
                   "metrics/sampler.py", "metrics/cpu.py", "metrics/nvml.py",
                   "metrics/podlaunch.py")
_LIB_INIT = '''"""gpujobs inside a pod: the runner subset shipped by the Kubernetes backend.

``gpujobs.context()``, ``gpujobs.fsdp`` and ``gpujobs.errors`` work in the job's function;
submitting jobs from inside a job needs gpujobs installed in the image.
"""
from . import errors
from .context import JobContext, context
from .errors import SpecError


def __getattr__(name):
    if name == "fsdp":
        import importlib
        return importlib.import_module(".fsdp", __name__)
    raise AttributeError(f"gpujobs.{name} is not available inside the pod (only the runner subset "
                         "is shipped); install gpujobs in the image to use it there")
'''
_METRICS_INIT = '''"""gpujobs.metrics inside a pod: only the sampler the bootstrap runs (no pandas views)."""
from .logline import METRICS_MARKER, format_metrics_line, parse_metrics_line
from .sampler import Sampler, log_sink
'''
_REPLACED = {"__init__.py": _LIB_INIT, "metrics/__init__.py": _METRICS_INIT}


@lru_cache(maxsize=1)
def shipped_files() -> dict[str, str]:
    """``lib/``-relative path -> source text of what the pod needs to run the runner."""
    import cloudpickle

    files: dict[str, str] = {}
    for rel in SHIPPED_GPUJOBS:
        text = _REPLACED.get(rel) or (_GPUJOBS_ROOT / rel).read_text()
        files[f"gpujobs/{rel}"] = text
    cp_dir = Path(cloudpickle.__file__).parent
    for p in sorted(cp_dir.glob("*.py")):
        files[f"cloudpickle/{p.name}"] = p.read_text()
    return files


@lru_cache(maxsize=1)
def lib_zip() -> bytes:
    """shipped_files() as a deterministic deflated zip (about a quarter of the source size)."""
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for rel, text in sorted(shipped_files().items()):
            info = zipfile.ZipInfo(rel, date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, text)
    return buf.getvalue()


def bootstrap_config(spec: JobSpec, namespace: str, name: str, *, node_rank_env: list[str],
                     master_addr_env: list[str], master_port_env: list[str]) -> dict:
    env_names = [k for k, _ in spec.env] + [k for k, _ in spec.secret_env]
    return {
        "python": "%d.%d" % sys.version_info[:2],
        "job_id": naming.job_id(namespace, name),
        "framework": spec.framework,
        "nnodes": spec.nodes,
        "nproc_per_node": spec.procs_per_node,
        "node_rank_env": node_rank_env,
        "master_addr_env": master_addr_env,
        "master_port_env": master_port_env,
        "key_file": KEY_FILE,
        "checkpoint_dir": (f"{spec.volume.mount_path}/gpujobs-checkpoints/{name}"
                           if spec.volume else "/tmp/gpujobs-checkpoints"),
        "return_all": spec.return_all,
        "command": list(spec.command) if spec.command else None,
        "forward_env": sorted(set(env_names) | {"PYTHONUNBUFFERED"}),
        "ssh_wait_s": 300,
    }


@lru_cache(maxsize=1)
def bootstrap_source() -> str:
    """The pod bootstrap script (read once per process)."""
    return (Path(__file__).parent / "bootstrap_script.py").read_text()


def payload_configmap(spec: JobSpec, namespace: str, name: str, key: bytes, labels: dict,
                      boot_cfg: dict, kind: str) -> dict:
    """The ConfigMap; PayloadError (before anything is created) when it would be too big."""
    data = {"bootstrap.py": bootstrap_source(),
            "bootstrap.json": json.dumps(boot_cfg, indent=1, sort_keys=True),
            "spec.json": json.dumps(spec.to_dict(), sort_keys=True, default=str)}
    lib = lib_zip()
    binary: dict[str, str] = {"lib.zip": base64.b64encode(lib).decode()}
    sealed = seal(spec.payload(), key) if spec.payload() else b""
    if sealed:
        binary["payload.bin"] = base64.b64encode(sealed).decode()
    size = sum(len(k) + len(v.encode()) for k, v in data.items()) + len("lib.zip") + len(lib) \
        + len("payload.bin") + len(sealed)
    if size > CONFIGMAP_LIMIT - _HEADROOM:
        raise PayloadError(
            "payload", f"the job's ConfigMap would hold {size:,} bytes (sealed call "
            f"{len(sealed):,} bytes), over the Kubernetes ConfigMap limit of "
            f"{CONFIGMAP_LIMIT - _HEADROOM:,} usable bytes",
            "pass paths, not data: load large inputs inside the function from a PVC "
            "(.volume('claim')) or object storage, and keep arguments under ~900 KB")
    cm = {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {"name": naming.configmap_name(name), "namespace": namespace,
                       "labels": dict(labels), "annotations": {naming.ANN_KIND: kind}},
          "data": data, "binaryData": binary}
    return cm


def configmap_volume(cm: dict) -> dict:
    """The pod volume projecting every ConfigMap key to its path under MOUNT_DIR."""
    items = [{"key": key, "path": key}
             for key in list(cm.get("data", {})) + list(cm.get("binaryData", {}))]
    return {"name": "gpujobs", "configMap": {"name": cm["metadata"]["name"], "items": items,
                                             "defaultMode": 0o444}}


def key_secret(namespace: str, name: str, key: bytes, labels: dict) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": naming.secret_name(name), "namespace": namespace,
                         "labels": dict(labels)},
            "data": {"key": base64.b64encode(key.hex().encode()).decode()}}


def key_volume(name: str) -> dict:
    return {"name": "gpujobs-key", "secret": {"secretName": naming.secret_name(name),
                                              "items": [{"key": "key", "path": "key"}],
                                              "defaultMode": 0o440}}
