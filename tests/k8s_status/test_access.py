"""The API server's refusals (gpujobs/backends/kubernetes/access.py), said at once with their fix:
no server at the address (BackendUnavailable, the CLI's exit 3, not a urllib3 error or a watch
that "did not sync within 10 s"), credentials refused (401), a namespaced list the user's Role
lacks (403: an error, not an empty queue or "not found")."""
from __future__ import annotations

import contextlib
import json
import threading
import time

import pytest
from kubernetes import client
from tests.support import free_port

from gpujobs.backends.kubernetes.retry import retrying
from gpujobs.backends.kubernetes.status.informer import Informer, wait_synced
from gpujobs.errors import BackendUnavailable, KubernetesError


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on (free now: connects are refused)."""
    return free_port()


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


@contextlib.contextmanager
def answering(code: int):
    """A loopback HTTP server answering every request with ``code`` and a Kubernetes Status."""
    import http.server

    class Refusing(http.server.BaseHTTPRequestHandler):
        def _answer(self):
            body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                               "reason": {401: "Unauthorized", 403: "Forbidden"}.get(code, "ServiceUnavailable"),
                               "message": "refused"}).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer  # noqa: N815 - the stdlib's names

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(5)


def test_a_server_that_answers_with_errors_is_waited_for_and_the_timeout_says_the_last_error():
    """A server that is there but fails (HTTP 503) is not 'unreachable': the wait runs its time."""
    with answering(503) as host:
        inf = Informer(api_at(host), "kueue.x-k8s.io", "v1beta2", "workloads", "default", lambda *a: None).start()
        try:
            with pytest.raises(KubernetesError) as err:
                wait_synced([inf], timeout=1.5)
        finally:
            inf.stop()
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


def test_refused_credentials_end_a_wait_and_a_submit_at_once_with_a_401_and_the_login_fix(tmp_path):
    import gpujobs
    from gpujobs.backends.kubernetes import KubernetesBackend

    with answering(401) as host:
        inf = Informer(api_at(host), "kueue.x-k8s.io", "v1beta2", "workloads", "default", lambda *a: None).start()
        try:
            with pytest.raises(KubernetesError) as err:
                wait_synced([inf], timeout=60)  # before: 60 s, then "did not sync" with headers
        finally:
            inf.stop()
        be = KubernetesBackend(host=host, namespace="default", home=tmp_path)
        with pytest.raises(KubernetesError) as sub:
            be.submit(gpujobs.job(max, 1, 2).on("kubernetes").spec())  # before: "API discovery ... failed"
    for e in (err.value, sub.value):
        assert (e.status, e.reason) == (401, "Unauthorized")
        assert "does not accept your credentials" in str(e) and "kubectl auth whoami" in str(e)
    assert f"at {host}" in str(err.value)


def test_a_namespaced_list_the_role_lacks_is_an_error_not_an_empty_queue(tmp_path):
    from gpujobs.backends.kubernetes import KubernetesBackend

    with answering(403) as host:
        be = KubernetesBackend(host=host, namespace="team-a", home=tmp_path)
        try:
            with pytest.raises(KubernetesError) as err:
                be.jobs()  # before: [] (the CLI printed an empty table and exited 0)
        finally:
            be.state.stop_watches()
    assert (err.value.status, err.value.reason) == (403, "Forbidden")
    assert "you may not list workloads in namespace 'team-a'" in str(err.value)
    assert "gpujobs admin rbac -n team-a --user NAME | kubectl apply -f -" in str(err.value)


def sleepy(seconds, value):
    import time as _t
    _t.sleep(seconds)
    return value


@pytest.mark.slow
def test_a_long_lived_view_says_its_status_is_not_current_while_the_cluster_refuses_and_recovers(make_cluster):
    """Credentials that expire after the watches synced: before, every status and the widget kept
    the last state with nothing said (the watches retried out of sight)."""
    import gpujobs
    from gpujobs.handle import Job
    from tests.support import wait_for

    sim, be = make_cluster(gpus=1)
    job = Job(be.submit(gpujobs.job(sleepy, 120, "a").queue("q").spec()), be)
    wait_for(lambda: job.status().phase == "running", timeout=60)
    be.state.hubs["default"].stale_after_s = 0.5
    pushed: list = []
    be.subscribe(job.id, pushed.append)
    sim.server.drop_watches()  # a dropped connection, at once resumed: current all along
    time.sleep(2.0)
    assert "stale_since" not in job.status().extra and not any("not current" in s.message for s in pushed)
    sim.server.inject(401, count=10**6, path="/namespaces/default/")  # the token expired
    sim.server.drop_watches()
    st = wait_for(lambda: (s := job.status()).extra.get("stale_since") and s, timeout=30)
    assert st.phase == "running"
    assert st.message.startswith("not current: no news from the cluster since ")
    assert "does not accept your credentials" in st.message and "kubectl auth whoami" in st.message
    wait_for(lambda: any("not current" in s.message for s in pushed))  # what the widget is told
    sim.server.clear_faults()  # logged in again
    st = wait_for(lambda: "stale_since" not in (s := job.status()).extra and s, timeout=30)
    assert st.phase == "running" and "not current" not in st.message
    job.cancel()
