"""Cancel a Kubernetes job: delete it (foreground), its status, logs and envelopes kept first."""
from __future__ import annotations

from kubernetes.client.exceptions import ApiException

from ....errors import KubernetesError
from .. import naming
from ..cluster import Cluster
from ..kinds import KINDS
from ..status import archive, live
from ..status.hub import StatusHub


def cancel(backend: Cluster, job_id: str) -> None:
    """Delete the job with propagationPolicy=Foreground (pods, Workload, ConfigMap go first)."""
    ns, name = naming.parse_job_id(job_id)
    kind = live.kind_of(backend, ns, name)
    if kind is None:
        if archive.has(backend.home, job_id):
            return  # ended and deleted already: a no-op, as for a finished local job
        raise live.not_found(job_id)
    info = KINDS[kind]
    hub = live.hub_for(backend, ns)
    hub.track_kind(kind)
    _archive_before_delete(backend, job_id, hub, name)
    try:
        backend.api_client.call_api(f"/apis/{info.group}/{info.version}/namespaces/{ns}/{info.plural}/{name}",
                                    "DELETE", query_params=[("propagationPolicy", "Foreground")],
                                    body={"kind": "DeleteOptions", "apiVersion": "v1",
                                          "propagationPolicy": "Foreground"},
                                    response_type="object", auth_settings=["BearerToken"],
                                    _return_http_data_only=True)
    except ApiException as exc:
        if exc.status != 404:
            raise KubernetesError(f"cannot cancel {job_id}: {exc.reason}", exc.status) from None


def _archive_before_delete(backend: Cluster, job_id: str, hub: StatusHub, name: str) -> None:
    """What a cancel is about to delete, kept: the final status (cancelled, unless it had ended
    already), its logs and envelopes so far."""
    import time
    hub.wait_synced()
    st = hub.status(name) or hub.compute(name)
    if st is None:
        return
    if not st.terminal:
        st = st.with_(phase="cancelled", message="cancelled (the job was deleted)", reason="Cancelled",
                      finished_at=time.time(), queue_position=None)
    else:
        st = live.with_exception(backend, job_id, st)
    live.keep_ended(backend, job_id, st, force=True)
