"""StorageClasses and PersistentVolumeClaims, as Kubernetes (v1.31) treats them.

- **Default class at create** (admission plugin DefaultStorageClass, kubernetes
  plugin/pkg/admission/storage/storageclass/setdefault/admission.go): a claim created with no
  ``spec.storageClassName`` (absent, not ``""``) gets the name of the default StorageClass; a
  class is the default when its annotation ``storageclass.kubernetes.io/is-default-class`` (or the
  beta ``storageclass.beta.kubernetes.io/is-default-class``) is ``"true"``
  (pkg/apis/storage/util/helpers.go IsDefaultAnnotation); with several, the newest created wins
  (kubernetes #110559, v1.25: "choose the newest one instead of throwing an error"; the docs'
  "Default StorageClass" section); with none, the field stays
  unset. It runs on dry-run creates too (every admission stage runs for ``dryRun=All``:
  kubernetes.io/docs/reference/using-api/api-concepts/#dry-run).
- **Binding** (pkg/controller/volume/persistentvolume/pv_controller.go, dynamic provisioning): a
  claim naming an existing StorageClass is provisioned by it and bound (``spec.volumeName``,
  ``status.phase: Bound``): at once with ``volumeBindingMode: Immediate`` (the default), and with
  ``WaitForFirstConsumer`` once a pod that uses it is scheduled. A claim of a class that does not
  exist, or of no class (nothing here provisions statically), stays ``Pending``; one already
  ``Bound`` (an admin's pre-made claim) stays so.
- **Pods wait** (the scheduler's VolumeBinding plugin): a pod whose claim is missing or not
  bound is not scheduled ("persistentvolumeclaim not found" / "unbound immediate
  PersistentVolumeClaims").
"""
from __future__ import annotations

from typing import Any

DEFAULT_CLASS_ANNOTATIONS = ("storageclass.kubernetes.io/is-default-class",
                             "storageclass.beta.kubernetes.io/is-default-class")


def default_class(store: Any) -> str | None:
    """The default StorageClass's name, or None (newest of several)."""
    marked = [c for c in store.list("storage.k8s.io/v1", "StorageClass")
              if any((c["metadata"].get("annotations") or {}).get(a) == "true"
                     for a in DEFAULT_CLASS_ANNOTATIONS)]
    if not marked:
        return None
    newest = max(marked, key=lambda c: (c["metadata"].get("creationTimestamp", ""),
                                        int(c["metadata"].get("resourceVersion") or 0)))
    return newest["metadata"]["name"]


def admit_claim(store: Any, claim: dict) -> None:
    """DefaultStorageClass on a claim being created (in place)."""
    spec = claim.setdefault("spec", {})
    if spec.get("storageClassName") is None:
        name = default_class(store)
        if name is not None:
            spec["storageClassName"] = name


def bind(store: Any, claim: dict, consumer: bool) -> bool:
    """Provision and bind ``claim`` when its class allows it now (``consumer``: a pod using it is
    being scheduled); whether it is bound."""
    if (claim.get("status") or {}).get("phase") == "Bound":
        return True
    cls_name = (claim.get("spec") or {}).get("storageClassName")
    cls = store.get("storage.k8s.io/v1", "StorageClass", cls_name) if cls_name else None
    if cls is None:
        return False
    if cls.get("volumeBindingMode") == "WaitForFirstConsumer" and not consumer:
        return False
    md = claim["metadata"]
    volume = f"pvc-{md['uid']}"

    def write(o: dict) -> None:
        o.setdefault("spec", {})["volumeName"] = volume
        o["status"] = {"phase": "Bound", "accessModes": o["spec"].get("accessModes") or [],
                       "capacity": ((o["spec"].get("resources") or {}).get("requests") or {})}
    store.mutate("v1", "PersistentVolumeClaim", md["name"], md["namespace"], write)
    return True
