"""What a pod needs besides its image: the shared runtime, the user's key, the job's files.

Three places, chosen so that a typical submit creates exactly one object (the job):

- **runtime** (shared, per namespace): ConfigMap ``gpujobs-runtime-<hash>`` holding
  ``bootstrap.py`` (see bootstrap_script.py) and ``lib.zip`` (deflated, imported in place by
  zipimport: the import closure of gpujobs' runner, context, fsdp, errors and the bootstrap's
  metrics sampler, computed from the package by :mod:`.shipped`, and the submitter's own
  cloudpickle), so a stock PyTorch
  image works unchanged. Its name is the hash of its contents and it is ``immutable``: every
  job of this gpujobs version shares it; submit creates it, once preflight has passed,
  when it is missing. Mounted at ``/opt/gpujobs/runtime``.
- **key** (shared, per namespace and submitter): Secret ``gpujobs-key-<hash of the key>``
  with the submitter's HMAC key (hex), mounted at ``/var/run/gpujobs/key``. The key stays
  on the submitter's machine too (``GPUJOBS_HOME/k8s-keys``); results and the sealed call
  are checked with it (each job with its own key derived from it, kept in the job's submit
  record ``GPUJOBS_HOME/k8s-jobs``). Submit creates the Secret when it is missing.
- **job files** (``/opt/gpujobs/job``): ``bootstrap.json`` and the sealed call. Up to
  INLINE_LIMIT they travel *in the job object*, as pod-template annotations projected by a
  downwardAPI volume (``payload.b64``), so nothing else is created; a bigger call goes in a
  per-job Secret ``<name>-gpujobs`` (``payload.bin``) owned by the job, created right after it.

The two shared objects are not owned by any job (they outlive them, like an image); delete
them with ``kubectl delete cm,secret -l gpujobs.dev/shared -n <namespace>``.
"""
from __future__ import annotations

import base64
import hashlib
import json
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ....rank import contract
from ....errors import Fix, PayloadError
from ....payload import seal
from ....spec import JobSpec
from .. import naming
from .shipped import gpujobs_files

RUNTIME_DIR = "/opt/gpujobs/runtime"
JOB_DIR = "/opt/gpujobs/job"
KEY_DIR = "/var/run/gpujobs/key"
CONTROL_DIR = "/opt/gpujobs/control"
"""Requests to running ranks (``job.stacks()``): pod annotations projected by a downwardAPI
volume, which the kubelet refreshes when they change (no exec, no port)."""
ANN_STACK_REQUEST = "gpujobs.dev/stack-request"
KEY_FILE = f"{KEY_DIR}/key"
OBJECT_LIMIT = 1024 * 1024
"""kube-apiserver refuses a Secret/ConfigMap whose keys + values exceed 1 MiB (MaxSecretSize)."""
_HEADROOM = 16 * 1024  # keys, bootstrap.json growth, metadata
INLINE_LIMIT = 8 * 1024
"""Largest base64 sealed call (+ bootstrap.json) carried in the job's pod-template annotations.
Kubernetes allows 256 KiB of annotations, but Kueue copies pod templates into its Workload and
log shippers (e.g. Fluent Bit's kubernetes filter) may attach pod annotations to every log
record, so only small calls (most: a function and a few arguments, ~1-3 KB) travel inline."""
ANN_PAYLOAD = "gpujobs.dev/payload"
ANN_BOOTSTRAP = "gpujobs.dev/bootstrap"
LABEL_SHARED = "gpujobs.dev/shared"

@lru_cache(maxsize=1)
def shipped_files() -> dict[str, str]:
    """``lib/``-relative path -> source text of what the pod needs to run the runner: gpujobs'
    share (computed from the package, :mod:`.shipped`) and the submitter's cloudpickle."""
    import cloudpickle

    files: dict[str, str] = dict(gpujobs_files())
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
        "grace_s": float(spec.grace_period_s),  # the pod's terminationGracePeriodSeconds (podspec.py)
        "command": list(spec.command) if spec.command else None,
        "forward_env": sorted(set(env_names) | {"PYTHONUNBUFFERED"}),
        "ssh_wait_s": 300,
        "runtime_digest": runtime_digest(),  # the MPI launcher has its ranks check it too
        "runtime_configmap": _runtime_body()[0],
    }


