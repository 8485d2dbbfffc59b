"""The cluster going away and coming back, judged by the real apiserver's watches.

gpujobs talks to the real kube-apiserver through a loopback TCP relay that the test cuts
(open connections closed, new ones refused) and restores on the same port. While it is cut,
an unfinished job's status says it is not current (hub ``stale_after_s``, docs/troubleshooting.md
"The cluster refuses"); meanwhile the admin, talking to the apiserver directly, cancels that job
and submits another. Once the relay is back the watches resume or relist against the real
server, the note goes, and both changes made during the outage are shown: nothing is lost.
"""
from __future__ import annotations

import random
import select
import socket
import threading
import time
import warnings

import pytest

from gpujobs.backends.kubernetes import KubernetesBackend, naming

from .conftest import NS, QUEUE, write_kubeconfig
from .kube import spec_of, wait_for, workload_of




def _bind_below_ephemeral(s: socket.socket) -> int:
    """Bind ``s`` to a free 127.0.0.1 port under ip_local_port_range's low end; the port."""
    try:
        low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.Random()
    if low <= 2025:  # no room below the range: any free port (restore may then meet EADDRINUSE)
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
    for _ in range(200):
        port = rng.randrange(max(1025, low - 12000), low)
        try:
            s.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
    raise OSError("no free port below the ephemeral range")


class Relay:
    """127.0.0.1:port -> target, byte for byte (TLS passes through); ``cut()`` / ``restore()``."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.port = 0
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.restore()

    def restore(self) -> None:
        """Listen again, on the same port. The port is below the kernel's ephemeral range, so no
        outgoing connection can take it while the relay is cut (one from the ephemeral range
        could, and the bind then failed with EADDRINUSE)."""
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if self.port:
            s.bind(("127.0.0.1", self.port))
        else:
            self.port = _bind_below_ephemeral(s)
        s.listen(64)
        self._listener = s
        self._spawn(self._accept, s)

    def _spawn(self, target, *args) -> None:
        t = threading.Thread(target=target, args=args, daemon=True, name="relay")
        self._threads.append(t)
        t.start()

    def close(self) -> None:
        """Cut, and wait for every thread of the relay to end."""
        self.cut()
        for t in self._threads:
            t.join(timeout=5)

    def cut(self) -> None:
        """Refuse new connections and reset the open ones."""
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._conns = self._conns, []
        for c in ([listener] if listener is not None else []) + conns:  # shutdown wakes a blocked accept()
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:
                    client.close()
                    upstream.close()
                    return
                self._conns += [client, upstream]
            self._spawn(self._pipe, client, upstream)

    @staticmethod
    def _pipe(a: socket.socket, b: socket.socket) -> None:
        peers = {a: b, b: a}
        try:
            while True:
                ready, _, _ = select.select([a, b], [], [], 1.0)
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        return
                    peers[s].sendall(data)
        except (OSError, ValueError):
            return
        finally:
            for s in (a, b):
                try:
                    s.close()
                except OSError:
                    pass


@pytest.fixture
def relay(controlplane):
    host, port = controlplane.server.removeprefix("https://").rsplit(":", 1)
    r = Relay((host, int(port)))
    yield r
    r.close()


def test_a_cut_cluster_makes_statuses_not_current_and_nothing_done_meanwhile_is_lost(
        controlplane, relay, backend, admin_api, gpujobs_home, tmp_path):
    controlplane.require_kueue()
    pki = controlplane.run / "pki"
    kc = write_kubeconfig(tmp_path / "kubeconfig-relay", f"https://127.0.0.1:{relay.port}",
                          controlplane.pki["ca"], controlplane.pki["admin"], pki / "admin.key", NS)
    be = KubernetesBackend(kubeconfig=str(kc), namespace=NS, home=gpujobs_home,
                           default_queue=QUEUE, request_timeout=20.0)
    made: list[str] = []  # cancelled at the end: the queue is the session's, shared with later tests
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            first = be.submit(spec_of("PyTorchJob"))
            made.append(first)
        st = wait_for(lambda: (s := be.status(first)).phase != "queued" and s, 60, "the first job admitted")
        assert "not current" not in st.message and "stale_since" not in st.extra

        relay.cut()
        st = wait_for(lambda: "stale_since" in (s := be.status(first)).extra and s, 60,
                      "the status to say it is not current")
        assert st.message.startswith("not current: no news from the cluster since "), st.message
        assert f"127.0.0.1:{relay.port}" in st.message, st.message  # names the server it cannot reach
        assert not st.terminal

        # the admin, on the apiserver directly: cancels the first job, submits a second
        backend.cancel(first)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            second = backend.submit(spec_of("PyTorchJob"))
            made.append(second)
        assert "stale_since" in be.status(first).extra  # still cut: still the old news, marked

        relay.restore()
        back = time.monotonic()
        st = wait_for(lambda: (s := be.status(first)).terminal and s, 90,
                      "the cancel made during the outage to show")
        assert st.phase == "cancelled" and "not current" not in st.message, st
        seen = wait_for(lambda: {j.job_id: j for j in be.jobs()}.get(second), 60,
                        "the job submitted during the outage to be listed")
        assert not seen.terminal, seen
        # every watch reconnects within its backoff (at most 5 s) and counts as working once held
        # open informer.HELD_S: then no status is marked any more
        seen = wait_for(lambda: "stale_since" not in (s := be.status(second)).extra and s, 30,
                        "the note to go once the cluster is back")
        print(f"the note went {time.monotonic() - back:.1f} s after the relay was restored")
        assert "not current" not in seen.message
    finally:
        for j in made:
            backend.cancel(j)
        for j in made:
            wait_for(lambda j=j: workload_of(admin_api, "PyTorchJob", naming.parse_job_id(j)[1]) is None,
                     60, "cleanup")
        be.state.stop_watches()
        if be._api_client is not None:
            be._api_client.close()
