"""A node for the real control plane: Node ``realcp-node`` and the pods the real scheduler binds
to it, run by gpujobs_sim's kubelet on this machine.

What a kubelet owes the rest of the cluster, and what this one does:

- **the Node**: registered with 16 cpu, 64 GiB, 110 pods and 8 ``nvidia.com/gpu`` (or ``gpus``), Ready, its
  InternalIP 127.0.0.1 and its port in ``status.daemonEndpoints`` (where the API server's
  ``pods/log`` proxy connects); the ``node.kubernetes.io/not-ready`` taint the
  TaintNodesByCondition admission plugin puts on a new Node is taken off (the node lifecycle
  controller that would do it is off in this control plane);
- **pods**: a pod bound to the node is run by :class:`gpujobs_sim.kubelet.Kubelet` (its status
  Running, then Succeeded / Failed with the exit code, written to the real ``pods/status``); a
  gpujobs rank pod runs its real container command (the bootstrap, which starts
  ``gpujobs.rank.runner``) on its volumes, read from the real ConfigMaps and Secrets. Every pod of the node shares 127.0.0.1, so a rank's
  ``MASTER_ADDR`` is 127.0.0.1 and each run of a job gets a master port of its own (where a
  cluster gives each pod its own IP); its rank is its Job completion index
  (``batch.kubernetes.io/job-completion-index``), its world the job's ``WORLD_SIZE``;
- **downwardAPI volumes** follow a running pod's annotations (``job.stacks()`` asks through one);
- **graceful deletion**: a pod given a ``deletionTimestamp`` has its process SIGTERMed, and once
  it has ended the pod is deleted with grace 0 (the kubelet's final DELETE; without it the pod
  would stay Terminating for ever), 1.5 s later, so controllers see the ended pod's status
  first; the SIGTERM goes to the container's main process only (the bootstrap passes it on), the
  SIGKILL after the pod's grace period (at most 5 s here) to all its processes;
- **logs**: served over HTTPS with the node's certificate (``/containerLogs/NS/POD/CONTAINER``,
  ``follow``, ``tailLines``, ``timestamps``), as the API server's ``pods/log`` proxy asks a
  kubelet for them.

Not done: the operators' kinds (no operator runs here, so only BatchJob pods come), probes
other than the sim kubelet's sshd check, and resource limits.
"""
from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

from gpujobs_sim.kubelet import ANN_PORT, ANN_RANK, ANN_ROLE, ANN_WORLD, Kubelet
from gpujobs_sim.podlogs import PodLogs
from tests.support import free_port

NODE = "realcp-node"
INDEX = "batch.kubernetes.io/job-completion-index"
CAPACITY = {"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "8"}


class RealStore:
    """What the sim kubelet reads and writes, on the real API server (as the admin)."""

    def __init__(self, api_client: Any):
        from kubernetes import client
        self.api, self.core = api_client, client.CoreV1Api(api_client)
        self.graceful: Callable | None = None  # the sim store's hook; unused here

    def _dict(self, obj: Any) -> dict:
        return self.api.sanitize_for_serialization(obj)

    def get(self, api_version: str, kind: str, name: str, ns: str | None = None) -> dict | None:
        from kubernetes.client.exceptions import ApiException
        read = {"Pod": self.core.read_namespaced_pod, "ConfigMap": self.core.read_namespaced_config_map,
                "Secret": self.core.read_namespaced_secret,
                "PersistentVolumeClaim": self.core.read_namespaced_persistent_volume_claim}[kind]
        try:
            return self._dict(read(name, ns))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, api_version: str, kind: str, ns: str | None = None, selector: str | None = None) -> list[dict]:
        assert kind == "Pod", kind
        kw = {"label_selector": selector} if selector else {}
        got = self.core.list_namespaced_pod(ns, **kw) if ns else self.core.list_pod_for_all_namespaces(**kw)
        return [self._dict(p) for p in got.items]

    def mutate(self, api_version: str, kind: str, name: str, ns: str, fn: Callable[[dict], None]) -> None:
        """Read, change, write the pod's status (again on a conflict); nothing when it is gone."""
        from kubernetes.client.exceptions import ApiException
        assert kind == "Pod", kind
        for _ in range(10):
            cur = self.get("v1", "Pod", name, ns)
            if cur is None:
                return
            fn(cur)
            try:
                self.core.replace_namespaced_pod_status(name, ns, cur)
                return
            except ApiException as exc:
                if exc.status == 404:
                    return
                if exc.status != 409:
                    raise

    def patch(self, api_version: str, kind: str, name: str, ns: str, body: dict, subresource: str = "") -> None:
        assert kind == "Pod" and subresource == "status", (kind, subresource)
        self.core.patch_namespaced_pod_status(name, ns, body)

    def delete(self, api_version: str, kind: str, name: str, ns: str, now: bool = False) -> None:
        from kubernetes.client.exceptions import ApiException
        try:
            self.core.delete_namespaced_pod(name, ns, grace_period_seconds=0 if now else None)
        except ApiException as exc:
            if exc.status != 404:
                raise