@lru_cache(maxsize=1)
def bootstrap_source() -> str:
    """The pod bootstrap script (read once per process)."""
    return (Path(__file__).parent / "bootstrap_script.py").read_text()


def _digest(*parts: bytes) -> str:
    """sha256 over the sha256 of each part (what the pod's verifier computes, file by file)."""
    h = hashlib.sha256()
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()


@lru_cache(maxsize=1)
def runtime_digest() -> str:
    """The full digest of the runtime files; every pod checks it before running them."""
    return _digest(bootstrap_source().encode(), lib_zip())


@lru_cache(maxsize=1)
def _runtime_body() -> tuple[str, dict, dict]:
    boot, lib = bootstrap_source(), lib_zip()
    return (f"gpujobs-runtime-{runtime_digest()[:12]}", {"bootstrap.py": boot},
            {"lib.zip": base64.b64encode(lib).decode()})


def verified_bootstrap(role: str) -> list[str]:
    """The container command: check the runtime files against this job's digest (the job
    object holds it, so whoever can change the shared ConfigMap cannot change what a job runs),
    then run bootstrap.py with ``role``."""
    from .bootstrap_script import verify_script

    return ["python3", "-c", verify_script(RUNTIME_DIR + "/", runtime_digest(), _runtime_body()[0]),
            role]


def runtime_configmap(namespace: str) -> dict:
    """The shared, immutable, content-addressed runtime ConfigMap of this gpujobs version."""
    name, data, binary = _runtime_body()
    return {"apiVersion": "v1", "kind": "ConfigMap", "immutable": True,
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {naming.MANAGED_BY[0]: naming.MANAGED_BY[1],
                                    LABEL_SHARED: "runtime"}},
            "data": dict(data), "binaryData": dict(binary)}


def key_secret(namespace: str, key: bytes) -> dict:
    """The submitter's shared key Secret (named by a hash of the key, never the key itself)."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "immutable": True,
            "metadata": {"name": f"gpujobs-key-{_digest(b'gpujobs-key', key)[:12]}",
                         "namespace": namespace,
                         "labels": {naming.MANAGED_BY[0]: naming.MANAGED_BY[1],
                                    LABEL_SHARED: "key"}},
            "data": {"key": base64.b64encode(key.hex().encode()).decode()}}


def key_secret_command(secret: dict, key_file: Path) -> str:
    """The kubectl commands that create ``secret`` (:func:`key_secret`) from the local key file,
    so the key never passes through a terminal or a YAML file."""
    import shlex
    md = secret["metadata"]
    name, ns = md["name"], md["namespace"]
    labels = " ".join(f"{k}={v}" for k, v in md["labels"].items())
    return (f"kubectl create secret generic {name} -n {ns} --from-file=key={shlex.quote(str(key_file))}"
            f" && kubectl label secret {name} -n {ns} {labels}")


@dataclass
class JobFiles:
    """The job's own files: inline (pod annotations) or in a per-job Secret when too big."""
    bootstrap_json: str
    sealed: bytes
    inline: bool

    @property
    def payload_file(self) -> str:
        """The path GPUJOBS_PAYLOAD points at inside the pod ('' for a command job)."""
        if not self.sealed:
            return ""
        return f"{JOB_DIR}/{contract.POD_INLINE_PAYLOAD if self.inline else contract.POD_PAYLOAD}"

    def annotations(self) -> dict[str, str]:
        """Pod-template annotations (inline mode only; empty otherwise)."""
        if not self.inline:
            return {}
        ann = {ANN_BOOTSTRAP: self.bootstrap_json}
        if self.sealed:
            ann[ANN_PAYLOAD] = base64.b64encode(self.sealed).decode()
        return ann


