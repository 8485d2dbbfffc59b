"""Pod templates shared by every kind: image, env, resources, volumes, security.

Security: every container runs with ``allowPrivilegeEscalation: false``,
``capabilities: {drop: [ALL]}``, ``privileged: false`` and the RuntimeDefault seccomp
profile; pods run as uid/gid 1000 with ``runAsNonRoot: true``. No hostPath volumes.
The one exception is MPI over ssh (the MPI Operator, Volcano's ``mpi`` plugin): both operators
mount the ssh keys at /root/.ssh, so the launcher runs as root (``mode="root"``,
still no capabilities) and the workers run sshd as root on port 2222 (``sshd_command``), which
needs SETUID/SETGID/SYS_CHROOT (``mode="sshd"`` adds back only those few, see SSHD_CAPS).
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from ....rank.contract import RankEnv
from ....quantity import scale_quantity
from ....spec import JobSpec
from .. import naming
from .payload_objects import KEY_FILE, POD_MOUNTS, JobFiles, pod_volumes, verified_bootstrap

DEFAULT_TORCH_IMAGE = "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"
"""Stock PyTorch image (the one Kubeflow Trainer's torch-distributed runtime uses)."""
NON_ROOT_UID = 1000
TERMINATION_LOG = "/dev/termination-log"  # the kubelet's default terminationMessagePath
SSHD_CAPS = ["SETUID", "SETGID", "SYS_CHROOT", "CHOWN", "AUDIT_WRITE", "NET_BIND_SERVICE"]
"""What a root sshd needs back after ``drop: [ALL]``: SETUID/SETGID to become the user, SYS_CHROOT for
its privilege-separation chroot (/run/sshd), CHOWN/AUDIT_WRITE for sessions; NET_BIND_SERVICE
because mpi-operator's images ``setcap CAP_NET_BIND_SERVICE=+eip /usr/sbin/sshd``
(mpi-operator@v0.8.0 build/base/Dockerfile), and a binary whose file capability lies outside the
container's bounding set cannot be exec'd at all (capabilities(7), "safety checking for
capability-dumb binaries"). gpujobs' sshd itself listens on MPI_SSH_PORT (2222), unprivileged."""


@lru_cache(maxsize=1)
def client_ray_version() -> str | None:
    """This client's Ray version (None when Ray is not installed here)."""
    try:
        import ray
        return ray.__version__
    except Exception:  # noqa: BLE001 - ray not installed on the submitting side
        return None


def ray_image(gpu: bool) -> str:
    """rayproject/ray matching this client's Ray and Python versions."""
    version = client_ray_version() or "2.52.0"
    py = "py%d%d" % sys.version_info[:2]
    return f"rayproject/ray:{version}-{py}{'-gpu' if gpu else ''}"


def deadline_s(max_runtime_s: float) -> int:
    """``max_runtime_s`` as the whole seconds of ``activeDeadlineSeconds`` and Kueue's
    ``max-exec-time-seconds``: rounded up, at least 1 (a limit is an upper bound; int() made 1.5 s
    a 1 s limit and 0.5 s a 0, which Kueue's ``minimum: 1`` refuses)."""
    return max(1, math.ceil(max_runtime_s))


def cpu_str(cpus: float) -> str:
    return str(int(cpus)) if float(cpus) == int(cpus) else f"{int(round(cpus * 1000))}m"


@dataclass
class RenderCtx:
    """What every renderer needs about the job being rendered."""
    spec: JobSpec
    namespace: str
    name: str
    kind: str
    submission_id: str
    kueue: bool
    image: str
    files: JobFiles
    runtime: dict  # the shared runtime ConfigMap every pod mounts
    key_secret: dict  # the submitter's key Secret every pod mounts
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def job_id(self) -> str:
        return naming.job_id(self.namespace, self.name)


def resources(spec: JobSpec, procs: int, gpus: int, cpus: float | None = None) -> dict:
    """requests/limits for a pod running ``procs`` ranks holding ``gpus`` GPUs in all."""
    req: dict[str, Any] = {"cpu": cpu_str(cpus if cpus is not None else spec.cpus_per_proc * procs)}
    lim: dict[str, Any] = {}
    if spec.memory_per_proc:
        req["memory"] = lim["memory"] = scale_quantity(spec.memory_per_proc, procs, "memory")
    if gpus:
        req[spec.gpu_resource] = lim[spec.gpu_resource] = str(gpus)
    out: dict[str, Any] = {"requests": req}
    if lim:
        out["limits"] = lim
    return out


def env_list(ctx: RenderCtx, extra: dict[str, str] | None = None) -> list[dict]:
    """gpujobs' variables, the user's env, then secrets by reference (secretKeyRef)."""
    spec = ctx.spec
    env = RankEnv(job_id=ctx.job_id, framework=spec.framework,
                  payload=ctx.files.payload_file or None, key_file=KEY_FILE,
                  key_context=ctx.job_id,  # the runner derives this job's key from the file's
                  result_sink="log", return_all=True if spec.return_all else None,
                  termination_log=TERMINATION_LOG).to_env()
    env.update({"PYTHONUNBUFFERED": "1", "HOME": "/tmp"})
    env.update(extra or {})
    env.update(spec.env_dict())
    out: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in env.items()]
    out += [{"name": k, "valueFrom": {"secretKeyRef": {"name": r.secret, "key": r.key}}}
            for k, r in spec.secret_env]
    return out


