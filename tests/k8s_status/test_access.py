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
from tests.kubeconfig import token_kubeconfig
from tests.support import free_port, wait_for

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


def refusal(code: int) -> tuple[int, dict]:
    """An HTTP status and the Kubernetes Status body that goes with it."""
    return code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                  "reason": {401: "Unauthorized", 403: "Forbidden"}.get(code, "ServiceUnavailable"),
                  "message": "refused"}


@contextlib.contextmanager
def serving(respond):
    """A loopback HTTP server answering each request with ``respond(handler)``: (code, JSON body)."""
    import http.server

    class Answering(http.server.BaseHTTPRequestHandler):
        def _answer(self):
            code, body = respond(self)
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _answer  # noqa: N815 - the stdlib's names

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answering)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(5)


def answering(code: int):
    """A loopback HTTP server answering every request with ``code`` and a Kubernetes Status."""
    return serving(lambda handler: refusal(code))


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


def test_a_new_login_written_to_the_kubeconfig_reaches_the_running_backend(tmp_path):
    """A long-lived process (a notebook) holds its client: before, a token renewed in the
    kubeconfig after a 401 was never read again, so "log in again" did not help until a restart.
    A broken file (half-written) keeps the credentials it had."""
    from gpujobs.backends.kubernetes import KubernetesBackend

    seen: list[str | None] = []

    def respond(handler):
        seen.append(handler.headers.get("Authorization"))
        if seen[-1] != "Bearer new":
            return refusal(401)
        return 200, {"kind": "NamespaceList", "apiVersion": "v1", "items": [], "metadata": {"resourceVersion": "1"}}
    kc, now = tmp_path / "kubeconfig", time.time()

    def login(token: str | None, at: float) -> None:
        token_kubeconfig(kc, host, token, at)
    with serving(respond) as host:
        login("old", now)
        core = client.CoreV1Api(KubernetesBackend(kubeconfig=str(kc), namespace="default", home=tmp_path).api_client)
        with pytest.raises(client.ApiException) as e:
            core.list_namespace()
        assert e.value.status == 401 and seen == ["Bearer old"]
        login("new", now + 2)
        core.list_namespace()
        login(None, now + 4)  # broken: the new token stays
        core.list_namespace()
    assert seen == ["Bearer old", "Bearer new", "Bearer new"]


def test_kubeconfig_reloads_under_many_threads_keep_one_hook_and_end_on_the_last_token(tmp_path):
    """Informer, hub and widget threads all ask for the token: a reload in one thread must not
    leave the hook replaced (the client's own hook re-installs itself on the config it is given:
    before, an interleaving left the hook calling itself, RecursionError on every request)."""
    from gpujobs.backends.kubernetes import KubernetesBackend

    kc = tmp_path / "kubeconfig"

    def login(token: str, at: float) -> None:
        token_kubeconfig(kc, "http://127.0.0.1:9", token, at)
    now = time.time()
    login("t0", now)
    cfg = KubernetesBackend(kubeconfig=str(kc), namespace="default", home=tmp_path).api_client.configuration
    hook = cfg.refresh_api_key_hook
    errors: list[BaseException] = []
    stop = threading.Event()

    def ask():
        while not stop.is_set():
            try:
                assert cfg.get_api_key_with_prefix("authorization").startswith("Bearer t")
            except BaseException as exc:  # noqa: BLE001 - collected for the assert below
                errors.append(exc)
                return
    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for i in range(1, 200):
        login(f"t{i}", now + 2 * i)
    stop.set()
    for t in threads:
        t.join(10)
    assert not errors, errors[:3]
    assert cfg.refresh_api_key_hook is hook
    assert cfg.get_api_key_with_prefix("authorization") == "Bearer t199"


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

    sim, be = make_cluster(gpus=1)
    job = Job(be.submit(gpujobs.job(sleepy, 120, "a").queue("q").spec()), be)
    wait_for(lambda: job.status().phase == "running", timeout=60)
    from gpujobs.backends.kubernetes.status.informer import HELD_S
    be.state.hubs["default"].stale_after_s = HELD_S + 1.0
    pushed: list = []
    be.subscribe(job.id, pushed.append)
    sim.server.drop_watches()  # a dropped connection, at once resumed: current all along
    time.sleep(HELD_S + 2.0)
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


@pytest.mark.slow
def test_a_wait_ends_with_the_refusal_once_the_cluster_has_refused_for_a_while_but_not_for_an_outage(make_cluster):
    """Before, ``job.wait()`` / ``job.result()`` with expired credentials waited for ever and said
    nothing (the watches retried out of sight). Now a 401 or 403 that lasts the hub's
    ``refused_after_s`` ends the wait with that error and its fix; the job keeps running. A server
    that fails (5xx) may come back by itself: it is waited for, as before."""
    import gpujobs
    from gpujobs.errors import KubernetesError, WaitTimeout
    from gpujobs.handle import Job

    sim, be = make_cluster(gpus=1)
    job = Job(be.submit(gpujobs.job(sleepy, 120, "a").queue("q").spec()), be)
    wait_for(lambda: job.status().phase == "running", timeout=60)
    hub = be.state.hubs["default"]
    hub.refused_after_s = 2.0
    sim.server.inject(503, count=10**6, path="/namespaces/default/")  # failing, not refusing
    sim.server.drop_watches()
    with pytest.raises(WaitTimeout):
        job.wait(timeout=5.0)
    sim.server.clear_faults()
    wait_for(lambda: hub.refused() is None and hub.stale() is None, timeout=30)
    sim.server.inject(401, count=10**6, path="/namespaces/default/")  # the token expired
    sim.server.drop_watches()
    t0 = time.monotonic()
    with pytest.raises(KubernetesError) as e:
        job.result(timeout=60)
    assert time.monotonic() - t0 < 30
    assert e.value.status == 401 and "does not accept your credentials" in str(e.value)
    assert "kubectl auth whoami" in str(e.value)
    sim.server.clear_faults()  # logged in again: the job ran on meanwhile, and is waited for again
    assert hub.refused() is not None  # the watches have not retried yet: the old refusal stands
    job.cancel()
    assert job.wait(timeout=60).phase == "cancelled"  # a wait begun now is not ended by it


