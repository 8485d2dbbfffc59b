"""Kubernetes placement is one typed part of a JobSpec (gpujobs/placement.py): validated when made,
filled by the same keywords and builder methods as before, stored flat as before."""
from __future__ import annotations

import dataclasses

import pytest

import gpujobs
from gpujobs.errors import SpecError
from gpujobs.placement import FIELDS, KubernetesPlacement
from gpujobs.spec import JobSpec, Volume

#: the keys JobSpec.to_dict wrote before the placement was one field (the local agent stores them)
STORED_KEYS = ["framework", "command", "nodes", "procs_per_node", "gpus_per_proc", "cpus_per_proc",
               "memory_per_proc", "gpu_resource", "name", "queue", "priority", "image", "env",
               "secret_env", "backend", "return_all", "max_payload_bytes", "grace_period_s",
               "max_runtime_s", "working_dir", "kind", "namespace", "volcano", "volcano_queue",
               "node_selector", "tolerations", "topology_required", "topology_preferred", "volume",
               "shm_size", "labels"]


def train():
    return 1


def test_the_spec_holds_its_placement_in_one_typed_field():
    names = {f.name for f in dataclasses.fields(JobSpec)}
    assert "kubernetes" in names and not names & set(FIELDS)
    spec = JobSpec(fn=train, namespace="ml", node_selector=(("pool", "a100"),), volume=Volume("data"))
    assert spec.kubernetes == KubernetesPlacement(namespace="ml", node_selector=(("pool", "a100"),),
                                                  volume=Volume("data"))
    assert (spec.namespace, spec.volume, spec.volcano) == ("ml", Volume("data"), "none")


def test_the_placement_is_validated_when_made_with_the_same_errors():
    with pytest.raises(SpecError) as err:
        KubernetesPlacement(namespace="ML_Team")
    assert err.value.field == "namespace" and "'ml-team'" in str(err.value)
    with pytest.raises(SpecError) as err2:
        JobSpec(fn=train, namespace="ML_Team")
    assert str(err2.value) == str(err.value)
    for bad, field in ((dict(volcano="sometimes"), "volcano"), (dict(tolerations=("x",)), "tolerations"),
                       (dict(volume=Volume("Data")), "volume"), (dict(shm_size="lots"), "shm_size"),
                       (dict(node_selector=(("pool", 1),)), "node_selector[pool]")):
        with pytest.raises(SpecError) as e:
            KubernetesPlacement(**bad)
        assert e.value.field == field
    with pytest.raises(SpecError, match="kubernetes"):
        JobSpec(fn=train, kubernetes={"namespace": "ml"})


def test_replacing_one_placement_field_keeps_the_others():
    spec = JobSpec(fn=train, namespace="ml", kind="PyTorchJob")
    moved = dataclasses.replace(spec, volume=Volume("ckpt", "/mnt/ckpt"))
    assert moved.kubernetes == KubernetesPlacement(kind="PyTorchJob", namespace="ml",
                                                   volume=Volume("ckpt", "/mnt/ckpt"))
    assert spec.replace(namespace="other").kubernetes.kind == "PyTorchJob"


def test_stored_flat_as_before_and_read_back_the_same():
    spec = JobSpec(command=("python", "t.py"), kind="MPIJob", framework="mpi", namespace="ml",
                   tolerations=({"key": "gpu", "operator": "Exists"},), labels=(("team", "a"),),
                   volume=Volume("data"), working_dir="/work")
    d = spec.to_dict()
    assert sorted(d) == sorted(STORED_KEYS)
    assert d["volume"] == {"claim": "data", "mount_path": "/mnt/data"} and d["labels"] == [["team", "a"]]
    assert JobSpec.from_dict(d) == spec
    assert JobSpec.stored(d).kubernetes == spec.kubernetes  # what the local agent reads back


def test_builder_methods_and_options_keep_their_names():
    spec = (gpujobs.job(train).kubernetes(namespace="ml", volcano="gang", volcano_queue="vq")
            .topology(required="rack").node_selector(pool="a100").tolerations({"key": "k"})
            .volume("data", "/d").options(shm_size="1Gi", labels=(("a", "b"),)).spec())
    assert spec.kubernetes == KubernetesPlacement(
        namespace="ml", volcano="gang", volcano_queue="vq", topology_required="rack",
        node_selector=(("pool", "a100"),), tolerations=({"key": "k"},), volume=Volume("data", "/d"),
        shm_size="1Gi", labels=(("a", "b"),))
    assert spec.backend == "kubernetes"
    placed = gpujobs.job(train).options(kubernetes=KubernetesPlacement(namespace="x"), kind="PyTorchJob")
    assert placed.spec().kubernetes == KubernetesPlacement(namespace="x", kind="PyTorchJob")