def security_context(mode: str = "nonroot") -> dict:
    """Container security context; ``mode`` is nonroot (default), root or sshd (see module doc)."""
    sc: dict[str, Any] = {"allowPrivilegeEscalation": False, "privileged": False,
                          "capabilities": {"drop": ["ALL"]},
                          "seccompProfile": {"type": "RuntimeDefault"}}
    if mode == "sshd":
        sc["capabilities"]["add"] = list(SSHD_CAPS)
    elif mode == "nonroot":
        sc.update(runAsNonRoot=True, runAsUser=NON_ROOT_UID, runAsGroup=NON_ROOT_UID)
    return sc


def volumes_and_mounts(ctx: RenderCtx, shm: bool) -> tuple[list[dict], list[dict]]:
    spec = ctx.spec
    vols = pod_volumes(ctx.name, ctx.files, ctx.runtime, ctx.key_secret)
    mounts = [dict(m) for m in POD_MOUNTS]
    if shm and spec.shm_size:
        vols.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": spec.shm_size}})
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    if spec.volume:
        vols.append({"name": "data", "persistentVolumeClaim": {"claimName": spec.volume.claim}})
        mounts.append({"name": "data", "mountPath": spec.volume.mount_path})
    return vols, mounts


def container(ctx: RenderCtx, name: str, command: list[str], *, procs: int, gpus: int,
              env: dict[str, str] | None = None, mode: str = "nonroot", shm: bool = True,
              cpus: float | None = None, ports: list[dict] | None = None,
              image: str | None = None) -> tuple[dict, list[dict]]:
    """(container, pod volumes) for one role."""
    vols, mounts = volumes_and_mounts(ctx, shm)
    c: dict[str, Any] = {"name": name, "image": image or ctx.image, "command": command,
                         "env": env_list(ctx, env), "resources": resources(ctx.spec, procs, gpus, cpus),
                         "volumeMounts": mounts, "securityContext": security_context(mode),
                         # small results also in the termination message (gpujobs.rank.runner), and
                         # the log's tail when the container fails without one
                         "terminationMessagePath": TERMINATION_LOG,
                         "terminationMessagePolicy": "FallbackToLogsOnError"}
    if ctx.spec.working_dir:
        c["workingDir"] = ctx.spec.working_dir
    if ports:
        c["ports"] = ports
    return c, vols


def pod_labels(ctx: RenderCtx, role: str) -> dict[str, str]:
    return {naming.LABEL_JOB: ctx.name, naming.LABEL_SUBMISSION: ctx.submission_id,
            naming.LABEL_ROLE: role}