class _Server:
    """The sim kubelet's view of its cluster: ``store`` and ``logs``."""

    def __init__(self, store: RealStore):
        self.store, self.logs = store, PodLogs()


class Node:
    """Registers the Node, runs its pods, serves their logs; :meth:`stop` undoes all of it
    (kills every process it started, deletes the Node)."""

    def __init__(self, api_client: Any, pki: Path, gpus: int = 8):
        from kubernetes import client
        self.capacity = dict(CAPACITY, **{"nvidia.com/gpu": str(gpus)})
        self.core = client.CoreV1Api(api_client)
        self.server = _Server(RealStore(api_client))
        self.kubelet = Kubelet(self.server, default_seconds=0.3, grace_s=5.0)
        self.kubelet.graceful_deletion = True
        self.kubelet.final_delete_after_s = 1.5  # controllers see an ended pod's status before it goes
        self.kubelet.run_bootstrap = True  # a rank pod runs its real container command (bootstrap.py)
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._pods: dict[str, dict] = {}  # pod uid -> the node's pods as last seen
        self._runs: dict[tuple, list[str]] = {}  # (namespace, job, completion index) -> pod uids, in order
        self._ports: dict[tuple, int] = {}  # (namespace, job, run) -> its master port (see _as_sim_pod)
        self._http = _log_server(self, pki)
        threading.Thread(target=self._http.serve_forever, daemon=True, name="realcp-node-logs").start()
        self._register()
        self._watcher = threading.Thread(target=self._watch, daemon=True, name="realcp-node-pods")
        self._watcher.start()

    # ------------------------------------------------------------------ the Node
    def _register(self) -> None:
        from kubernetes.client.exceptions import ApiException
        try:
            self.core.delete_node(NODE)  # a node an earlier test left behind
        except ApiException as exc:
            if exc.status != 404:
                raise
        self.core.create_node({"metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}}})
        self.core.patch_node(NODE, {"spec": {"taints": []}})  # the not-ready taint of TaintNodesByCondition
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.core.patch_node_status(NODE, {"status": {
            "capacity": self.capacity, "allocatable": self.capacity,
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": NODE}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self._http.server_address[1]}},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "realcp node",
                            "lastHeartbeatTime": now, "lastTransitionTime": now}],
            "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux", "kubeletVersion": "v1.37.2",
                         "kubeProxyVersion": "", "containerRuntimeVersion": "gpujobs-sim://0",
                         "kernelVersion": "", "osImage": "", "machineID": "", "systemUUID": "", "bootID": ""}}})

    # ------------------------------------------------------------------ its pods
    def _watch(self) -> None:
        from kubernetes import watch
        while not self._stop.is_set():
            w = watch.Watch()
            try:
                for ev in w.stream(self.core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={NODE}",
                                   timeout_seconds=5):  # stop() waits for the stream to end
                    if self._stop.is_set():
                        break
                    pod = self.server.store._dict(ev["object"])
                    if ev["type"] in ("ADDED", "MODIFIED"):
                        self._pods[pod["metadata"]["uid"]] = pod
                        self._sync(pod)
                    elif ev["type"] == "DELETED":
                        self._pods.pop(pod["metadata"]["uid"], None)
            except Exception as exc:  # noqa: BLE001 - the API server restarting: watch again
                if self._stop.is_set():
                    break
                self.errors.append(exc)
                time.sleep(0.5)
            finally:
                w.stop()

    def _sync(self, pod: dict) -> None:
        md = pod["metadata"]
        uid = md["uid"]
        if md.get("deletionTimestamp"):
            t = self.kubelet._threads.get(uid)
            if t is not None and t.is_alive():
                self.kubelet.on_pod_terminating(pod)  # SIGTERM; _run deletes it once it has ended
            elif (pod.get("status") or {}).get("phase") in ("Pending", "Succeeded", "Failed", None):
                self.server.store.delete("v1", "Pod", md["name"], md["namespace"], now=True)
            return
        if uid in self.kubelet._threads:  # running: its downwardAPI files follow its annotations
            if (pod.get("status") or {}).get("phase") == "Running":
                self.kubelet._refresh_volumes(list(self._pods.values()))  # (it forgets pods not given)
            return
        if (pod.get("status") or {}).get("phase") not in ("Pending", None):
            return
        t = threading.Thread(target=self._run, args=(self._as_sim_pod(pod),), daemon=True,
                             name=f"pod-{md['name']}")
        self.kubelet._threads[uid] = t
        t.start()

    def _run(self, pod: dict) -> None:
        try:
            self.kubelet._run(pod)
        except BaseException as exc:  # noqa: BLE001 - kept for the test to see
            self.errors.append(exc)

    def _as_sim_pod(self, pod: dict) -> dict:
        """The pod with the sim kubelet's annotations for what a real cluster gives it by other
        means: its rank (the Job completion index), world size, and a master port of its run's
        own. On a cluster each pod has its own IP, so every job's rank 0 listens on the same
        port (its env's MASTER_PORT); here all pods share 127.0.0.1, so each run of a job gets
        a free port (a run: the n-th pod of each completion index; the ranks of a run agree)."""
        pod = json.loads(json.dumps(pod))
        ann = pod["metadata"].setdefault("annotations", {})
        env = {e["name"]: e.get("value") for c in pod["spec"].get("containers") or [] for e in c.get("env") or []}
        if INDEX in ann:
            ann.setdefault(ANN_RANK, ann[INDEX])
        if env.get("WORLD_SIZE"):
            ann.setdefault(ANN_WORLD, env["WORLD_SIZE"])
        if env.get("MASTER_PORT"):
            job = env.get("MASTER_ADDR") or pod["metadata"]["name"]
            seen = self._runs.setdefault((pod["metadata"]["namespace"], job, ann.get(INDEX, "")), [])
            if pod["metadata"]["uid"] not in seen:
                seen.append(pod["metadata"]["uid"])
            run = (pod["metadata"]["namespace"], job, seen.index(pod["metadata"]["uid"]))
            ann.setdefault(ANN_PORT, str(self._ports.setdefault(run, free_port())))
        if (pod["metadata"].get("labels") or {}).get("gpujobs.dev/job"):
            ann.setdefault(ANN_ROLE, "rank")
        return pod

    # ------------------------------------------------------------------ stop
    def stop(self) -> list[int]:
        """Stop the watch and the log server, kill every process, delete the Node; the pids."""
        from kubernetes.client.exceptions import ApiException
        self._stop.set()
        pids = self.kubelet.stop()
        self._http.shutdown()
        self._http.server_close()
        try:
            self.core.delete_node(NODE)
        except ApiException as exc:
            if exc.status != 404:
                raise
        self._watcher.join(10)
        return pids


