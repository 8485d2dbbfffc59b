"""No API server at the address: every path says so at once, naming the server, as
BackendUnavailable (the CLI's exit 3), not a urllib3 error or a watch timeout."""
from __future__ import annotations

import socket
import threading

import pytest
from kubernetes import client

from gpujobs.backends.kubernetes.retry import retrying
from gpujobs.backends.kubernetes.status.informer import Informer, wait_synced
from gpujobs.errors import BackendUnavailable, KubernetesError


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed: connects are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api_at(host: str) -> client.ApiClient:
    cfg = client.Configuration()
    cfg.host = host
    return client.ApiClient(cfg)


def test_a_watch_of_a_refused_address_ends_the_wait_with_backend_unavailable(closed_port):
    host = f"http://127.0.0.1:{closed_port}"
    inf = Informer(api_at(host), "kueue.x-k8s.io", "v1beta2", "workloads", "default", lambda *a: None).start()
    try:
        with pytest.raises(BackendUnavailable) as err:
            wait_synced([inf], timeout=60)  # before: 60 s, then "did not sync" (a KubernetesError)
    finally:
        inf.stop()
    text = str(err.value)
    assert f"the Kubernetes API server at {host} cannot be reached" in text
    assert "refused" in text.lower() and "kubectl cluster-info" in text
    assert inf.unreachable and not inf.synced.is_set()


def test_a_server_that_answers_with_errors_is_waited_for_and_the_timeout_says_the_last_error():
    """A server that is there but fails (HTTP 503) is not 'unreachable': the wait runs its time."""
    import http.server

    class Failing(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the stdlib's name
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Failing)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    host = f"http://127.0.0.1:{srv.server_address[1]}"
    inf = Informer(api_at(host), "kueue.x-k8s.io", "v1beta2", "workloads", "default", lambda *a: None).start()
    try:
        with pytest.raises(KubernetesError) as err:
            wait_synced([inf], timeout=1.5)
    finally:
        inf.stop()
        srv.shutdown()
        srv.server_close()
        t.join(5)
    assert not isinstance(err.value, BackendUnavailable) and not inf.unreachable
    assert "did not sync within 2 s" in str(err.value) and "503" in str(err.value)


def test_a_call_that_cannot_connect_raises_backend_unavailable_after_its_retries(closed_port):
    api = api_at(f"http://127.0.0.1:{closed_port}")
    calls = []

    def call():
        calls.append(1)
        return api.call_api("/version", "GET", response_type="object", _return_http_data_only=True)

    with pytest.raises(BackendUnavailable, match=f"at http://127.0.0.1:{closed_port} cannot be reached"):
        retrying(call)  # before: urllib3's MaxRetryError, outside gpujobs.errors
    assert len(calls) == 4


def test_submit_to_a_refused_address_is_backend_unavailable_and_creates_nothing(closed_port, tmp_path):
    import gpujobs
    from gpujobs.backends.kubernetes import KubernetesBackend

    be = KubernetesBackend(host=f"http://127.0.0.1:{closed_port}", namespace="default", home=tmp_path)
    spec = gpujobs.job(max, 1, 2).on("kubernetes").spec()
    with pytest.raises(BackendUnavailable, match="cannot be reached"):
        be.submit(spec)  # before: urllib3's MaxRetryError from the preflight's discovery read
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == []  # no signing key kept
