"""Which Kubeflow Trainer API the cluster serves, read from its installed Trainer v2 job CRD (trainjobs).

gpujobs renders a Trainer v2 job's pod details as a ``spec.runtimePatches`` entry, the Trainer v2.2+
API; Trainer v2.1 had ``spec.podTemplateOverrides`` instead, and an API server prunes fields its
CRD does not declare, so on v2.1 the patch (Kueue's own too) silently vanishes and the job
never starts. ``terminationGracePeriodSeconds`` exists in the patch's pod spec only from v2.3.
Facts from the upstream CRDs (kubeflow/trainer manifests/base/crds/
trainer.kubeflow.org_trainjobs.yaml at v2.1.0, v2.2.0, v2.3.0; pkg/apis/trainer/v1alpha1/
trainjob_types.go ``PodTemplateOverrides`` at v2.1.0, ``RuntimePatches`` from v2.2.0).
"""
from __future__ import annotations

from typing import Any

TRAINJOB_CRD = "trainjobs.trainer.kubeflow.org"
V21, V22, V23 = "v2.1", "v2.2", "v2.3+"
UNKNOWN = "unknown"


def _spec_props(crd: dict, version: str = "v1alpha1") -> dict:
    for v in (crd.get("spec") or {}).get("versions") or []:
        if v.get("name") == version:
            schema = ((v.get("schema") or {}).get("openAPIV3Schema") or {})
            return ((schema.get("properties") or {}).get("spec") or {}).get("properties") or {}
    return {}


def _declares(node: Any, field: str) -> bool:
    if isinstance(node, dict):
        return field in (node.get("properties") or {}) or any(_declares(v, field) for v in node.values())
    if isinstance(node, list):
        return any(_declares(v, field) for v in node)
    return False


def trainer_api(crd: dict) -> str:
    """``v2.1`` (podTemplateOverrides), ``v2.2`` (runtimePatches without the grace period),
    ``v2.3+`` or ``unknown`` (a CRD without a schema to read)."""
    props = _spec_props(crd)
    if "runtimePatches" in props:
        return V23 if _declares(props["runtimePatches"], "terminationGracePeriodSeconds") else V22
    if "podTemplateOverrides" in props:
        return V21
    return UNKNOWN


def adapt(job: dict, api: str) -> None:
    """Fit a rendered Trainer v2 job to the served API in place: v2.2 has no terminationGracePeriodSeconds
    in the patch (the pods keep the runtime's grace period)."""
    if api != V22:
        return
    for patch in (job.get("spec") or {}).get("runtimePatches") or []:
        for rj in (((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {}) \
                .get("replicatedJobs") or []:
            pod = (((rj.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
            pod.pop("terminationGracePeriodSeconds", None)