def pod_annotations(ctx: RenderCtx, topology: bool = True) -> dict[str, str]:
    """The job's inline files (every pod reads them) and Kueue's topology requests."""
    ann = ctx.files.annotations()
    if not topology:
        return ann
    if ctx.spec.topology_required:
        ann[naming.TOPOLOGY_REQUIRED] = ctx.spec.topology_required
    if ctx.spec.topology_preferred:
        ann[naming.TOPOLOGY_PREFERRED] = ctx.spec.topology_preferred
    return ann


def pod_spec_extras(ctx: RenderCtx, mode: str = "nonroot") -> dict[str, Any]:
    """Pod-level fields: security context, node selector, tolerations, grace period."""
    spec = ctx.spec
    out: dict[str, Any] = {"securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                           "terminationGracePeriodSeconds": int(spec.grace_period_s),
                           "automountServiceAccountToken": False}
    if mode == "nonroot":
        out["securityContext"].update(runAsNonRoot=True, runAsUser=NON_ROOT_UID,
                                      runAsGroup=NON_ROOT_UID, fsGroup=NON_ROOT_UID)
    if spec.node_selector:
        out["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerations:
        out["tolerations"] = [dict(t) for t in spec.tolerations]
    return out


def pod_template(ctx: RenderCtx, role: str, c: dict, vols: list[dict], *,
                 restart_policy: str | None = "Never", mode: str = "nonroot",
                 scheduler_name: str | None = None, topology: bool = True) -> dict:
    spec: dict[str, Any] = {"containers": [c], "volumes": vols, **pod_spec_extras(ctx, mode)}
    if restart_policy:
        spec["restartPolicy"] = restart_policy
    if scheduler_name:
        spec["schedulerName"] = scheduler_name
    meta: dict[str, Any] = {"labels": pod_labels(ctx, role)}
    ann = pod_annotations(ctx, topology)
    if ann:
        meta["annotations"] = ann
    return {"metadata": meta, "spec": spec}


def sshd_command() -> list[str]:
    """An MPI worker's command: sshd in the foreground on MPI_SSH_PORT, set up to run in a stock
    image as in mpi-operator's: the privilege-separation directory /run/sshd (sshd refuses to
    start without it; mpi-operator's Dockerfile creates /var/run/sshd), host keys when the image
    has none (``ssh-keygen -A``), ``StrictModes no`` (the keys are the operator's Secret mount,
    whose directory and file modes sshd's strict checks may refuse; mpi-operator's images set the
    same), ``UsePAM no`` (PAM's session modules need privileges the container has dropped), keys
    only. An image without sshd fails with words (exit 3) instead of a worker that never gets
    ready, which with launcherCreationPolicy WaitForWorkersReady would keep the job waiting."""
    from .bootstrap_script import MPI_IMAGE_HINT, MPI_SSH_PORT
    msg = "gpujobs: this image has no sshd (openssh-server), which MPI workers run. " + MPI_IMAGE_HINT
    script = ('sshd=$(command -v sshd || echo /usr/sbin/sshd); '
              'if [ ! -x "$sshd" ]; then '
              f'echo "{msg}" >&2; echo "{msg}" > {TERMINATION_LOG}; exit 3; fi; '
              'mkdir -p /run/sshd && chmod 0755 /run/sshd; '
              'ssh-keygen -A >/dev/null 2>&1 || true; '
              f'exec "$sshd" -D -e -p {MPI_SSH_PORT} -o StrictModes=no -o UsePAM=no '
              '-o PasswordAuthentication=no -o PermitRootLogin=prohibit-password')
    return ["/bin/sh", "-c", script]


def sshd_readiness() -> dict:
    """The worker is Ready once its sshd accepts connections, so the MPI Operator's
    WaitForWorkersReady creates the launcher only then (mpi_job_controller.go countReadyWorkerPods
    counts the pods' Ready condition)."""
    from .bootstrap_script import MPI_SSH_PORT
    return {"tcpSocket": {"port": MPI_SSH_PORT}, "periodSeconds": 2, "timeoutSeconds": 2,
            "failureThreshold": 3}


def bootstrap_command(role: str = "rank") -> list[str]:
    """``python3 -c <verify runtime, then run bootstrap.py> role``."""
    return verified_bootstrap(role)
