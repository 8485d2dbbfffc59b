"""Which Kueue runs the cluster, and what that version does to a Trainer v2 job gpujobs renders.

The version is the tag of the Kueue manager's image: the release manifests install the Deployment
``kueue-controller-manager`` in ``kueue-system`` running ``registry.k8s.io/kueue/kueue:<tag>``
(kueue@v0.19.2 config/components/manager/manager.yaml with the kustomize name prefix ``kueue-`` and
namespace ``kueue-system``). Reading it needs ``get deployments`` there, which users seldom have:
then the version is unknown (None) and nothing is said.

Kueue before v0.20 vendors Kubeflow Trainer v2.2.1 (kueue@v0.19.2 go.mod) and writes the whole
job back with that typed client when it admits it (pkg/controller/jobs/trainjob/
trainjob_controller.go RunWithPodSetsInfo); v2.2.1's PodSpecPatch has no
terminationGracePeriodSeconds, so the grace period gpujobs puts in the runtime patch (Trainer
v2.3+) is dropped and the pods get the default 30 s. Kueue main (v0.20) vendors Trainer v2.3.0.
"""
from __future__ import annotations

import re
from typing import Any

KUEUE_NAMESPACE = "kueue-system"
KUEUE_DEPLOYMENT = "kueue-controller-manager"
FIRST_KEEPING_GRACE = (0, 20)
"""The first Kueue minor that vendors a Trainer whose PodSpecPatch has terminationGracePeriodSeconds."""
_TAG = re.compile(r":(v(\d+)\.(\d+)\.(\d+)(?:-[0-9A-Za-z.-]+)?)(?:@sha256:[0-9a-f]+)?$")


def version_of_image(image: str) -> str | None:
    """``registry.k8s.io/kueue/kueue:v0.19.2`` -> ``"v0.19.2"``; None for a tag that is no version."""
    m = _TAG.search(image or "")
    return m.group(1) if m else None


def kueue_version(api_client: Any, timeout: Any = 30) -> str | None:
    """The Kueue version from its manager Deployment's image (``"v0.19.2"``), or None when it
    cannot be read (403, another install layout, an untagged image)."""
    from kubernetes.client.exceptions import ApiException

    from ..retry import retrying
    path = f"/apis/apps/v1/namespaces/{KUEUE_NAMESPACE}/deployments/{KUEUE_DEPLOYMENT}"
    try:
        dep = retrying(lambda: api_client.call_api(
            path, "GET", response_type="object", auth_settings=["BearerToken"],
            _return_http_data_only=True, _preload_content=True, _request_timeout=timeout))
    except ApiException:
        return None
    for c in (((dep or {}).get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or []:
        if "kueue" in (c.get("image") or "") and version_of_image(c["image"]):
            return version_of_image(c["image"])
    return None


def erases_trainjob_grace_period(version: str | None) -> bool | None:
    """Whether this Kueue drops a Trainer v2 job's runtimePatches terminationGracePeriodSeconds when it
    admits the job (see the module doc); None when the version is unknown."""
    m = re.match(r"v(\d+)\.(\d+)", version or "")
    if not m:
        return None
    return (int(m.group(1)), int(m.group(2))) < FIRST_KEEPING_GRACE
