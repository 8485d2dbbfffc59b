"""A TrainJob's ``status.trainerStatus`` as ``JobStatus.progress``.

Kubeflow Trainer (trainer.kubeflow.org/v1alpha1, TrainJob CRD: trainer@8c0f505
manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml, docs/kubernetes-kinds.md) lets the cluster
fill ``status.trainerStatus``: ``progressPercentage`` (0..100),
``estimatedRemainingSeconds``, ``metrics`` ([{name, value}], values as strings) and
``lastUpdatedTime`` (required when trainerStatus is present). Read as a Progress of
``step = progressPercentage`` out of ``total = 100``; ``ctx.progress`` reports from the
ranks' logs, when there are any, take precedence (pod_metrics.with_metrics).
"""
from __future__ import annotations

from typing import Any

from ....status import JobStatus, Progress
from .mapping import parse_time


def trainer_progress(job: dict) -> Progress | None:
    ts = ((job or {}).get("status") or {}).get("trainerStatus")
    if not isinstance(ts, dict):
        return None
    updated = parse_time(ts.get("lastUpdatedTime"))
    pct = ts.get("progressPercentage")
    remaining = ts.get("estimatedRemainingSeconds")
    metrics: dict[str, Any] = {}
    for m in ts.get("metrics") or ():
        if isinstance(m, dict) and m.get("name"):
            value = m.get("value")
            if value is not None:
                try:
                    value = float(value)
                except (TypeError, ValueError):
                    pass  # kept as written (a text value)
            metrics[str(m["name"])] = value
    if pct is None and remaining is None and not metrics:
        return None
    expected = updated + float(remaining) if updated is not None and remaining is not None else None
    return Progress(step=float(pct) if pct is not None else 0.0,
                    total=100.0 if pct is not None else None, rate=None, expected_end=expected,
                    metrics=metrics, updated=updated or 0.0, rank=0)


def with_trainer_status(st: JobStatus, job: dict) -> JobStatus:
    if st is None or job.get("kind") != "TrainJob":
        return st
    p = trainer_progress(job)
    return st.with_(progress=p) if p is not None else st
