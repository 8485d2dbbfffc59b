"""A kind's own progress report as ``JobStatus.progress`` (``Kind.progress``).

Kubeflow Trainer v2 (trainer.kubeflow.org/v1alpha1: trainer@8c0f505
manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml, docs/kubernetes-kinds.md) lets the cluster
fill ``status.trainerStatus`` (kinds/trainjob.py reads it); ``ctx.progress`` reports from the
ranks' logs, when there are any, take precedence (pod_metrics.with_metrics).
"""
from __future__ import annotations

from ....status import JobStatus
from ..kinds import for_object
from ..kinds.trainjob import trainer_progress

__all__ = ["trainer_progress", "with_trainer_status"]


def with_trainer_status(st: JobStatus, job: dict) -> JobStatus:
    kind = for_object(job) if st is not None else None
    p = kind.progress(job) if kind is not None else None
    return st.with_(progress=p) if p is not None else st
