"""The simulated kubelet: pods go Pending -> Running -> Succeeded/Failed, with logs.

A pod runs one of two ways:

- **runner** (the pod mounts a sealed call and a key): the real
  ``python -m gpujobs.rank.runner`` runs locally as a subprocess, with the pod's volumes
  (runtime ConfigMap, job files from its annotations or Secret, key Secret) written to a
  local folder by sim.volumes and the pod's env (RANK/WORLD_SIZE/
  MASTER_ADDR set like the operator would). Its stdout is the pod log, so the
  ``GPUJOBS-RESULT`` line is real. MPI launchers run ``mpirun`` of the runner.
- **scripted**: no payload; the pod prints its annotation ``sim.gpujobs.dev/logs``
  (or a greeting), sleeps ``sim.gpujobs.dev/seconds`` (default from the cluster) and
  exits with ``sim.gpujobs.dev/exit-code``. Idle pods (MPI workers, Ray workers) run
  until their job ends.

With ``run_bootstrap`` (the default of ``SimCluster``), torch ``rank`` pods
run their real container command instead (check the runtime files' digest, then
``bootstrap.py``), on the runtime ConfigMap and the job's ``bootstrap.json`` unpacked locally (the
runner then imports gpujobs from lib.zip, as in a real pod, and the bootstrap's metrics
sampler writes ``GPUJOBS-METRICS`` lines into the pod log). An MPIJob launcher runs its real command
(``bootstrap.py mpi-launcher``) with the simulated ``mpirun`` (mpirun_shim.py: Open MPI's host choice
and ssh checks, against the worker pods whose sshd is up) first on its PATH, which then starts the
ranks with this machine's mpirun; a Volcano mpi master runs ``mpirun`` of ``bootstrap.py mpi-rank``
locally. Idle MPI workers whose image has no sshd (gpujobs_sim.images) exit 127.
"""
from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import gpujobs.rank.contract as contract
from gpujobs.rank.contract import ENV_PREFIX, RankEnv

from .rules import parse_time
from .store import now_iso
from . import storage
from .images import facts as image_facts
from .volumes import MissingSource, container_path, local_path, materialize, refresh_downward

ANN_RANK, ANN_ROLE, ANN_WORLD = "sim.gpujobs.dev/rank", "sim.gpujobs.dev/role", "sim.gpujobs.dev/world"
ANN_PORT, ANN_LOGS, ANN_SECONDS, ANN_EXIT = ("sim.gpujobs.dev/master-port", "sim.gpujobs.dev/logs",
                                             "sim.gpujobs.dev/seconds", "sim.gpujobs.dev/exit-code")
ANN_IDLE = "sim.gpujobs.dev/idle"
RAY_SUBMITTER, ANN_RAY_HEAD = "ray-submitter", "sim.gpujobs.dev/ray-head"  # see kuberay._ray_submitter
ANN_RAY_JOB_STATUS = "sim.gpujobs.dev/ray-job-status"  # the driver's end, as Ray's dashboard reports it
ANN_FOLLOWS = "sim.gpujobs.dev/follows"  # a retried submitter pod: `ray job logs --follow` of that pod's job
MPI_OPERATOR_LABEL = "training.kubeflow.org/operator-name"  # see mpi_operator.py
MIN_GRACE_S = 2.0  # the kubelet's minimumGracePeriodInSeconds (kuberuntime_manager.go)


