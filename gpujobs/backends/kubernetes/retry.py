"""Retrying API calls through 429 (honouring Retry-After), 5xx and dropped connections."""
from __future__ import annotations

import time
from typing import Any, Callable

from .access import connect_failed, unauthorized, unreachable

RETRY_STATUS = (429, 500, 502, 503, 504)
ATTEMPTS = 4


def transient_errors() -> tuple[type[BaseException], ...]:
    """The errors of a timeout or dropped connection (urllib3's are not OSErrors)."""
    import urllib3

    return (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError, OSError)


def is_transient(exc: BaseException) -> bool:
    """A timeout or dropped connection (worth the same request again)."""
    return isinstance(exc, transient_errors())


def retry_after_s(exc: Any) -> float | None:
    """The Retry-After of an ApiException in seconds (None when absent or an HTTP date)."""
    value = (getattr(exc, "headers", None) or {}).get("Retry-After")
    try:
        return float(value) if value else None
    except ValueError:
        return None


def retrying(call: Callable[[], Any]) -> Any:
    """``call()``, retried up to ATTEMPTS times on RETRY_STATUS answers and transient errors;
    BackendUnavailable when no connection could be made at all, KubernetesError (401) when the
    server refuses the credentials (:mod:`.access`)."""
    from kubernetes.client.exceptions import ApiException

    delay = 0.2
    for attempt in range(ATTEMPTS):
        try:
            return call()
        except ApiException as exc:
            if exc.status == 401:
                raise unauthorized(exc) from exc
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
