"""SimCluster: fake apiserver + simulated controllers in one fixture-friendly object.

    with SimCluster(gpus=1) as sim:          # ClusterQueue 'cq' (1 GPU), LocalQueue 'default/q'
        backend = KubernetesBackend(api_client=sim.api_client(), namespace="default")
        ...
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .apiserver import FakeApiServer
from .controllers import SimControllers

WL_API = "kueue.x-k8s.io/v1beta2"
ADMIN_RUNTIMES = Path(__file__).resolve().parent.parent / "docs" / "trainer-runtimes.yaml"


def trainer_runtime() -> dict:
    """Kubeflow Trainer's ``torch-distributed`` ClusterTrainingRuntime: the upstream manifest from the
    CRD folder's examples (trainer@8c0f505 manifests/base/runtimes/torch_distributed.yaml), else its
    essentials (mlPolicy.torch, one replicated job 'node' with a container 'node')."""
    from . import crds
    if crds.crds_available():
        for _, obj in crds.iter_examples("trainer"):
            if obj.get("kind") == "ClusterTrainingRuntime" and obj["metadata"]["name"] == "torch-distributed":
                return obj
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
            "metadata": {"name": "torch-distributed", "labels": {"trainer.kubeflow.org/framework": "torch"}},
            "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [{
                "name": "node", "template": {"metadata": {"labels": {
                    "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                    "spec": {"template": {"spec": {"containers": [{
                        "name": "node", "image": "pytorch/pytorch", "command": ["/bin/bash", "-c"]}]}}}}}]}}}}


class SimCluster:
    """A running fake cluster: ``server`` (HTTP), ``store`` (direct access), ``controllers``."""

    def __init__(self, *, gpus: float | None = 4, cpus: float | None = 64, queue: str = "q",
                 namespace: str = "default", priorities: dict[str, int] | None = None,
                 preemption: str = "LowerPriority", pod_slots: int | None = None,
                 run_seconds: float = 0.3, visibility: bool = True, crds: bool | list[str] = True,
                 bootstrap: bool = True, runtimes: bool = True, pods_ready_timeout_s: float | None = None,
                 backoff_base_s: float = 60.0, backoff_max_s: float = 3600.0,
                 backoff_limit: int | None = None, crd_manifests: list[dict] | None = None,
                 disabled_integrations: tuple[str, ...] = (),
                 images: dict[str, dict] | None = None, mpi_gang_scheduling: str = "",
                 admin_runtimes: bool | None = None, **server_kw: Any):
        """``pods_ready_timeout_s`` turns on Kueue's waitForPodsReady (off by default here;
        Kueue >= 0.19 has it on with 30 min); ``backoff_*`` are its requeuingStrategy
        (backoffBaseSeconds, backoffMaxSeconds, backoffLimitCount: None = requeue forever).
        ``bootstrap`` (default): torch pods run their real container command (the runtime files'
        check, then bootstrap.py, which starts one rank per process of the pod), as in a real pod;
        False runs the runner directly, one process per pod. ``runtimes`` installs Kubeflow
        Trainer's default ClusterTrainingRuntime ``torch-distributed`` (as its install does).
        ``crd_manifests``: upstream CRD manifests installed in place of the default ones of the same
        name, schema included, so writes are pruned by it (e.g. Kubeflow Trainer v2.1.0's TrainJob
        CRD, which has no ``runtimePatches``: see :func:`gpujobs_sim.crds.prune`).
        ``disabled_integrations``: Kueue frameworks missing from its integrations.frameworks (e.g.
        ``("kubeflow.org/pytorchjob",)``): Kueue ignores such jobs, which stay suspended.
        ``images``: what images contain, by name pattern (gpujobs_sim.images: sshd, ssh, ssh_port,
        no_host_key_check, openmpi, python3), over the built-in table of known images.
        ``admin_runtimes`` (default: as ``runtimes``) applies the documented manifest a cluster admin
        applies, docs/trainer-runtimes.yaml (gpujobs' ClusterTrainingRuntimes): input objects; how
        their pods then behave follows the simulator's own rules.
        ``mpi_gang_scheduling``: the MPI Operator's ``--gang-scheduling`` flag ("" as its release
        manifest installs it, or "volcano": a PodGroup per MPIJob; gpujobs_sim.mpi_operator)."""
        self.server = FakeApiServer(crds=crds, **server_kw)
        for m in crd_manifests or ():
            self.server.install_crd_manifest(m)
        self.store = self.server.store
        self.namespace, self.queue = namespace, queue
        self.controllers = SimControllers(self.server, pod_slots=pod_slots, run_seconds=run_seconds,
                                          pods_ready_timeout_s=pods_ready_timeout_s,
                                          backoff_base_s=backoff_base_s, backoff_max_s=backoff_max_s,
                                          backoff_limit=backoff_limit,
                                          disabled_integrations=disabled_integrations)
        self.controllers.kubelet.run_bootstrap = bootstrap  # pods run the real bootstrap.py
        self.controllers.kubelet.images = dict(images or {})
        self.controllers.mpi_gang_scheduling = mpi_gang_scheduling
        if gpus is not None or cpus is not None:
            self.add_queue(queue, namespace, gpus=gpus, cpus=cpus, preemption=preemption)
        for name, value in (priorities or {}).items():
            self.store.create({"apiVersion": WL_API, "kind": "WorkloadPriorityClass",
                               "metadata": {"name": name}, "value": value})
        self.server.set_visibility(visibility)
        if any(r.kind == "ClusterTrainingRuntime" for r in self.store.resources()):
            if runtimes:
                self.store.create(trainer_runtime())
            if runtimes if admin_runtimes is None else admin_runtimes:
                import yaml
                for rt in yaml.safe_load_all(ADMIN_RUNTIMES.read_text()):
                    self.store.create(rt)
        self._clients: list = []

    def add_queue(self, name: str, namespace: str = "default", *, gpus: float | None = 4,
                  cpus: float | None = 64, memory: str | None = "1Ti", cluster_queue: str | None = None,
                  preemption: str = "LowerPriority", cohort: str | None = None,
                  strategy: str = "BestEffortFIFO") -> None:
        """A ClusterQueue (default flavor; ``strategy``: its queueingStrategy) with a LocalQueue
        ``namespace/name`` pointing at it."""
        cqn = cluster_queue or f"cq-{name}"
        resources = []
        if gpus is not None:
            resources.append({"name": "nvidia.com/gpu", "nominalQuota": str(gpus)})
        if cpus is not None:
            resources.append({"name": "cpu", "nominalQuota": str(cpus)})
        if memory is not None and cpus is not None:  # Kueue refuses requests for uncovered resources
            resources.append({"name": "memory", "nominalQuota": memory})
        if self.store.get(WL_API, "ResourceFlavor", "default-flavor") is None:
            self.store.create({"apiVersion": WL_API, "kind": "ResourceFlavor", "metadata": {"name": "default-flavor"}})
        if self.store.get(WL_API, "ClusterQueue", cqn) is None:
            spec: dict[str, Any] = {"namespaceSelector": {}, "resourceGroups": [{
                "coveredResources": [r["name"] for r in resources],
                "flavors": [{"name": "default-flavor", "resources": resources}]}],
                "preemption": {"withinClusterQueue": preemption}, "queueingStrategy": strategy}
            if cohort:
                spec["cohortName"] = cohort
            self.store.create({"apiVersion": WL_API, "kind": "ClusterQueue", "metadata": {"name": cqn},
                               "spec": spec})
        self.store.create({"apiVersion": WL_API, "kind": "LocalQueue",
                           "metadata": {"name": name, "namespace": namespace}, "spec": {"clusterQueue": cqn}})

    def start(self) -> "SimCluster":
        self.server.start()
        self.controllers.start()
        return self

    def api_client(self):
        from kubernetes import client
        c = client.ApiClient(self.server.configuration())
        self._clients.append(c)
        return c

    def write_kubeconfig(self, path: str | Path) -> str:
        """A kubeconfig pointing at this cluster, so ``KUBECONFIG=path`` makes every kubectl-style
        client (gpujobs' kubernetes backend included) talk to it as to a real one."""
        import yaml
        host = self.server.configuration().host
        doc = {"apiVersion": "v1", "kind": "Config", "current-context": "gpujobs-sim",
               "clusters": [{"name": "gpujobs-sim", "cluster": {"server": host}}],
               "users": [{"name": "researcher", "user": {"token": "sim"}}],
               "contexts": [{"name": "gpujobs-sim", "context": {
                   "cluster": "gpujobs-sim", "user": "researcher", "namespace": self.namespace}}]}
        Path(path).write_text(yaml.safe_dump(doc))
        return str(path)

    def stop(self) -> list[int]:
        """Stop everything; returns the pids of the pod processes that were started (all dead)."""
        pids = self.controllers.stop()
        self.server.stop()
        for c in self._clients:
            try:
                c.close()
            except Exception:
                pass
        return pids

    def __enter__(self) -> "SimCluster":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
