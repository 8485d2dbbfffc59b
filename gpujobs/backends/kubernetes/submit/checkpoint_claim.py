"""A checkpoint claim by default: a PersistentVolumeClaim per job, owned by the job.

A job whose function checkpoints or asks ``ctx.should_stop()`` (gpujobs.checkpoint.watches_preemption:
a function that returns within its grace period keeps its result there) and that names no volume
(no ``--volume``, no ``[kubernetes] checkpoint_volume``) gets a claim ``<job name>-ckpt`` of the
namespace's default StorageClass (or ``[kubernetes] checkpoint_storage_class``), mounted at
:data:`MOUNT_PATH`, so ``ctx.checkpoint_dir`` outlives a preempted run's pods. Whether the
cluster can provision one is asked without writing anything and without a cluster-wide read: a
dry-run create of the claim (``dryRun=All`` runs every admission stage, the DefaultStorageClass
plugin included, which fills in ``spec.storageClassName`` only when a default class exists).

Clean-up: the claim is created right after the job with an ownerReference to it (as a big call's
payload Secret), so the garbage collector deletes it, and the provisioned volume with the class's
``reclaimPolicy``, when the job is deleted (``gpujobs cancel``, ``kubectl delete``). It outlives
every requeue: Kueue suspends a preempted job, it does not delete it.
"""
from __future__ import annotations

from typing import Any

from .. import naming

MOUNT_PATH = "/mnt/gpujobs"
"""Where the default claim is mounted: ``ctx.checkpoint_dir`` is MOUNT_PATH/gpujobs-checkpoints/<job>."""
DEFAULT_SIZE = "10Gi"
NONE = "none"
"""``[kubernetes] checkpoint_storage_class = "none"``: never make a claim (submit warns instead)."""


def claim_name(job_name: str) -> str:
    return f"{job_name}-ckpt"


def claim_body(namespace: str, job_name: str, labels: dict[str, str], *, pods: int,
               storage_class: str | None, size: str) -> dict:
    """The claim (no owner yet): ReadWriteOnce for a one-pod job, ReadWriteMany when pods may
    land on several nodes."""
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce" if pods <= 1 else "ReadWriteMany"],
                            "resources": {"requests": {"storage": size}}}
    if storage_class:
        spec["storageClassName"] = storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim_name(job_name), "namespace": namespace, "labels": dict(labels)},
            "spec": spec}


def provisionable(api_client: Any, body: dict, timeout: Any) -> tuple[bool, str]:
    """(whether the cluster would provision ``body``, why not): a dry-run create; the claim names a
    class only when one was configured or the namespace has a default StorageClass."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(api_client)
    ns = body["metadata"]["namespace"]
    try:
        out = core.create_namespaced_persistent_volume_claim(ns, body, dry_run="All",
                                                             _request_timeout=timeout)
    except ApiException as exc:
        if exc.status == 403:
            return False, f"you may not create PersistentVolumeClaims in namespace {ns!r}"
        return False, f"a PersistentVolumeClaim there was refused (HTTP {exc.status} {exc.reason})"
    if not (out.spec and out.spec.storage_class_name):
        return False, f"namespace {ns!r} has no default StorageClass"
    return True, ""


def labels_of(rendered_labels: dict[str, str]) -> dict[str, str]:
    """The job's own labels the claim carries (job, submission, managed-by): found and cleaned up
    as the job's."""
    keep = (naming.LABEL_JOB, naming.LABEL_SUBMISSION, naming.MANAGED_BY[0])
    return {k: v for k, v in rendered_labels.items() if k in keep}
