"""JobSpec -> the exact list of Kubernetes objects a submit into a fresh namespace creates.

``[runtime ConfigMap, key Secret, job]``, plus the per-job payload Secret when the call is
too big to travel inline (see payload_objects) and the kind's companions (a headless Service). The first two are shared: submit creates
them once per namespace, after preflight. Then it creates the job, then the payload Secret
(if any) with an ownerReference to the job's uid; ``render`` output, made without a cluster,
has no ownerReferences, so ``kubectl apply -f -`` of it works (delete that Secret by label
``gpujobs.dev/job=<name>`` with its job).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sys

from ....errors import SpecError
from ....payload import derive_key, new_key
from ....spec import JobSpec, Volume
from .. import naming
from . import images
from ..kinds import KINDS, resolve_kind
from .payload_objects import (JobFiles, bootstrap_config, job_files, key_secret, payload_secret,
                              runtime_configmap)
from .podspec import DEFAULT_TORCH_IMAGE, RenderCtx, deadline_s
from . import kubeflow as kf


@dataclass
class RenderOptions:
    """Backend-level settings that shape rendering (not part of the JobSpec)."""
    namespace: str = "default"
    default_queue: str | None = None
    trainjob_runtime: str = kf.TRAINJOB_RUNTIME
    trainjob_volcano_runtime: str = kf.TRAINJOB_VOLCANO_RUNTIME
    default_volcano_queue: str | None = None  # [kubernetes] volcano_queue: for specs that name none
    extra_labels: dict[str, str] = field(default_factory=dict)
    checkpoint_volume: Volume | None = None
    """[kubernetes] checkpoint_volume: the claim mounted into jobs that name no volume, so
    ``ctx.checkpoint_dir`` outlives a preempted run's pods."""


@dataclass
class Rendered:
    """What render produced, plus what submit needs to create and record it."""
    kind: str
    namespace: str
    name: str
    submission_id: str
    key: bytes
    job: dict
    runtime: dict
    """Shared runtime ConfigMap (submit creates it when missing)."""
    key_secret: dict
    """Shared key Secret of this submitter (submit creates it when missing)."""
    payload_secret: dict | None
    """Per-job Secret, only when the call is too big to travel in the job's annotations."""
    files: JobFiles
    signing_key: bytes
    """The key in ``key_secret`` (the submitter's, for the namespace); ``key`` is this job's,
    derived from it and the job id (gpujobs.payload.derive_key), as the pods derive it."""
    volcano: str = "none"
    checkpoint_claim: dict | None = None
    """The default checkpoint claim submit creates after the job, owned by it
    (submit/checkpoint_claim.py), when the job mounts one."""
    companions: list[dict] = field(default_factory=list)
    """What the kind needs beside the job (Kind.companions: a headless Service), created after it
    and owned by it."""

    @property
    def shared(self) -> list[dict]:
        return [self.runtime, self.key_secret]

    @property
    def objects(self) -> list[dict]:
        return [*self.shared, self.job] + ([self.payload_secret] if self.payload_secret else []) + \
            self.companions

    @property
    def job_id(self) -> str:
        return naming.job_id(self.namespace, self.name)


def effective_queue(spec: JobSpec, opts: RenderOptions) -> str:
    """spec.queue, except that the spec default 'default' yields to the configured queue."""
    if spec.queue == "default" and opts.default_queue:
        return opts.default_queue
    return spec.queue


def _check(spec: JobSpec, kind: str) -> None:
    if spec.topology_required and spec.topology_preferred:
        raise SpecError("topology", "both required and preferred topology were given",
                        "pass one of them")
    here = "%d.%d" % sys.version_info[:2]
    py = images.python_of(spec.image)
    if spec.image and py and py[0] != here:
        raise SpecError("image", f"{spec.image!r} runs Python {py[0]} (from {py[1]}) but you submit from Python "
                        f"{here}: the cloudpickled call only loads in the same major.minor",
                        images.python_fix(spec.image, here, f"{{}} or submit from Python {py[0]}"))
    KINDS[kind].check(spec)
    if spec.name and not spec.name[0].isalpha():
        # a kind's CRD rule (x-kubernetes-validations: metadata.name matches RFC 1035), and the
        # Services the operators name after the job (Volcano svc plugin, MPI launcher) are DNS-1035
        # labels: the API server refuses a name that starts with a digit
        rules = ", ".join([k.name_rule for k in KINDS.values() if k.name_rule] + ["the operators' Services"])
        raise SpecError("name", f"{spec.name!r} starts with a digit; on Kubernetes a job name must start "
                        f"with a letter (RFC 1035 label: {rules})",
                        f".name('j-{spec.name}') or gpujobs submit --name j-{spec.name} ...")


MAX_EXEC_MARGIN_S = 300
"""How long after a job's own deadline Kueue's max-exec timer may fire, at least (10% of the
deadline when more): Kueue counts from admission (kueue@v0.19.2 pkg/controller/core/
workload_controller.go reconcileMaxExecutionTime: since the Admitted condition), the operators
from the job's start (pods scheduled, images pulled), and Kueue's deactivation suspends the job:
the operators then delete its pods, their logs and tracebacks, and the job object stays suspended,
where the operator's own DeadlineExceeded fails the job visibly."""


