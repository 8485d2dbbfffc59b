"""KubeRay's submitter pod and image helpers (the Ray kind's module is kinds/rayjob.py)."""
from __future__ import annotations

import copy

from .podspec import RenderCtx, pod_labels, pod_spec_extras, security_context

RAY_TTL_AFTER_FINISHED_S = 60


# KubeRay's default submitter container (kuberay@v1.7.0 ray-operator/controllers/ray/common/job.go
# GetDefaultSubmitterContainer): the head's image, requests cpu 500m / memory 200Mi, limits 1 / 1Gi.
SUBMITTER_CONTAINER = "ray-job-submitter"
SUBMITTER_RESOURCES = {"requests": {"cpu": "500m", "memory": "200Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}


def submitter_template(ctx: RenderCtx, image: str) -> dict:
    """``spec.submitterPodTemplate``: in K8sJobMode KubeRay runs the entrypoint from a separate
    batch/v1 Job (``ray job submit --no-wait -- <entrypoint>; ray job logs --follow``,
    kuberay@v1.7.0 ray-operator/controllers/ray/common/job.go BuildJobSubmitCommand) whose pod
    log is the driver's output, result line included. Its pod gets only this template's labels plus
    KubeRay's own (rayjob_controller.go getSubmitterTemplate), so the template carries gpujobs'
    pod labels (role ``submitter``) for gpujobs to find and read it. No command: KubeRay fills in
    the submit command when the container has none (configureSubmitterContainer)."""
    spec = pod_spec_extras(ctx)
    spec.update(restartPolicy="Never", containers=[{
        "name": SUBMITTER_CONTAINER, "image": image, "resources": copy.deepcopy(SUBMITTER_RESOURCES),
        "securityContext": security_context()}])
    spec.pop("terminationGracePeriodSeconds", None)
    return {"metadata": {"labels": pod_labels(ctx, "submitter")}, "spec": spec}


def submitter_image(image: str) -> str:
    """The image of the submitter pod, which only runs the Ray CLI: a GPU image of rayproject/ray
    (``...-gpu``, ``...-cu121``) becomes its CPU tag (the same Ray and Python; KubeRay's default
    is the head's image, kuberay@v1.7.0 common/job.go GetDefaultSubmitterContainer). Other images
    are kept: gpujobs cannot know a CPU twin of them."""
    import re
    m = re.fullmatch(r"((?:docker\.io/)?rayproject/ray(?:-ml)?:[^-]+-py\d+)-(?:gpu|cu\d+)", image)
    return m.group(1) if m else image


def image_ray_version(image: str) -> str:
    """The Ray version a rayproject/ray tag names ("rayproject/ray:2.52.0-py311-gpu" -> "2.52.0")."""
    return image.split(":", 1)[-1].split("-", 1)[0]