def _log_server(node: Node, pki: Path) -> ThreadingHTTPServer:
    """The kubelet's ``/containerLogs`` over HTTPS (the node's certificate, 127.0.0.1)."""
    logs = node.server.logs

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            url = urllib.parse.urlsplit(self.path)
            parts = url.path.strip("/").split("/")
            if len(parts) != 4 or parts[0] != "containerLogs":
                self.send_error(404)
                return
            ns, pod = parts[1], parts[2]
            q = dict(urllib.parse.parse_qsl(url.query))
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            if q.get("timestamps") == "true":
                data = logs.timestamped(ns, pod)
                offset = None
            else:
                data, offset = logs.read(ns, pod)
            if q.get("tailLines"):
                n = int(q["tailLines"])
                data = b"".join(data.splitlines(keepends=True)[-n:]) if n else b""
            try:
                self.wfile.write(data)
                self.wfile.flush()
                if q.get("follow") != "true" or offset is None:
                    return
                while not node._stop.is_set():  # until the container has ended (then its last bytes)
                    ended = _pod_finished(node, ns, pod)
                    more, offset = logs.read(ns, pod, offset)
                    if more:
                        self.wfile.write(more)
                        self.wfile.flush()
                    if ended:
                        return
                    logs.wait(0.2)
            except (OSError, ssl.SSLError):  # the follower went away
                return

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki / "kubelet.crt", pki / "kubelet.key")
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    return srv


def _pod_finished(node: Node, ns: str, pod: str) -> bool:
    cur = node.server.store.get("v1", "Pod", pod, ns)
    return cur is None or (cur.get("status") or {}).get("phase") in ("Succeeded", "Failed")