def kueue_max_exec_s(kind: str, max_runtime_s: float) -> int:
    """The ``kueue.x-k8s.io/max-exec-time-seconds`` label: the job's own deadline plus a margin
    where its operator enforces one (so DeadlineExceeded comes first), else the deadline itself."""
    own = deadline_s(max_runtime_s)
    if not KINDS[kind].own_deadline:  # a Volcano Job has no deadline of its own
        return own
    return own + max(MAX_EXEC_MARGIN_S, -(-own // 10))


def gang_pods(kind: str, spec: JobSpec) -> int:
    """Pods that must all run for the job to make progress."""
    return KINDS[kind].gang_pods(spec)


def check_spec(spec: JobSpec, kind: str | None = None,
               opts: RenderOptions | None = None) -> tuple[JobSpec, str]:
    """The render-time checks alone (kind, image, names): what ``render_job`` refuses, without a key
    or a cluster, so submit can refuse bad input before it connects. Returns the spec with the
    configured Volcano queue and the resolved kind."""
    opts = opts or RenderOptions()
    if spec.volcano_queue is None and opts.default_volcano_queue:
        import dataclasses
        spec = dataclasses.replace(spec, kubernetes=dataclasses.replace(
            spec.kubernetes, volcano_queue=opts.default_volcano_queue))
    if spec.volume is None and opts.checkpoint_volume is not None:
        import dataclasses
        spec = dataclasses.replace(spec, kubernetes=dataclasses.replace(
            spec.kubernetes, volume=opts.checkpoint_volume))
    kind = resolve_kind(spec, kind)
    _check(spec, kind)
    return spec, kind


def render_job(spec: JobSpec, kind: str | None = None, *, opts: RenderOptions | None = None,
               submission_id: str | None = None, key: bytes | None = None) -> Rendered:
    """Render ``spec``; raises SpecError/PayloadError on bad input (nothing is created)."""
    opts = opts or RenderOptions()
    spec, kind = check_spec(spec, kind, opts)
    namespace = spec.namespace or opts.namespace
    sid = submission_id or naming.new_submission_id()
    name = naming.job_name(spec, sid)
    signing = key or new_key()
    key = derive_key(signing, naming.job_id(namespace, name))  # this job's own key
    kueue = KINDS[kind].kueue_integration is not None

    common = {naming.LABEL_JOB: name, naming.LABEL_SUBMISSION: sid,
              naming.LABEL_FRAMEWORK: spec.framework, naming.MANAGED_BY[0]: naming.MANAGED_BY[1]}
    labels: dict[str, str] = {**dict(spec.labels), **opts.extra_labels, **common}
    if naming.user_label():
        labels[naming.USER_LABEL] = naming.user_label()
    if kueue:
        labels[naming.QUEUE_LABEL] = effective_queue(spec, opts)
        if spec.priority:
            labels[naming.PRIORITY_LABEL] = spec.priority
        if spec.max_runtime_s:
            labels[naming.MAX_EXEC_LABEL] = str(kueue_max_exec_s(kind, spec.max_runtime_s))
    annotations = {naming.ANN_KIND: kind, naming.ANN_GANG: str(gang_pods(kind, spec)),
                   naming.ANN_GPUS: str(spec.total_gpus), naming.ANN_WORLD: str(spec.world_size),
                   naming.ANN_RETURN_ALL: "true" if spec.return_all else "false"}
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels,
                            "annotations": annotations}

    rank_env = KINDS[kind].rank_env
    boot = bootstrap_config(spec, namespace, name, node_rank_env=rank_env[0],
                            master_addr_env=rank_env[1], master_port_env=rank_env[2])
    files = job_files(spec, key, boot)
    runtime, secret = runtime_configmap(namespace), key_secret(namespace, signing)
    ctx = RenderCtx(spec=spec, namespace=namespace, name=name, kind=kind, submission_id=sid,
                    kueue=kueue, image=spec.image or DEFAULT_TORCH_IMAGE, files=files,
                    runtime=runtime, key_secret=secret, labels=common)
    job = KINDS[kind].render(ctx, meta, opts)
    assert job["apiVersion"] == KINDS[kind].api_version
    return Rendered(kind=kind, namespace=namespace, name=name, submission_id=sid, key=key,
                    job=job, runtime=runtime, key_secret=secret, signing_key=signing,
                    payload_secret=None if files.inline else payload_secret(namespace, name, files,
                                                                            common),
                    files=files, volcano=spec.volcano, companions=KINDS[kind].companions(ctx, job))


def owner_reference(job: dict, uid: str) -> dict:
    """ownerReference making ``job`` (with server-assigned ``uid``) own its payload Secret."""
    return {"apiVersion": job["apiVersion"], "kind": job["kind"], "name": job["metadata"]["name"],
            "uid": uid, "controller": False, "blockOwnerDeletion": False}
