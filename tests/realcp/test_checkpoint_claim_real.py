"""The default checkpoint claim against the real kube-apiserver: its DefaultStorageClass admission
(which fills in the class on submit's dry-run create only where a default StorageClass exists),
the claim created owned by the job, and the real garbage collector deleting it with the job. No
provisioner runs here, so the claim stays Pending: these stories check the objects."""
from __future__ import annotations

import warnings

import pytest

import gpujobs
from gpujobs.backends.kubernetes import naming
from gpujobs.errors import CheckpointWarning

from .conftest import NS, QUEUE
from .kube import job_obj, wait_for

CLASS = "realcp-default"


def saves(n):
    import gpujobs as g
    return str(g.context().checkpoint_dir), n


@pytest.fixture
def default_class(admin_api):
    from kubernetes import client
    storage = client.StorageV1Api(admin_api)
    storage.create_storage_class({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                                  "metadata": {"name": CLASS, "annotations": {
                                      "storageclass.kubernetes.io/is-default-class": "true"}},
                                  "provisioner": "example.com/none", "volumeBindingMode": "WaitForFirstConsumer"})
    yield CLASS
    storage.delete_storage_class(CLASS)


def _claim(api, name):
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    try:
        return client.CoreV1Api(api).read_namespaced_persistent_volume_claim(f"{name}-ckpt", NS)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _spec():
    return gpujobs.job(saves, 1).ddp(nodes=1, gpus_per_node=1).options(kind="PyTorchJob").queue(QUEUE).spec()


def test_a_checkpointing_job_gets_a_claim_of_the_default_class_deleted_with_it(controlplane, backend,
                                                                              default_class):
    with warnings.catch_warnings():
        warnings.simplefilter("error", CheckpointWarning)
        job_id = backend.submit(_spec())
    _, name = naming.parse_job_id(job_id)
    api = backend.api_client
    job = job_obj(api, "PyTorchJob", name)
    claim = _claim(api, name)
    assert claim is not None and claim.spec.storage_class_name == default_class
    assert [o.uid for o in claim.metadata.owner_references] == [job["metadata"]["uid"]]
    pod = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert {"name": "data", "persistentVolumeClaim": {"claimName": f"{name}-ckpt"}} in pod["volumes"]
    backend.cancel(job_id)
    wait_for(lambda: _claim(api, name) is None, 60, "the real garbage collector to delete the claim")


def test_without_a_default_class_no_claim_and_the_warning_says_why(controlplane, backend):
    with pytest.warns(CheckpointWarning, match=f"namespace '{NS}' has no default StorageClass"):
        job_id = backend.submit(_spec())
    _, name = naming.parse_job_id(job_id)
    try:
        assert _claim(backend.api_client, name) is None
    finally:
        backend.cancel(job_id)