class Kubelet:
    """Runs the pods of a :class:`~gpujobs_sim.apiserver.FakeApiServer` store."""

    def __init__(self, server: Any, slots: int | None = None, start_delay: float = 0.05,
                 default_seconds: float = 0.3, grace_s: float = 2.0):
        self.server, self.store = server, server.store
        self.slots, self.start_delay = slots, start_delay
        self.default_seconds, self.grace_s = default_seconds, grace_s
        self.procs: dict[tuple[str, str], subprocess.Popen] = {}
        self._all_procs: list[subprocess.Popen] = []  # procs keeps the newest per pod name only
        self.started_pids: list[int] = []
        self._threads: dict[str, threading.Thread] = {}  # by pod uid
        self._lock = threading.Lock()
        self._tmp = tempfile.TemporaryDirectory(prefix="gpujobs-sim-")
        self.stopping = threading.Event()
        self.run_bootstrap = False
        self.images: dict[str, dict] = {}  # extra image facts (gpujobs_sim.images)
        self._mounted: dict[str, Path] = {}  # pod uid -> where its volumes are unpacked
        self._pod_dirs: dict[str, Path] = {}  # pod uid -> its folder, deleted with the pod
        self._pod_tmps: dict[str, Path] = {}  # pod uid -> its /tmp (TMPDIR), deleted with the pod
        self._restarts: dict[str, int] = {}  # pod uid -> its container's restartCount
        # the first restart's back-off; it doubles per restart up to 30x (the kubelet's 10 s and
        # 300 s: kubernetes pkg/kubelet/kubelet.go backOffPeriod, MaxContainerBackOff), scaled down
        self.restart_backoff_s = 0.1
        # how late `ray job logs --follow` prints the driver's lines in the submitter pod: KubeRay
        # sees the Ray job SUCCEEDED before the submitter has printed (and finished) (kuberay #1919)
        self.ray_logs_lag_s = 0.5
        # how many submitter pods (the first ones) lose their `ray job logs --follow` connection
        # before it returns: such a pod fails, and the submitter Job's backoffLimit decides whether a
        # new pod follows the Ray job's log again from its start (kuberay.py)
        self.ray_follow_drops = 0
        # graceful pod deletion (store.graceful): a running pod deleted gets deletionTimestamp, its
        # process SIGTERM, and the pod object stays (its log readable) until the process has ended
        # or the grace period (at most grace_s here) is over; off: deleted pods vanish at once
        self.graceful_deletion = False
        # how long an ended pod deleted gracefully stays before the kubelet's final DELETE (a real
        # kubelet first syncs the terminal status, then tears down volumes and the sandbox)
        self.final_delete_after_s = 0.3
        self._ended: set[str] = set()  # uids whose container ended (deleted at once from now on)
        self._terminating: set[str] = set()
        self.store.graceful = self._grace_of

    # ----------------------------------------------------------------- loop
    def tick(self) -> None:
        """Start pending pods that fit the slots; refresh running pods' downwardAPI files."""
        for claim in self.store.list("v1", "PersistentVolumeClaim"):  # volumeBindingMode Immediate
            storage.bind(self.store, claim, consumer=False)
        pods = self.store.list("v1", "Pod")
        self._refresh_volumes(pods)
        running = sum(1 for p in pods if p["status"].get("phase") == "Running" or
                      (p["status"].get("phase") == "Pending" and p["metadata"]["uid"] in self._threads))
        for pod in sorted(pods, key=lambda p: int(p["metadata"]["resourceVersion"])):
            md = pod["metadata"]
            key = md["uid"]
            if pod["status"].get("phase") != "Pending" or key in self._threads or md.get("deletionTimestamp"):
                continue
            if self.slots is not None and running >= self.slots:
                self._unschedulable(pod)
                continue
            if time.time() - _created(pod) < self.start_delay or not self._volumes_ready(pod):
                continue
            running += 1
            t = threading.Thread(target=self._run, args=(pod,), daemon=True, name=f"pod-{md['name']}")
            self._threads[key] = t
            t.start()

    def _refresh_volumes(self, pods: list[dict]) -> None:
        live = {p["metadata"]["uid"]: p for p in pods}
        import shutil
        for uid, d in list(self._pod_dirs.items()):  # the pod is gone and its container ended
            t = self._threads.get(uid)
            if uid not in live and (t is None or not t.is_alive()):
                shutil.rmtree(d, ignore_errors=True)
                self._pod_dirs.pop(uid, None)
                shutil.rmtree(self._pod_tmps.pop(uid, d / "tmp"), ignore_errors=True)
        for uid, root in list(self._mounted.items()):
            pod = live.get(uid)
            if pod is None or pod["status"].get("phase") in ("Succeeded", "Failed"):
                self._mounted.pop(uid, None)
            elif pod["status"].get("phase") == "Running":
                try:
                    refresh_downward(pod, root)
                except OSError:
                    pass

    def _volumes_ready(self, pod: dict) -> bool:
        """Like the real kubelet: a pod stays in ContainerCreating until its ConfigMaps/Secrets exist."""
        ns = pod["metadata"]["namespace"]
        for v in (pod.get("spec") or {}).get("volumes") or []:
            if "configMap" in v and not v["configMap"].get("optional") and \
                    self.store.get("v1", "ConfigMap", v["configMap"]["name"], ns) is None:
                return False
            if "secret" in v and not v["secret"].get("optional") and \
                    self.store.get("v1", "Secret", v["secret"]["secretName"], ns) is None:
                return False
            if "persistentVolumeClaim" in v:
                claim = self.store.get("v1", "PersistentVolumeClaim", v["persistentVolumeClaim"]["claimName"], ns)
                if claim is None or not storage.bind(self.store, claim, consumer=True):
                    return False  # the scheduler: 'persistentvolumeclaim "<name>" not found' / unbound
        return True

    def _unschedulable(self, pod: dict) -> None:
        if any(c.get("type") == "PodScheduled" for c in pod["status"].get("conditions") or []):
            return
        md = pod["metadata"]
        self.store.patch("v1", "Pod", md["name"], md["namespace"], {"status": {"conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": "0/1 nodes are available: insufficient nvidia.com/gpu"}]}}, subresource="status")

    def on_pod_deleted(self, namespace: str, name: str) -> None:
        self.stop_container(namespace, name)

    def _grace_of(self, res: Any, pod: dict) -> float | None:
        """The grace period of a DELETE of ``pod`` (None: removed at once), as the API server's
        pod strategy decides it (store.graceful): a pod whose container runs here waits for
        spec.terminationGracePeriodSeconds (default 30)."""
        if not self.graceful_deletion or res.kind != "Pod" or res.group:
            return None
        uid = pod["metadata"]["uid"]
        with self._lock:
            t = self._threads.get(uid)
            if t is None or not t.is_alive() or uid in self._ended:
                return None
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return None
        grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
        return 30.0 if grace is None else float(grace)

    def on_pod_terminating(self, pod: dict) -> None:
        """A graceful DELETE of ``pod``: SIGTERM its process (once); the pod goes when it ends."""
        md = pod["metadata"]
        with self._lock:
            if md["uid"] in self._terminating:
                return
            self._terminating.add(md["uid"])
        self.stop_container(md["namespace"], md["name"])

    def stop_container(self, namespace: str, name: str) -> None:
        """SIGTERM the container's main process (only it, as a container runtime signals PID 1:
        the bootstrap passes it on to the ranks), SIGKILL the container's processes after the
        grace period (the pod object stays): the DELETE's (``deletionGracePeriodSeconds``), else
        the pod's ``terminationGracePeriodSeconds`` (default 30), never under 2 s
        (kubernetes@v1.37.2 pkg/kubelet/kuberuntime kuberuntime_container.go killContainer,
        minimumGracePeriodInSeconds), at most ``grace_s`` (the simulation's time is short)."""
        with self._lock:
            proc = self.procs.get((namespace, name))
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # Popen's: a process gone meanwhile is no error
            grace = self._grace_s(self.store.get("v1", "Pod", name, namespace) or {})
            threading.Thread(target=_kill_later, args=(proc, grace), daemon=True).start()

    def _grace_s(self, pod: dict) -> float:
        """Seconds from a pod's SIGTERM to its SIGKILL here (see :meth:`stop_container`)."""
        grace = (pod.get("metadata") or {}).get("deletionGracePeriodSeconds")
        if grace is None:
            grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
        return min(self.grace_s, max(MIN_GRACE_S, 30.0 if grace is None else float(grace)))

    def stop(self) -> list[int]:
        """Kill every process started; return their pids."""
        self.stopping.set()
        with self._lock:
            procs = list(self._all_procs)
        for p in procs:
            if p.poll() is None:
                _signal(p, signal.SIGKILL)
        for p in procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                pass
        for t in list(self._threads.values()):
            t.join(2)
        self._tmp.cleanup()
        return list(self.started_pids)

    # ----------------------------------------------------------------- one pod
    def _set_phase(self, pod: dict, phase: str, exit_code: int | None = None) -> bool:
        """Write this pod's phase; False when it is gone (or replaced by a new pod of its name)."""
        md = pod["metadata"]
        c0 = (pod["spec"].get("containers") or [{"name": "main"}])[0].get("name", "main")
        now = now_iso()
        if phase == "Running":
            ready = self._probe_ready(pod)
            status = {"phase": "Running", "startTime": now, "podIP": "127.0.0.1", "conditions": [
                {"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": str(ready),
                                                             "lastTransitionTime": now}],
                "containerStatuses": [{"name": c0, "ready": ready, "restartCount": self._restarts.get(md["uid"], 0),
                                       "state": {"running": {"startedAt": now}}}]}
        else:
            term = {"exitCode": exit_code or 0, "startedAt": now, "finishedAt": now,
                    "reason": "Completed" if not exit_code else "Error"}
            msg = self._termination_message(pod, exit_code)
            if msg:
                term["message"] = msg
            status = {"phase": phase, "conditions": [{"type": "Ready", "status": "False",
                                                      "reason": "PodCompleted"}],
                      "containerStatuses": [{"name": c0, "ready": False, "restartCount": self._restarts.get(
                          md["uid"], 0), "state": {"terminated": term}}]}
        mine = []

        def write(o: dict) -> None:
            if o["metadata"].get("uid") == md["uid"]:
                o["status"] = status
                mine.append(True)
        self.store.mutate("v1", "Pod", md["name"], md["namespace"], write)
        return bool(mine)

    def _termination_message(self, pod: dict, exit_code: int | None) -> str:
        """What the kubelet puts in state.terminated.message: the container's terminationMessagePath
        file (here the local file its GPUJOBS_TERMINATION_LOG points to), at most 4096 bytes; with
        terminationMessagePolicy FallbackToLogsOnError and an empty file after a failure, the last
        80 lines / 2048 bytes of its log (kubernetes.io/docs/tasks/debug/debug-application/
        determine-reason-pod-failure/#customizing-the-termination-message)."""
        md = pod["metadata"]
        c0 = (pod["spec"].get("containers") or [{}])[0]
        d = self._mounted.get(md["uid"]) or self._pod_dir(md)
        path = d / "termination-log"
        text = ""
        try:
            text = path.read_bytes()[:4096].decode("utf-8", "replace")
        except OSError:
            pass
        if not text and exit_code and c0.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            data, _ = self.server.logs.read(md["namespace"], md["name"])
            text = b"".join(data.splitlines(keepends=True)[-80:])[-2048:].decode("utf-8", "replace")
        return text

    def _run(self, pod: dict) -> None:
        md = pod["metadata"]
        ns, name = md["namespace"], md["name"]
        ann = md.get("annotations") or {}
        try:
            cmd, env = self._command(pod)  # mounts its volumes first, as the kubelet does
        except MissingSource:  # gone since _volumes_ready: stay Pending, try again next tick
            with self._lock:
                self._threads.pop(md["uid"], None)
            return
        except Exception as exc:  # noqa: BLE001 - a broken pod fails like a crashing container
            if self._set_phase(pod, "Running"):
                self.server.logs.append(ns, name, f"sim kubelet: cannot start: {exc}\n")
                self._set_phase(pod, "Failed", 128)
            return
        if not self._set_phase(pod, "Running"):
            return
        submitter = ann.get(ANN_ROLE) == RAY_SUBMITTER
        if submitter:  # what `ray job submit --no-wait` prints before `ray job logs --follow`
            self.server.logs.append(ns, name, f"Job submission server address: http://{ann.get(ANN_RAY_HEAD)}"
                                    f"-svc:8265\n-------------------------------------------------------\n"
                                    f"Job 'raysubmit_sim' submitted successfully\n"
                                    f"-------------------------------------------------------\n")
        follow: dict[str, Any] = {}
        if submitter and cmd is not None:
            follow = {"lag": self.ray_logs_lag_s, "on_exit": lambda c: self._ray_job_ended(pod, c)}
        code = self._scripted(pod, ann) if cmd is None else self._exec(ns, name, cmd, env, uid=md["uid"], **follow)
        while code != 0 and pod["spec"].get("restartPolicy") in ("OnFailure", "Always") and self._restart(pod, code):
            code = self._scripted(pod, ann) if cmd is None else self._exec(ns, name, cmd, env, uid=md["uid"])
        if submitter and cmd is not None and self.ray_follow_drops > 0 and not self.stopping.is_set():
            # `ray job logs --follow` lost its connection to the dashboard: the submitter exits
            # non-zero though the Ray job goes on (or has ended) on the head
            self.ray_follow_drops -= 1
            self.server.logs.append(ns, name, "ConnectionResetError: [Errno 104] Connection reset by peer\n")
            code = 1
        elif submitter and not self.stopping.is_set():
            self.server.logs.append(ns, name, f"Job 'raysubmit_sim' {'succeeded' if code == 0 else 'failed'}\n")
        if not self.stopping.is_set():
            self._set_phase(pod, "Succeeded" if code == 0 else "Failed", code)
            self._remove_if_deleted(pod)

    def _remove_if_deleted(self, pod: dict) -> None:
        """The container has stopped: a pod deleted gracefully meanwhile is removed now (the kubelet's
        final DELETE with grace 0), its log with it."""
        md = pod["metadata"]
        with self._lock:
            self._ended.add(md["uid"])
        cur = self.store.get("v1", "Pod", md["name"], md["namespace"])
        if cur is not None and cur["metadata"].get("uid") == md["uid"] and cur["metadata"].get("deletionTimestamp"):
            # the kubelet's status sync comes first: a follower of the log reads its end meanwhile
            # (streams.py polls every 0.1 s; the log goes with the pod), and controllers see the
            # ended pod (the Job controller judges it by its podFailurePolicy)
            time.sleep(self.final_delete_after_s)
            self.store.delete("v1", "Pod", md["name"], md["namespace"], now=True)

    def _restart(self, pod: dict, code: int) -> bool:
        """restartPolicy OnFailure / Always and the container exited non-zero: the kubelet restarts
        it in the same pod after a back-off (CrashLoopBackOff), the phase stays Running,
        restartCount grows, ``lastState.terminated`` holds the exit, and the old log becomes the
        previous instance's (kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/
        #container-restarts). False when the pod is gone or the kubelet stops."""
        md = pod["metadata"]
        ns, name, uid = md["namespace"], md["name"], md["uid"]
        n = self._restarts.get(uid, 0) + 1
        msg = self._termination_message(pod, code)
        d = self._mounted.get(uid) or (Path(self._tmp.name) / ns / name)
        (d / "termination-log").unlink(missing_ok=True)  # the new instance writes its own
        now = now_iso()
        last = {"terminated": {"exitCode": code, "reason": "Error", "finishedAt": now,
                               **({"message": msg} if msg else {})}}
        c0 = (pod["spec"].get("containers") or [{"name": "main"}])[0].get("name", "main")
        mine = []

        def write(o: dict) -> None:
            if o["metadata"].get("uid") == uid and not o["metadata"].get("deletionTimestamp"):
                o["status"]["containerStatuses"] = [{"name": c0, "ready": False, "restartCount": n,
                                                     "lastState": last, "state": {"waiting": {
                                                         "reason": "CrashLoopBackOff"}}}]
                mine.append(True)
        self.store.mutate("v1", "Pod", name, ns, write)
        if not mine:
            return False
        self._restarts[uid] = n
        self.server.logs.restarted(ns, name)
        end = time.time() + min(self.restart_backoff_s * 2 ** (n - 1), self.restart_backoff_s * 30)
        while time.time() < end:
            cur = self.store.get("v1", "Pod", name, ns)
            if self.stopping.is_set() or cur is None or cur["metadata"].get("uid") != uid:
                return False
            time.sleep(0.02)

        def running(o: dict) -> None:
            if o["metadata"].get("uid") == uid:
                o["status"]["containerStatuses"] = [{"name": c0, "ready": True, "restartCount": n,
                                                     "lastState": last, "state": {"running": {"startedAt": now_iso()}}}]
        self.store.mutate("v1", "Pod", name, ns, running)
        return not self.stopping.is_set()

    def _scripted(self, pod: dict, ann: dict) -> int:
        md = pod["metadata"]
        ns, name = md["namespace"], md["name"]
        c0 = (pod["spec"].get("containers") or [{}])[0]
        argv = " ".join([*(c0.get("command") or []), *(c0.get("args") or [])])
        if "sshd" in argv:  # an MPI worker's command starts sshd
            problem = self._sshd_problem(pod, c0, argv)
            if problem:
                self.server.logs.append(ns, name, problem[1])
                return problem[0]
        if ann.get(ANN_FOLLOWS):  # `ray job logs --follow` prints the Ray job's whole log again
            first = self.store.get("v1", "Pod", ann[ANN_FOLLOWS], ns) or {"metadata": {}}
            data, _ = self.server.logs.read(ns, ann[ANN_FOLLOWS])
            self.server.logs.append(ns, name, data)
            status = (first["metadata"].get("annotations") or {}).get(ANN_RAY_JOB_STATUS)
            if status:
                return 0 if status == "SUCCEEDED" else 1
        self.server.logs.append(ns, name, ann.get(ANN_LOGS, f"hello from {name}\n"))
        seconds = float(ann.get(ANN_SECONDS, self.default_seconds))
        deadline = time.time() + seconds
        idle = ann.get(ANN_IDLE) == "true"
        while (idle or time.time() < deadline) and not self.stopping.is_set():
            time.sleep(0.05)
            cur = self.store.get("v1", "Pod", name, ns)
            if cur is not None and (cur["metadata"].get("uid") != md["uid"] or cur["metadata"].get("deletionTimestamp")):
                cur = None  # deleted (or being deleted), or a new pod took its name
            if cur is None or (idle and cur["metadata"].get("annotations", {}).get(ANN_IDLE) != "true"):
                return 0 if cur is not None else 143
        return int(ann.get(ANN_EXIT, "0"))

    def _sshd_problem(self, pod: dict, c0: dict, argv: str) -> tuple[int, str] | None:
        """(exit code, log) when this container's sshd cannot run: the image has no sshd; sshd's
        privilege-separation directory is missing (neither in the image nor made by the command:
        OpenSSH's sshd exits 255 "Missing privilege separation directory: /run/sshd")."""
        import re
        f = image_facts(c0.get("image", ""), self.images)
        if not f["sshd"]:
            return 127, f"sshd: not found: the image {c0.get('image')} has no openssh-server\n"
        if not f["privsep_dir"] and not re.search(r"mkdir\b[^;&|\n]*\s(?:/var)?/run/sshd\b", argv):
            return 255, "Missing privilege separation directory: /run/sshd\n"
        return None

    def _probe_ready(self, pod: dict) -> bool:
        """Ready as the kubelet's TCP readiness probe would find it: a probe on another port than
        the one the container's sshd listens on (its ``-p``, else the image's sshd_config) fails."""
        import re
        c0 = (pod["spec"].get("containers") or [{}])[0]
        probe = ((c0.get("readinessProbe") or {}).get("tcpSocket") or {}).get("port")
        argv = " ".join([*(c0.get("command") or []), *(c0.get("args") or [])])
        if "sshd" not in argv:
            return True
        if self._sshd_problem(pod, c0, argv) is not None:
            return False  # it is about to exit, never Ready (no race with WaitForWorkersReady)
        if probe is None:
            return True
        m = re.search(r"sshd\b[^;&|\n]*?(?:-p\s*|-o\s*Port[= ])(\d+)", argv)
        port = int(m.group(1)) if m else int(image_facts(c0.get("image", ""), self.images)["ssh_port"])
        return int(probe) == port

    def _ray_job_ended(self, pod: dict, code: int) -> None:
        """The driver ended: the Ray job's status (what KubeRay reads from the dashboard) is
        terminal now, while the submitter's `ray job logs --follow` is still printing."""
        md = pod["metadata"]

        def mark(o: dict) -> None:  # the pod may be gone (deleted with its RayJob) meanwhile
            if o["metadata"].get("uid") == md["uid"]:
                o["metadata"].setdefault("annotations", {})[ANN_RAY_JOB_STATUS] = \
                    "SUCCEEDED" if code == 0 else "FAILED"
        self.store.mutate("v1", "Pod", md["name"], md["namespace"], mark)

    def _exec(self, ns: str, name: str, cmd: list[str], env: dict[str, str], uid: str | None = None,
              lag: float = 0.0, on_exit: Any = None) -> int:
        """Run the pod's process, its output the pod log; killed at once when the pod ``uid``
        was deleted while it was being started (on_pod_deleted may have missed it). ``lag``: each
        line reaches the log that many seconds after the process printed it (a follower's delay,
        `ray job logs --follow`); ``on_exit(code)`` is called when the process ends, before the
        last lines are in."""
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        with self._lock:
            self.procs[(ns, name)] = proc
            self._all_procs = [p for p in self._all_procs if p.poll() is None] + [proc]
            self.started_pids.append(proc.pid)
            late = self.stopping.is_set()  # stop() took its list of processes before this one
        cur = self.store.get("v1", "Pod", name, ns) if uid else None
        gone = uid and (cur is None or cur["metadata"].get("uid") != uid or cur["metadata"].get("deletionTimestamp"))
        if late or gone:
            _signal(proc, signal.SIGKILL)
        # the container ends with its main process: the kernel kills what else runs in its PID
        # namespace (here: the process group), which would otherwise hold the log pipe open
        threading.Thread(target=_end_group_after, args=(proc,), daemon=True, name=f"pid1-{name}").start()
        assert proc.stdout is not None
        if not lag:
            for line in iter(proc.stdout.readline, b""):
                self.server.logs.append(ns, name, line)
            code = _container_exit(proc.wait())
            if on_exit is not None:
                on_exit(code)
            return code
        import collections
        pending: collections.deque = collections.deque()
        done = threading.Event()

        def deliver() -> None:
            while not (done.is_set() and not pending) and not self.stopping.is_set():
                while pending and time.time() - pending[0][0] >= lag:
                    self.server.logs.append(ns, name, pending.popleft()[1])
                time.sleep(0.02)
        t = threading.Thread(target=deliver, daemon=True, name=f"follow-{name}")
        t.start()
        for line in iter(proc.stdout.readline, b""):
            pending.append((time.time(), line))
        code = _container_exit(proc.wait())
        if on_exit is not None:
            on_exit(code)
        done.set()
        t.join()
        return code

    def _command(self, pod: dict) -> tuple[list[str] | None, dict[str, str]]:
        """The runner command and env for a payload pod, or (None, {}) for a scripted one."""
        md, ann = pod["metadata"], pod["metadata"].get("annotations") or {}
        src = pod
        if ann.get(ANN_FOLLOWS):  # a retried submitter only follows the job already submitted
            return None, {}
        if ann.get(ANN_ROLE) == RAY_SUBMITTER:
            # `ray job submit` runs the entrypoint on the head (the Ray job supervisor), so it sees
            # the head pod's volumes and env; its output reaches this pod's log through `ray job
            # logs --follow`
            src = self.store.get("v1", "Pod", ann.get(ANN_RAY_HEAD, ""), md["namespace"])
            if src is None:
                return None, {}
        job = src["metadata"].get("labels", {}).get("gpujobs.dev/job")
        if ann.get(ANN_IDLE) == "true" or not job:
            return None, {}
        ns = md["namespace"]
        d = self._pod_dir(md)
        mounts = materialize(src, lambda kind, n: self.store.get("v1", kind, n, ns), d,
                             Path(self._tmp.name) / "_claims")
        self._mounted[md["uid"]] = d
        c0 = (src["spec"].get("containers") or [{}])[0]
        pod_env = {e["name"]: str(e["value"]) for e in c0.get("env") or [] if "value" in e}
        told = RankEnv.from_env(pod_env)  # what gpujobs' renderer told the pod
        payload = local_path(told.payload or "", mounts)
        key_file = local_path(told.key_file or "", mounts)
        if not payload or not Path(payload).is_file() or not Path(key_file).is_file():
            return None, {}
        env = {k: v for k, v in os.environ.items() if not k.startswith((ENV_PREFIX, "OMPI_", "PMI"))}
        for e in c0.get("env") or []:
            if "value" in e:
                env[e["name"]] = str(e["value"])
            elif (e.get("valueFrom") or {}).get("secretKeyRef"):
                ref = e["valueFrom"]["secretKeyRef"]
                s = self.store.get("v1", "Secret", ref["name"], ns) or {}
                if ref["key"] in (s.get("data") or {}):
                    env[e["name"]] = base64.b64decode(s["data"][ref["key"]]).decode()
        world = int(ann.get(ANN_WORLD, "1"))
        # the pod's container paths, moved to the folders its volumes were unpacked into
        env.update(RankEnv(payload=payload, result_sink="log", key_file=key_file, device="cpu",
                           termination_log=str(d / "termination-log"),
                           checkpoint_dir=self._checkpoint_dir(mounts, d)).to_env())
        # a container's /tmp is its own: what it leaves there goes with the pod. A short path
        # (Ray puts its AF_UNIX sockets under TMPDIR, and such a path may have 107 bytes at most)
        tmp = self._pod_tmps.setdefault(md["uid"], Path(tempfile.mkdtemp(prefix="t", dir=self._tmp.name)))
        # the grace period this kubelet gives (capped at grace_s): the rank exits 143 before the SIGKILL
        env[contract.GRACE_S] = str(self._grace_s(pod))
        env.update({"PYTHONUNBUFFERED": "1", "HOME": str(d), "TMPDIR": str(tmp),
                    "RANK": ann.get(ANN_RANK, "0"), "WORLD_SIZE": str(world), "LOCAL_RANK": "0",
                    "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": ann.get(ANN_PORT, "29500")})
        if src is not pod:  # the Ray driver runs on the head, not in the submitter's container
            env.pop(contract.TERMINATION_LOG, None)
        runner = [sys.executable, "-m", "gpujobs.rank.runner"]
        boot = _bootstrap_command(c0, mounts, env, ann) if self.run_bootstrap else None
        if boot is not None and ann.get(ANN_ROLE) == "rank":
            return boot, env
        if ann.get(ANN_ROLE) == "mpi-launcher":
            env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
            if boot is not None and (md.get("labels") or {}).get(MPI_OPERATOR_LABEL) == "mpi-operator":
                # an MPIJob launcher runs its real command (bootstrap.py mpi-launcher) against the
                # simulated mpirun, which decides hosts and ssh like Open MPI (mpirun_shim.py)
                return boot, self._mpi_launcher_env(pod, env, mounts, d)
            env["OMPI_MCA_rmaps_base_oversubscribe"] = "1"
            exports = [x for k in (contract.KEY_FILE, contract.KEY_CONTEXT, contract.PAYLOAD,
                                   contract.FRAMEWORK, contract.CHECKPOINT_DIR,
                                   "PYTHONPATH", contract.RESULT_SINK) if k in env for x in ("-x", k)]
            # the real launcher waits for the workers' sshd and runs mpirun of `bootstrap.py mpi-rank`
            # over ssh; here mpirun starts the same mpi-rank command locally (no sshd)
            ranks = boot[:-1] + ["mpi-rank"] if boot is not None else runner
            return ["mpirun", "-np", str(world), "--oversubscribe", *exports, *ranks], _no_rank_env(env)
        return runner, env


    def _pod_dir(self, md: dict) -> Path:
        """The pod's own folder (its container's filesystem, emptyDirs, projected volumes): one
        per pod uid, deleted once the pod is gone (a new pod of the same name starts empty)."""
        d = Path(self._tmp.name) / md["namespace"] / md["name"] / md["uid"]
        self._pod_dirs[md["uid"]] = d
        return d

    @staticmethod
    def _checkpoint_dir(mounts: dict[str, Path], d: Path) -> str:
        """The checkpoint folder the pod's bootstrap.json names, where it lives here: on a claim's
        volume when under its mount, else in the container's filesystem (gone with the pod)."""
        import json
        cfg: dict = {}
        for local in mounts.values():
            if (local / contract.POD_CONFIG).is_file():
                cfg = json.loads((local / contract.POD_CONFIG).read_text())
                break
        return container_path(cfg.get("checkpoint_dir") or contract.DEFAULT_CHECKPOINT_DIR, mounts, d)

    def _mpi_launcher_env(self, pod: dict, env: dict[str, str], mounts: dict[str, Path], d: Path) -> dict[str, str]:
        """The launcher's env for the simulated mpirun: the image's PATH (only the tools the image
        has, as stand-ins), container paths under its mounts moved to the local folders, and what
        the shim must know about the cluster (the workers whose sshd is up, and on which port)."""
        import json
        import re
        import shutil
        md = pod["metadata"]
        c0 = (pod["spec"].get("containers") or [{}])[0]
        f = image_facts(c0.get("image", ""), self.images)
        real = shutil.which("mpirun") or "mpirun"
        bin_dir = d / "sim-bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        if f["openmpi"]:
            shim = Path(__file__).with_name("mpirun_shim.py")
            (bin_dir / "mpirun").write_text(f"#!/bin/sh\nexec {sys.executable} {shim} \"$@\"\n")
            (bin_dir / "mpirun").chmod(0o755)
        if f["ssh"]:
            (bin_dir / "ssh").write_text("#!/bin/sh\necho 'sim: ssh runs only inside mpirun here' >&2\nexit 255\n")
            (bin_dir / "ssh").chmod(0o755)
        out = {k: local_path(v, mounts) for k, v in env.items()}
        sshd: dict[str, int] = {}
        job = (md.get("labels") or {}).get("training.kubeflow.org/job-name", "")
        for w in self.store.list("v1", "Pod", md["namespace"], f"training.kubeflow.org/job-name={job}"):
            if (w["metadata"].get("labels") or {}).get("training.kubeflow.org/job-role") != "worker" or \
                    w["status"].get("phase") != "Running":
                continue
            wc = (w["spec"].get("containers") or [{}])[0]
            wf = image_facts(wc.get("image", ""), self.images)
            if not wf["sshd"]:
                continue
            argv = " ".join([*(wc.get("command") or []), *(wc.get("args") or [])])
            m = re.search(r"sshd\b[^;&|\n]*?(?:-p\s*|-o\s*Port[= ])(\d+)", argv)
            host = f"{w['spec'].get('hostname', w['metadata']['name'])}.{w['spec'].get('subdomain', '')}." \
                   f"{md['namespace']}.svc"
            sshd[host] = int(m.group(1)) if m else int(wf["ssh_port"])
        out.update(PATH=str(bin_dir), GPUJOBS_SIM_OPENMPI=str(f["openmpi"]), GPUJOBS_SIM_REAL_MPIRUN=real,
                   GPUJOBS_SIM_LAUNCHER_HOST=str(pod["spec"].get("hostname") or md["name"]),
                   GPUJOBS_SIM_CORES="8", GPUJOBS_SIM_SSH_PORT=str(f["ssh_port"]),
                   GPUJOBS_SIM_NO_HOST_KEY_CHECK="1" if f["no_host_key_check"] else "0",
                   GPUJOBS_SIM_SSHD=json.dumps(sshd))
        out[contract.MPI_DNS_WAIT_S] = "0"  # no cluster DNS here: the shim knows the workers
        return _no_rank_env(out)


