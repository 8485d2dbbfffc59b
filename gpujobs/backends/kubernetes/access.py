"""What the API server's refusals mean to the user, each with its fix: no server at the address
(BackendUnavailable), credentials refused (401), a verb the user's Role lacks (403)."""
from __future__ import annotations

from ...errors import BackendError, BackendUnavailable, KubernetesError

RBAC_FIX = ("ask a cluster admin to run `gpujobs admin rbac -n {ns} --user NAME | kubectl apply -f -`, "
            "NAME being your Kubernetes user (`kubectl auth whoami`): the gpujobs Role and a RoleBinding "
            "of it to you")


def connect_failed(exc: BaseException) -> bool:
    """No connection could be made (refused, no route, unknown host, connect timeout): there is
    no API server at the address, as opposed to a connection that dropped or a slow answer."""
    import urllib3

    reason = getattr(exc, "reason", None) if isinstance(exc, urllib3.exceptions.MaxRetryError) else exc
    return isinstance(reason, (urllib3.exceptions.NewConnectionError, urllib3.exceptions.ConnectTimeoutError,
                               ConnectionRefusedError))


def unreachable(exc: BaseException, host: str | None = None) -> BackendUnavailable:
    """The error for an API server that cannot be reached, with the connection's own reason."""
    pool = getattr(exc, "pool", None)
    if host is None and pool is not None:
        host = f"{pool.scheme}://{pool.host}:{pool.port}"
    reason = " ".join(str(getattr(exc, "reason", None) or exc).split())
    return BackendUnavailable(
        f"the Kubernetes API server{f' at {host}' if host else ''} cannot be reached ({reason[:200]}); "
        "fix: start the cluster or point KUBECONFIG at a running one, then check it with: "
        "kubectl cluster-info")


def unauthorized(exc: BaseException, host: str | None = None) -> KubernetesError:
    """The error for credentials the API server does not accept (HTTP 401)."""
    return KubernetesError(
        f"the Kubernetes API server{f' at {host}' if host else ''} does not accept your credentials "
        "(HTTP 401 Unauthorized: an expired token or certificate, or another cluster's); fix: log in "
        "again (your cluster's login command, or a fresh token in your kubeconfig), then check it "
        "with: kubectl auth whoami", 401, "Unauthorized")


def forbidden(plural: str, namespace: str, verb: str = "list") -> KubernetesError:
    """The error for a read of the user's own namespace that gpujobs' Role grants but theirs lacks."""
    return KubernetesError(f"you may not {verb} {plural} in namespace {namespace!r} (HTTP 403 Forbidden); "
                           f"fix: {RBAC_FIX.format(ns=namespace)}", 403, "Forbidden")


def failure(exc: BaseException, host: str, plural: str, namespace: str | None) -> BackendError:
    """What a failing read of ``plural`` means to the user: one of the refusals above, with its
    fix, else the call's own error."""
    status = getattr(exc, "status", None)
    if connect_failed(exc):
        return unreachable(exc, host)
    if status == 401:
        return unauthorized(exc, host)
    if status == 403 and namespace:
        return forbidden(plural, namespace, "watch")
    reason = " ".join(str(getattr(exc, "reason", None) or exc).split())[:200]
    return KubernetesError(f"reading {plural} from the Kubernetes API server at {host} fails: {reason}",
                           status, getattr(exc, "reason", None) if status else None)
