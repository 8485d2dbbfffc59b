"""429 handling: Retry-After in seconds is honoured; an HTTP-date Retry-After does not crash."""
from __future__ import annotations

from kubernetes.client.exceptions import ApiException

from gpujobs.backends.kubernetes.retry import retry_after_s, retrying


def too_many(after: str) -> ApiException:
    exc = ApiException(status=429, reason="TooManyRequests")
    exc.headers = {"Retry-After": after}
    return exc


def test_retry_after_seconds_and_http_date():
    assert retry_after_s(too_many("2")) == 2.0
    # Regression: float() of an HTTP date raised ValueError and ended the informer thread.
    assert retry_after_s(too_many("Wed, 21 Oct 2026 07:28:00 GMT")) is None
    assert retry_after_s(ApiException(status=500)) is None


def test_retrying_survives_an_http_date_retry_after():
    calls = []

    def call():
        calls.append(1)
        if len(calls) == 1:
            raise too_many("Wed, 21 Oct 2026 07:28:00 GMT")
        return "ok"

    assert retrying(call) == "ok" and len(calls) == 2


def test_kueue_version_of_its_manager_image():
    from gpujobs.backends.kubernetes.submit.kueue_version import erases_trainjob_grace_period, version_of_image
    assert version_of_image("registry.k8s.io/kueue/kueue:v0.19.2") == "v0.19.2"
    assert version_of_image("us-central1-docker.pkg.dev/k8s-staging-images/kueue/kueue:v0.20.0-rc.1@sha256:" + "a" * 64) \
        == "v0.20.0-rc.1"
    assert version_of_image("controller:latest") is None
    assert [erases_trainjob_grace_period(v) for v in ("v0.19.2", "v0.20.0", "v1.0.0", None)] == [True, False, False, None]
