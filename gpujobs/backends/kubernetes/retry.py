"""Retrying API calls through 429 (honouring Retry-After), 5xx and dropped connections."""
from __future__ import annotations

import time
from typing import Any, Callable

from ...errors import BackendUnavailable

RETRY_STATUS = (429, 500, 502, 503, 504)
ATTEMPTS = 4


def transient_errors() -> tuple[type[BaseException], ...]:
    """The errors of a timeout or dropped connection (urllib3's are not OSErrors)."""
    import urllib3

    return (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError, OSError)


def is_transient(exc: BaseException) -> bool:
    """A timeout or dropped connection (worth the same request again)."""
    return isinstance(exc, transient_errors())


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


def retry_after_s(exc: Any) -> float | None:
    """The Retry-After of an ApiException in seconds (None when absent or an HTTP date)."""
    value = (getattr(exc, "headers", None) or {}).get("Retry-After")
    try:
        return float(value) if value else None
    except ValueError:
        return None


def retrying(call: Callable[[], Any]) -> Any:
    """``call()``, retried up to ATTEMPTS times on RETRY_STATUS answers and transient errors;
    BackendUnavailable when no connection could be made at all."""
    from kubernetes.client.exceptions import ApiException

    delay = 0.2
    for attempt in range(ATTEMPTS):
        try:
            return call()
        except ApiException as exc:
            if exc.status not in RETRY_STATUS or attempt == ATTEMPTS - 1:
                raise
            after = retry_after_s(exc)
            time.sleep(min(after, 5.0) if after else delay)
        except Exception as exc:  # noqa: BLE001 - timeouts / dropped connections
            if not is_transient(exc):
                raise
            if attempt == ATTEMPTS - 1:
                if connect_failed(exc):
                    raise unreachable(exc) from exc
                raise
            time.sleep(delay)
        delay *= 2
    raise AssertionError("unreachable")
