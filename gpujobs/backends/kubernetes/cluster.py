"""The backend as the stages see it: :class:`Cluster` (what they use of a KubernetesBackend) and
:class:`ClusterState` (what a backend has learnt of its cluster, kept for its life).

The render/, submit/ and status/ modules take a ``Cluster``, never the backend class (that
would be an import circle: the backend calls them); a :class:`~.backend.KubernetesBackend`
satisfies it. Nothing here imports the kubernetes client, so the backend is built without it.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ...status import JobStatus

if TYPE_CHECKING:
    from .render.job import RenderOptions
    from .status.hub import StatusHub
    from .status.pod_metrics import PodMetrics


@dataclass
class ClusterState:
    """One backend's caches of its cluster (one per :class:`~.backend.KubernetesBackend`)."""

    hubs: dict[str, StatusHub] = field(default_factory=dict)
    """namespace -> its status hub (shared informers), started on first use"""
    pod_metrics: PodMetrics | None = None
    """metrics and progress read from the pods' logs, made on first use"""
    outcomes: dict[str, dict[int, bytes]] = field(default_factory=dict)
    """job id -> result envelopes by rank, kept once the job has ended"""
    exception_summaries: dict[str, str] = field(default_factory=dict)
    """job id -> ``ValueError: ... (rank 0)`` of a failed job ('' when none could be read)"""
    archived: set[str] = field(default_factory=set)
    """job ids this process has archived (see status/archive.py)"""
    preflight: dict[Any, tuple[float, Any]] = field(default_factory=dict)
    """preflight answers: key -> (time.monotonic() when read, answer), fresh for ``preflight_ttl``"""
    forecasts: dict[str, Any] = field(default_factory=dict)
    """namespace -> its KubeForecasts (status/forecasting.py), made on first use"""
    log_keeper: Any = None
    """the LogKeeper following pods about to be deleted (status/log_keeper.py), made with the first hub"""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    """guards making a hub or the PodMetrics (each made once)"""

    def stop_watches(self) -> None:
        """Stop every namespace's informers (their threads are daemons; tests stop them)."""
        with self.lock:
            hubs = list(self.hubs.values())
        for hub in hubs:
            hub.stop()
        if self.log_keeper is not None:
            self.log_keeper.stop()


class Cluster(Protocol):
    """What the stage modules use of the backend."""

    home: Path
    options: RenderOptions
    preflight_ttl: float
    state: ClusterState

    @property
    def api_client(self) -> Any:
        """The kubernetes ApiClient (an untyped library object)."""

    @property
    def namespace(self) -> str: ...

    @property
    def http_timeout(self) -> tuple[float, float]: ...

    def job_key(self, job_id: str) -> bytes: ...

    def detected_kueue_version(self) -> str | None: ...

    def admission_version(self) -> tuple[str, str]: ...

    def keep_signing_key(self, namespace: str, key: bytes) -> None: ...

    def status(self, job_id: str) -> JobStatus: ...
