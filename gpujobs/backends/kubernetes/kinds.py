"""The job kinds gpujobs renders, their API coordinates, and how a spec picks one.

Default kind per framework:

- ddp / fsdp -> **TrainJob** (trainer.kubeflow.org/v1alpha1). Kueue lists the
  Kubeflow Trainer v1 integration (PyTorchJob) as deprecated, tentatively removed
  in v0.20, and leaves it out of its default configuration, whereas
  ``trainer.kubeflow.org/trainjob`` is enabled by default
  (kueue@ff69552 site/content/en/docs/tasks/run/kubeflow/pytorchjobs.md#L14-17 and
  kueue@ff69552 config/components/manager/controller_manager_config.yaml#L53-57; snapshots in
  docs/kubernetes-kinds.md). PyTorchJob stays available with ``kind="PyTorchJob"``.
- mpi -> MPIJob (kubeflow.org/v2beta1); ray -> RayJob (ray.io/v1).
- ``volcano="job"`` -> a bare Volcano Job; ``volcano="appwrapper"`` -> that Volcano
  Job inside an AppWrapper (so a Kueue queue can hold it).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import SpecError
from ...spec import JobSpec, check_kind


@dataclass(frozen=True)
class KindInfo:
    kind: str          # gpujobs' name for it (VolcanoJob for batch.volcano.sh Job)
    group: str
    version: str
    plural: str
    api_kind: str      # the object's .kind

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{self.group}"


KINDS: dict[str, KindInfo] = {
    "TrainJob": KindInfo("TrainJob", "trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob"),
    "PyTorchJob": KindInfo("PyTorchJob", "kubeflow.org", "v1", "pytorchjobs", "PyTorchJob"),
    "MPIJob": KindInfo("MPIJob", "kubeflow.org", "v2beta1", "mpijobs", "MPIJob"),
    "RayJob": KindInfo("RayJob", "ray.io", "v1", "rayjobs", "RayJob"),
    "VolcanoJob": KindInfo("VolcanoJob", "batch.volcano.sh", "v1alpha1", "jobs", "Job"),
    "AppWrapper": KindInfo("AppWrapper", "workload.codeflare.dev", "v1beta2", "appwrappers",
                           "AppWrapper"),
}
DEFAULT_KIND = {"ddp": "TrainJob", "fsdp": "TrainJob", "mpi": "MPIJob", "ray": "RayJob"}
KUEUE_KINDS = frozenset({"TrainJob", "PyTorchJob", "MPIJob", "RayJob", "AppWrapper"})


def resolve_kind(spec: JobSpec, kind: str | None = None) -> str:
    """The kind to render ``spec`` as (explicit ``kind``, then spec.kind, then the defaults)."""
    kind = kind or spec.kind
    if kind is not None and kind not in KINDS:
        raise SpecError("kind", f"unknown kind {kind!r}", f"use one of {', '.join(KINDS)}")
    fw, mode = spec.framework, spec.volcano
    if fw == "ray":
        if mode in ("job", "appwrapper") or kind not in (None, "RayJob"):
            raise SpecError("volcano" if kind in (None, "RayJob") else "kind",
                            f"a ray job renders only as RayJob (volcano={mode!r}, kind={kind!r})",
                            "use volcano='none' or 'gang' (KubeRay's Volcano batch scheduler)")
        return "RayJob"
    check_kind(fw, kind)  # the one framework x kind table (gpujobs.spec.KIND_FRAMEWORKS)
    if mode == "job":
        if kind not in (None, "VolcanoJob"):
            raise SpecError("kind", f"volcano='job' makes a bare Volcano Job, not a {kind}",
                            "drop kind= or use volcano='gang' for Volcano placement of a "
                            f"{kind}")
        return "VolcanoJob"
    if mode == "appwrapper":
        if kind not in (None, "AppWrapper"):
            raise SpecError("kind", f"volcano='appwrapper' wraps a Volcano Job, not a {kind}",
                            "drop kind= or use volcano='gang'")
        return "AppWrapper"
    if mode == "gang" and kind in ("VolcanoJob", "AppWrapper"):
        raise SpecError("volcano", f"'gang' places an operator's pods with Volcano; a {kind} "
                        "is already a Volcano Job", "use volcano='job' or 'appwrapper'")
    return kind or DEFAULT_KIND[fw]