def _bootstrap_command(c0: dict, mounts: dict[str, Path], env: dict[str, str],
                       ann: dict) -> list[str] | None:
    """The real container command of a torch rank pod, run on its volumes unpacked locally:
    ``python3 -c <check the runtime files, run bootstrap.py> rank`` (container paths in the
    script moved to the local folders), else None."""
    import json
    argv = [*(c0.get("command") or []), *(c0.get("args") or [])]
    if ann.get(ANN_ROLE) not in ("rank", "mpi-launcher") or argv[:2] != ["python3", "-c"] or len(argv) < 3:
        return None
    script = argv[2]
    runtime = next((local for mount, local in mounts.items() if repr(mount + "/") in script), None)
    if runtime is None or not (runtime.parent / "job" / contract.POD_CONFIG).is_file():
        return None
    cfg = json.loads((runtime.parent / "job" / contract.POD_CONFIG).read_text())
    if cfg.get("framework") == "ray":
        return None
    for mount, local in mounts.items():
        script = script.replace(repr(mount + "/"), repr(str(local) + "/"))
    for n in cfg.get("node_rank_env") or []:
        env[n] = ann.get(ANN_RANK, "0")
    for n in cfg.get("master_addr_env") or []:
        env[n] = "127.0.0.1"
    for n in cfg.get("master_port_env") or []:
        env[n] = ann.get(ANN_PORT, "29500")
    return [sys.executable, "-c", script, *argv[3:]]


def _container_exit(returncode: int) -> int:
    """A container's exit code as the runtime reports it: 128 + N for a process killed by signal N
    (143 for SIGTERM, 137 for SIGKILL), where Popen gives -N."""
    return 128 - returncode if returncode < 0 else returncode


def _no_rank_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}


def _created(pod: dict) -> float:
    return parse_time(pod["metadata"].get("creationTimestamp")) or 0.0


def _signal(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _end_group_after(proc: subprocess.Popen) -> None:
    proc.wait()
    _signal(proc, signal.SIGKILL)


def _kill_later(proc: subprocess.Popen, grace: float) -> None:
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        _signal(proc, signal.SIGKILL)