def test_a_refusal_is_timed_from_the_first_refusal_not_from_an_outage_before_it():
    """A minute of 503s and then one 401 is a refusal of a moment, not of a minute (before, the
    time since the first failure of any kind ended waits at the first 401)."""
    inf = Informer(_Api(_empty_list, lambda p: _Stream()), "g", "v1", "things", "ns", lambda *a: None)
    inf._failed(client.ApiException(status=503))
    assert inf.failing_since is not None and inf.refused_since is None
    inf.failing_since -= 60  # an outage of a minute
    inf._failed(client.ApiException(status=401))
    first = inf.refused_since
    assert first is not None and first - inf.failing_since >= 60
    inf._failed(client.ApiException(status=403))
    assert inf.refused_since == first  # refused all along
    inf._failed(client.ApiException(status=500))
    assert inf.refused_since is None and inf.failed_at is not None


class _Stream:
    """A watch response: quiet for ``hold_s`` (or until ``released``), then ``events``, then the end."""

    released = threading.Event()

    def __init__(self, *events: dict, hold_s: float = 0.0):
        self.lines, self.hold_s = [json.dumps(e) for e in events], hold_s

    def stream(self, amt=None, decode_content=False):
        self.released.wait(self.hold_s)
        for line in self.lines:
            yield (line + "\n").encode()

    def close(self):
        pass

    def release_conn(self):
        pass


class _Api:
    """An api_client whose lists answer ``on_list(path)`` and whose watches answer ``on_watch(path)``."""

    class configuration:  # noqa: N801 - the client's attribute name
        host = "https://k8s.example"

    def __init__(self, on_list, on_watch):
        self.on_list, self.on_watch = on_list, on_watch

    def call_api(self, path, method, query_params=(), **kw):
        return (self.on_watch if dict(query_params).get("watch") else self.on_list)(path)


def _empty_list(path):
    return {"items": [], "metadata": {"resourceVersion": "1"}}


def test_a_watch_accepted_then_failing_at_once_stays_failing_from_its_first_failure():
    """A 200 and then at once an ERROR event (an etcd timeout, a failing conversion webhook): the
    acceptance alone does not count as working (before, each retry restarted the clock, and with
    backoff under 6.25 s a status never said it was not current)."""
    error = {"type": "ERROR", "object": {"kind": "Status", "code": 500, "reason": "InternalError",
                                         "message": "etcdserver: request timed out"}}
    inf = Informer(_Api(_empty_list, lambda p: _Stream(error)), "g", "v1", "things", "ns",
                   lambda *a: None).start()
    try:
        wait_synced([inf], timeout=10)
        time.sleep(3.0)  # retries after 0.2, 0.4, 0.8, 1.6 s
        failing = inf.failing
        assert failing is not None and time.time() - failing[0] >= 2.5, failing
    finally:
        inf.stop()


def test_a_quiet_watch_held_open_after_a_failure_is_current_again_and_a_later_failure_starts_anew():
    calls = []

    def watch(path):
        calls.append(1)
        if len(calls) in (1, 3):
            raise client.ApiException(status=500, reason="InternalError")
        return _Stream(hold_s=30)  # accepted; a quiet resource sends nothing

    inf = Informer(_Api(_empty_list, watch), "g", "v1", "things", "ns", lambda *a: None).start()
    try:
        wait_synced([inf], timeout=10)
        wait_for(lambda: len(calls) == 2)
        assert inf.failing is not None  # accepted only just now
        wait_for(lambda: inf.failing is None, timeout=5)
        current = time.time()
        _Stream.released.set()  # the quiet watch ends; the next one fails
        wait_for(lambda: len(calls) >= 3)
        _Stream.released.clear()
        failing = inf.failing
        assert failing is not None and failing[0] >= current  # not since the first failure
    finally:
        inf.stop(wait_s=0)
        _Stream.released.set()  # the held watch ends; the thread with it
        inf.join(5)
        _Stream.released.clear()


def test_a_resource_that_failed_once_and_then_is_not_served_does_not_make_statuses_stale():
    """A blip on the first list of PodGroups, then 404 (Volcano not installed): the server
    answered, so nothing is stale (before: 'not current' on every running job, for good)."""
    from gpujobs.backends.kubernetes.status.hub import StatusHub

    pg_lists = []

    def lists(path):
        if "podgroups" in path:
            pg_lists.append(1)
            raise client.ApiException(status=503 if len(pg_lists) == 1 else 404)
        return _empty_list(path)

    hub = StatusHub(_Api(lists, lambda p: _Stream(hold_s=0.5)), "default", stale_after_s=0.5).start()
    try:
        hub.wait_synced(10)
        time.sleep(1.5)
        assert hub.stale() is None
    finally:
        hub.stop()
        for inf in hub._informers.values():
            inf.join(5)
