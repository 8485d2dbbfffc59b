"""KubernetesBackend: configuration, client construction, render and submit.

Status, wait, logs, cancel, outcomes, jobs and subscribe are provided by the status/
sub-package (status/live.py over the status hub, logs, results).

Configuration is found as kubectl finds it: an explicit ``api_client`` / ``host``
(tests), else ``kubeconfig`` / ``$KUBECONFIG`` / ``~/.kube/config`` with ``context``,
else the in-cluster service account. Nothing is loaded until the first API call,
so ``render`` works with no cluster at all. Namespace: spec.namespace, then the
``namespace`` argument, then ``[kubernetes] namespace`` in the config file, then
the kubeconfig context's namespace, then the in-cluster namespace, then "default".
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from ...config import KubernetesSettings, gpujobs_home, settings
from ...errors import BackendUnavailable
from ...spec import JobSpec
from ...status import JobStatus
from ..base import (Backend, ChecksQueues, HasMetricsHistory, HasProgressHistory, HasStacks,
                    Plans, Renders)
from . import keys, naming
from .cluster import ClusterState
from .render.job import Rendered, RenderOptions, check_spec, render_job

_SA_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def _kubeconfig_namespace(kubeconfig: str | None, context: str | None) -> str | None:
    try:
        from kubernetes import config as kconfig
        contexts, active = kconfig.list_kube_config_contexts(config_file=kubeconfig)
    except Exception:
        return None
    ctx = next((c for c in contexts if c.get("name") == context), None) if context else active
    return ((ctx or {}).get("context") or {}).get("namespace")


class KubernetesBackend(Backend, Renders, Plans, ChecksQueues, HasStacks, HasMetricsHistory,
                        HasProgressHistory):
    """The ``kubernetes`` backend (see module doc for how configuration is found; its
    capabilities are declared as bases: gpujobs.backends.base)."""

    name = "kubernetes"

    def __init__(self, api_client: Any = None, *, host: str | None = None,
                 namespace: str | None = None, context: str | None = None,
                 kubeconfig: str | None = None, home: Path | None = None,
                 default_queue: str | None = None, request_timeout: float = 30.0,
                 preflight_ttl: float = 30.0, trainjob_runtime: str | None = None,
                 trainjob_volcano_runtime: str | None = None):
        cfg = settings().kubernetes if api_client is None else KubernetesSettings()
        self._api_client = api_client
        self._host = host
        self._context = context or cfg.context
        self._kubeconfig = kubeconfig or cfg.kubeconfig
        self._namespace = namespace or cfg.namespace
        self._kueue_version = cfg.kueue_version  # checked where used: kueue_version()
        self._detected_kueue: tuple[float, str | None] | None = None  # (when read, version)
        self.home = Path(home) if home else gpujobs_home()
        self.request_timeout = request_timeout
        self.preflight_ttl = preflight_ttl
        self._lock = threading.Lock()
        self.state = ClusterState()  # what this backend learns of its cluster (hubs, caches)
        self._keys: dict[str, bytes] = {}
        self._unsaved_keys: set[str] = set()
        self.options = RenderOptions(namespace="default",
                                     default_queue=default_queue or cfg.queue)
        if trainjob_runtime := trainjob_runtime or cfg.trainjob_runtime:
            self.options.trainjob_runtime = trainjob_runtime
        if cfg.checkpoint_volume:
            from ...spec import Volume
            self.options.checkpoint_volume = Volume.parse(cfg.checkpoint_volume,
                                                          "[kubernetes] checkpoint_volume")
        self.checkpoint_storage_class: str | None = cfg.checkpoint_storage_class or None
        """[kubernetes] checkpoint_storage_class: the class of default checkpoint claims (None: the
        namespace's default StorageClass; "none": make none)."""
        self.checkpoint_size: str = cfg.checkpoint_size or "10Gi"
        if cfg.volcano_queue:
            self.options.default_volcano_queue = cfg.volcano_queue
        if trainjob_volcano_runtime := trainjob_volcano_runtime or cfg.trainjob_volcano_runtime:
            self.options.trainjob_volcano_runtime = trainjob_volcano_runtime

    # ------------------------------------------------------------ configuration
    @property
    def namespace(self) -> str:
        if self._namespace:
            return self._namespace
        ns = None
        if self._api_client is None and self._host is None:
            ns = _kubeconfig_namespace(self._kubeconfig, self._context)
            if ns is None and os.path.exists(_SA_NAMESPACE):
                ns = Path(_SA_NAMESPACE).read_text().strip() or None
        self._namespace = ns or "default"
        return self._namespace

    @property
    def http_timeout(self) -> tuple[float, float]:
        """(connect, read) seconds: the client ignores a bare float ``_request_timeout``."""
        return (self.request_timeout, self.request_timeout)

    @property
    def api_client(self) -> Any:
        """The kubernetes ApiClient (built on first use)."""
        with self._lock:
            if self._api_client is None:
                self._api_client = self._build_client()
            return self._api_client

    def _build_client(self):
        try:
            from kubernetes import client, config as kconfig
        except ImportError:  # pragma: no cover - the k8s extra is missing
            raise BackendUnavailable("the kubernetes client is not installed; "
                                     "pip install 'gpujobs[k8s]'") from None
        cfg = client.Configuration()
        if self._host:
            cfg.host = self._host
            return client.ApiClient(cfg)
        path = self._kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        try:
            if any(os.path.exists(p) for p in path.split(os.pathsep)):
                kconfig.load_kube_config(config_file=path if os.pathsep not in path else None,
                                         context=self._context, client_configuration=cfg)
                if os.pathsep not in path:
                    reload_when_changed(cfg, path, self._context)
            elif os.environ.get("KUBERNETES_SERVICE_HOST"):
                kconfig.load_incluster_config(client_configuration=cfg)
            else:
                from ...config import config_path
                raise BackendUnavailable(
                    f"no Kubernetes configuration: no kubeconfig at {path} and not running in a "
                    "cluster; fix: export KUBECONFIG=/path/to/kubeconfig, or set kubeconfig = "
                    f"\"/path/to/kubeconfig\" under [kubernetes] in {config_path()} "
                    "(Python: KubernetesBackend(kubeconfig=... or host=...))")
        except BackendUnavailable:
            raise
        except Exception as exc:
            raise BackendUnavailable(f"cannot load Kubernetes configuration from {path}: {exc}") \
                from None
        return client.ApiClient(cfg)

    def signing_key(self, namespace: str) -> bytes:
        """This submitter's HMAC key for ``namespace`` of this cluster. A new one is kept only
        once a submit passes preflight (``keep_signing_key``), so bad input writes nothing."""
        cluster = self.api_client.configuration.host
        with self._lock:
            if namespace not in self._keys:
                key = keys.load_namespace_key(cluster, namespace, self.home)
                if key is None:
                    from ...payload import new_key
                    key = new_key()
                    self._unsaved_keys.add(namespace)
                self._keys[namespace] = key
            return self._keys[namespace]

    def namespace_key_file(self, namespace: str) -> Path:
        """Where this submitter's key for ``namespace`` of this cluster is kept (hex, mode 0600)."""
        return keys.namespace_key_path(self.api_client.configuration.host, namespace, self.home)

    def keep_signing_key(self, namespace: str, key: bytes) -> None:
        """Save ``key`` as the namespace key if it is the new one ``signing_key`` made (render
        output's throwaway keys never are)."""
        with self._lock:
            if namespace in self._unsaved_keys and self._keys.get(namespace) == key:
                keys.save_namespace_key(self._api_client.configuration.host, namespace,
                                          self._keys[namespace], self.home)
                self._unsaved_keys.discard(namespace)

    # ------------------------------------------------------------------ render
    def render_job(self, spec: JobSpec, kind: str | None = None,
                   submission_id: str | None = None, *, for_submit: bool = False) -> Rendered:
        """Render ``spec``. ``for_submit``: sign with this submitter's key for the namespace
        (what submit creates); otherwise with a fresh key of its own, so render output (shown,
        saved, or piped to ``kubectl apply``) never carries the long-lived key."""
        self.options.namespace = self.namespace
        if spec.namespace is None:  # [hardening] config / kubeconfig namespaces are input too
            from ...spec import _NAME_RE
            if not _NAME_RE.match(self.namespace) or len(self.namespace) > 63:
                from ...errors import SpecError
                raise SpecError("namespace", f"{self.namespace!r} (from the backend's configuration: "
                                "[kubernetes] namespace in the config file, or the kubeconfig "
                                "context) is not a valid namespace name",
                                "set a Kubernetes name (lowercase letters, digits, '-') there, "
                                "or give one with -n: `gpujobs submit TARGET -n NAMESPACE` "
                                "(Python: .kubernetes(namespace=...))")
        key = None
        if for_submit:
            # bad input (an MPI job without an MPI image, …) is a SpecError before the key is
            # looked up: that needs the cluster, and a missing kubeconfig must not hide the fix
            check_spec(spec, kind, self.options)
            key = self.signing_key(spec.namespace or self.namespace)
        return render_job(spec, kind, opts=self.options, submission_id=submission_id, key=key)

    def render(self, spec: JobSpec, kind: str | None = None) -> list[dict]:
        """The objects a submit into a fresh namespace creates (see render.Rendered.objects),
        signed with a key of their own (see ``render_job``)."""
        return self.render_job(spec, kind).objects

    # ------------------------------------------------------------------ submit
    def submit(self, spec: JobSpec) -> str:
        """Preflight, then create the job (and a big call's Secret); returns ``"<ns>/<name>"``."""
        from .submit.create import submit_rendered

        sid = naming.new_submission_id()
        claim, why = self._checkpoint_claim(spec, sid)
        if claim is not None:
            import dataclasses

            from ...spec import Volume
            from .submit.checkpoint_claim import MOUNT_PATH
            spec = dataclasses.replace(spec, kubernetes=dataclasses.replace(
                spec.kubernetes, volume=Volume(claim["metadata"]["name"], MOUNT_PATH)))
        rendered = self.render_job(spec, for_submit=True, submission_id=sid)
        rendered.checkpoint_claim = claim
        job_id = submit_rendered(self, rendered)
        warn_checkpoints_lost(spec, self.options.checkpoint_volume is not None, job_id, why)
        return job_id

    def _checkpoint_claim(self, spec: JobSpec, sid: str) -> tuple[dict | None, str]:
        """(the default checkpoint claim for ``spec``, or None and why not) (submit/checkpoint_claim.py):
        only for a function that checkpoints or asks should_stop() and names no volume, where the
        cluster provisions one."""
        from ...rank.checkpoint import watches_preemption
        from .render.job import gang_pods
        from .submit import checkpoint_claim as cc
        if spec.volume is not None or self.options.checkpoint_volume is not None or spec.fn is None \
                or not watches_preemption(spec.fn):
            return None, ""
        if (self.checkpoint_storage_class or "").lower() == cc.NONE:
            return None, "checkpoint_storage_class = \"none\" under [kubernetes]"
        checked, kind = check_spec(spec, None, self.options)  # bad input first: nothing asked
        name = naming.job_name(checked, sid)
        labels = {naming.LABEL_JOB: name, naming.LABEL_SUBMISSION: sid,
                  naming.MANAGED_BY[0]: naming.MANAGED_BY[1]}
        body = cc.claim_body(checked.namespace or self.namespace, name, labels,
                             pods=gang_pods(kind, checked), storage_class=self.checkpoint_storage_class,
                             size=self.checkpoint_size)
        ok, why = cc.provisionable(self.api_client, body, self.http_timeout)
        return (body, "") if ok else (None, why)

    def plan(self, spec: JobSpec):
        """What submitting ``spec`` now would do (:class:`gpujobs.status.Plan`), from the cluster's
        Kueue objects: the same forecast simulation with the job added; nothing is created."""
        from ...errors import SpecError
        from .status import live
        rendered = self.render_job(spec)  # bad input: the same errors as submit, nothing created
        labels = rendered.job["metadata"].get("labels") or {}
        queue = labels.get(naming.QUEUE_LABEL)
        if not queue:
            raise SpecError("queue", f"a {rendered.kind} is not queued by Kueue, so there is nothing to "
                            "plan", "plan a Kueue kind (the default), e.g. gpujobs plan TARGET --queue Q")
        plan = live.forecasts_for(self, rendered.namespace).plan(
            rendered, queue, labels.get(naming.PRIORITY_LABEL), spec.max_runtime_s,
            float(spec.grace_period_s), spec.display_name)
        version, source = self.admission_version()
        from ...admission import gates
        return gates.with_basis(plan, version, source)

    def detected_kueue_version(self) -> str | None:
        """The Kueue version the cluster runs (its manager image's tag, submit/kueue_version.py;
        None without ``get deployments`` in kueue-system), read again once ``preflight_ttl`` has
        passed so that an upgrade is seen: the one reading that forecasts and preflight share."""
        from .submit import kueue_version as kv
        hit = self._detected_kueue
        if hit is None or time.monotonic() - hit[0] >= self.preflight_ttl:
            try:
                version = kv.kueue_version(self.api_client, self.http_timeout)
            except Exception:  # noqa: BLE001 - an unreadable version is an unknown one
                version = None
            self._detected_kueue = hit = (time.monotonic(), version)
        return hit[1]

    def admission_version(self) -> tuple[str, str]:
        """:meth:`kueue_version` with what the cluster runs (:meth:`detected_kueue_version`). A
        detected version gpujobs does not model falls back to the config or the newest, saying so."""
        from ...errors import SpecError
        detected = self.detected_kueue_version()
        try:
            return self.kueue_version(detected)
        except SpecError:
            version, source = self.kueue_version()
            return version, f"{source}; the cluster runs Kueue {detected}, which is not modelled"

    def kueue_version(self, detected: str | None = None) -> tuple[str, str]:
        """(the supported Kueue version row admission is modelled on, where it came from):
        ``detected`` (what the cluster runs, e.g. its manager image tag), else ``[kubernetes]
        kueue_version`` of the config, else the newest supported."""
        from ...admission.gates import kueue_version_of
        if detected:
            return kueue_version_of(detected, "the cluster's Kueue version"), \
                f"the cluster runs Kueue {detected}"
        if self._kueue_version:
            return kueue_version_of(self._kueue_version, "[kubernetes] kueue_version"), \
                "[kubernetes] kueue_version"
        return kueue_version_of(None, ""), "the newest supported (the cluster's Kueue version is not known)"

    def job_key(self, job_id: str) -> bytes:
        ns, name = naming.parse_job_id(job_id)
        return keys.load_key(ns, name, self.home)

    # ---------------------------------------- provided by the k8s-status modules
    def status(self, job_id: str) -> JobStatus:
        from .status import live
        return live.status(self, job_id)

    def wait(self, job_id: str, timeout: float | None = None) -> JobStatus:
        from .status import live
        return live.wait(self, job_id, timeout)

    def outcomes(self, job_id: str) -> dict[int, bytes]:
        from .status import live
        return live.outcomes(self, job_id)

    def logs(self, job_id: str, rank: int | None = None, follow: bool = False) -> Iterator[str]:
        from .status import live
        return live.logs(self, job_id, rank=rank, follow=follow)

    def metrics_history(self, job_id: str) -> list:
        """Kept metric samples of the job (from its pods' GPUJOBS-METRICS log lines)."""
        from .status import live
        return live.metrics_history(self, job_id)

    def progress_history(self, job_id: str) -> list[dict]:
        """The ranks' ``ctx.progress`` reports (GPUJOBS-PROGRESS lines of the pod logs)."""
        from .status import live
        return live.progress_history(self, job_id)

    def stacks(self, job_id: str, rank: int | None = None, timeout: float = 10.0) -> dict[int, str]:
        """{rank: Python stacks of all threads} of a running job, without exec (see .control.stack_dump)."""
        from .control.stack_dump import stacks
        return stacks(self, job_id, rank=rank, timeout=timeout)

    def cancel(self, job_id: str) -> None:
        from .control.cancel import cancel
        cancel(self, job_id)

    def check_queue(self, queue: str, namespace: str | None = None) -> None:
        """SpecError naming the LocalQueues of the namespace when ``queue`` is not one of them."""
        from .status import live
        live.check_queue(self, queue, namespace)

    def jobs(self, queue: str | None = None) -> list[JobStatus]:
        from .status import live
        return live.jobs(self, queue)

    def subscribe(self, job_id: str, callback: Callable[[JobStatus], Any]) -> Callable[[], None]:
        from .status import live
        return live.subscribe(self, job_id, callback)


def reload_when_changed(cfg: Any, path: str, context: str | None) -> None:
    """A new token written to the kubeconfig (a new login) reaches this running client, as each
    kubectl call reads the file anew. The client asks ``cfg.refresh_api_key_hook`` before each
    request that carries a token; this hook loads a kubeconfig that changed (modification time,
    size or inode) into a configuration of its own and takes its token, and runs the client's own
    refresh (an exec plugin's expiring token) on that configuration too, never on ``cfg``, so no
    other thread sees the hook replaced. A broken or half-written file is read again at the next
    request. Only tokens: a client certificate is bound to the connection pool when the client
    is built (a new one needs a new backend: a new kernel, or ``KubernetesBackend(...)``)."""
    import threading

    from kubernetes import client, config as kconfig

    def signature() -> tuple[int, int, int] | None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size, st.st_ino
    lock = threading.Lock()
    mine = client.Configuration()  # what the loaders write into
    state: dict[str, Any] = {"seen": signature(), "refresh": cfg.refresh_api_key_hook}

    def hook(c: Any) -> None:
        with lock:
            now = signature()
            if now is not None and now != state["seen"]:
                fresh = client.Configuration()
                try:
                    kconfig.load_kube_config(config_file=path, context=context, client_configuration=fresh)
                except Exception:  # noqa: BLE001 - broken or half-written: the old token stays for now
                    return
                state["seen"], state["refresh"] = now, fresh.refresh_api_key_hook
                mine.api_key, mine.api_key_prefix = fresh.api_key, fresh.api_key_prefix
            elif state["refresh"] is None:
                return  # nothing new, nothing to refresh: c keeps its token
            if state["refresh"] is not None:
                state["refresh"](mine)  # sets mine's token (and mine's hook, not c's)
            c.api_key, c.api_key_prefix = dict(mine.api_key), dict(mine.api_key_prefix)
    cfg.refresh_api_key_hook = hook


def warn_checkpoints_lost(spec: JobSpec, configured: bool, job_id: str, why: str = "") -> None:
    """CheckpointWarning when ``spec``'s function saves checkpoints but no volume holds them: its
    pods' own disk goes with them when Kueue preempts the job, so the next run starts over.
    ``why``: why no default checkpoint claim was made."""
    import warnings

    from ...rank.checkpoint import uses_checkpoints
    from ...errors import CheckpointWarning
    if spec.volume is not None or configured or spec.fn is None or not uses_checkpoints(spec.fn):
        return
    warnings.warn(CheckpointWarning(
        f"{job_id} saves checkpoints in its pods' own disk (ctx.checkpoint_dir = "
        "/tmp/gpujobs-checkpoints), which is deleted with them: a preempted run starts over"
        f"{f' (no checkpoint claim was made: {why})' if why else ''}; fix: "
        "mount a PersistentVolumeClaim: --volume CLAIM (Python: .volume('CLAIM'), %%gpujob "
        "--volume CLAIM), or set checkpoint_volume = \"CLAIM\" (or checkpoint_storage_class = \"CLASS\": "
        "a claim per job of that StorageClass) under [kubernetes] in the config file"),
        stacklevel=3)