def job_files(spec: JobSpec, key: bytes, boot_cfg: dict) -> JobFiles:
    """Seal the call; PayloadError (before anything is created) when it is too big for a Secret."""
    boot = json.dumps(boot_cfg, sort_keys=True, separators=(",", ":"))
    sealed = seal(spec.payload(), key) if spec.payload() else b""
    size = len(boot) + len(sealed) + 64
    if size > OBJECT_LIMIT - _HEADROOM:
        raise PayloadError(
            "payload", f"the job's sealed call is {len(sealed):,} bytes, over the "
            f"{OBJECT_LIMIT - _HEADROOM:,} usable bytes of a Kubernetes Secret",
            Fix.set("volume", "claim", "pass paths, not data: load large inputs inside the function from a PVC "
                    "({}) or object storage, and keep arguments under ~900 KB"))
    inline = 4 * ((len(sealed) + 2) // 3) + len(boot) <= INLINE_LIMIT
    return JobFiles(boot, sealed, inline)


def payload_secret(namespace: str, name: str, files: JobFiles, labels: dict) -> dict:
    """The per-job Secret for a call too big to travel inline (owned by the job at submit)."""
    data = {contract.POD_CONFIG: base64.b64encode(files.bootstrap_json.encode()).decode()}
    if files.sealed:
        data[contract.POD_PAYLOAD] = base64.b64encode(files.sealed).decode()
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": naming.payload_secret_name(name), "namespace": namespace,
                         "labels": dict(labels)},
            "data": data}


def pod_volumes(name: str, files: JobFiles, runtime: dict, key_secret: dict) -> list[dict]:
    """The three gpujobs volumes of every pod: runtime (``runtime``: its ConfigMap), job files,
    key (``key_secret``: its Secret)."""
    if files.inline:
        items = [{"path": contract.POD_CONFIG,
                  "fieldRef": {"fieldPath": f"metadata.annotations['{ANN_BOOTSTRAP}']"}}]
        if files.sealed:
            items.append({"path": contract.POD_INLINE_PAYLOAD,
                          "fieldRef": {"fieldPath": f"metadata.annotations['{ANN_PAYLOAD}']"}})
        job_vol = {"name": "gpujobs-job", "downwardAPI": {"items": items, "defaultMode": 0o444}}
    else:
        keys = [contract.POD_CONFIG] + ([contract.POD_PAYLOAD] if files.sealed else [])
        job_vol = {"name": "gpujobs-job", "secret": {
            "secretName": naming.payload_secret_name(name),
            "items": [{"key": k, "path": k} for k in keys], "defaultMode": 0o444}}
    return [{"name": "gpujobs-runtime", "configMap": {
                "name": runtime["metadata"]["name"], "defaultMode": 0o444,
                "items": [{"key": k, "path": k} for k in (*runtime["data"], *runtime["binaryData"])]}},
            job_vol,
            {"name": "gpujobs-key", "secret": {
                "secretName": key_secret["metadata"]["name"],
                "items": [{"key": "key", "path": "key"}], "defaultMode": 0o440}},
            {"name": "gpujobs-control", "downwardAPI": {"defaultMode": 0o444, "items": [
                {"path": "stack-request",
                 "fieldRef": {"fieldPath": f"metadata.annotations['{ANN_STACK_REQUEST}']"}}]}}]


POD_MOUNTS = [{"name": "gpujobs-runtime", "mountPath": RUNTIME_DIR, "readOnly": True},
              {"name": "gpujobs-job", "mountPath": JOB_DIR, "readOnly": True},
              {"name": "gpujobs-key", "mountPath": KEY_DIR, "readOnly": True},
              {"name": "gpujobs-control", "mountPath": CONTROL_DIR, "readOnly": True}]
