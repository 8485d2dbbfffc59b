"""The fake apiserver stays quiet when a client drops its keep-alive connection, and still
reports a real error in a request handler (stderr captured)."""
from __future__ import annotations

import socket
import struct
import threading

import pytest

from gpujobs_sim import FakeApiServer

REQUEST = b"GET /version HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n"


@pytest.fixture
def server():
    s = FakeApiServer().start()
    closed = threading.Semaphore(0)
    original = s._httpd.shutdown_request

    def shutdown_request(request):  # runs after handle_error: the connection is fully handled
        original(request)
        closed.release()

    s._httpd.shutdown_request = shutdown_request
    s.closed = closed
    yield s
    s.stop()
    assert s._httpd is None


def reset_after_one_request(port: int) -> bytes:
    """A keep-alive request, its answer, then a TCP reset (SO_LINGER 0) instead of a close."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(REQUEST)
    data = b""
    while b"gitVersion" not in data or not data.rstrip().endswith(b"}"):
        data += sock.recv(65536)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()
    return data


def test_client_reset_is_silent(server, capfd):
    for _ in range(3):
        assert reset_after_one_request(server.port).startswith(b"HTTP/1.1 200")
        assert server.closed.acquire(timeout=5)
    err = capfd.readouterr().err
    assert "Exception occurred during processing of request" not in err, err
    assert "ConnectionResetError" not in err, err


def test_client_gone_mid_response_is_silent(server, capfd, monkeypatch):
    """Writing the answer to a client that is gone (BrokenPipe/Reset) is silent too."""
    handler = server._httpd.RequestHandlerClass

    def gone(self, method):
        raise BrokenPipeError(32, "Broken pipe")
    monkeypatch.setattr(handler, "_dispatch", gone)
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(REQUEST)
        assert server.closed.acquire(timeout=5)
    assert "BrokenPipeError" not in capfd.readouterr().err


def test_other_handler_errors_are_still_reported(server, capfd, monkeypatch):
    handler = server._httpd.RequestHandlerClass

    def broken(self, method):
        raise RuntimeError("handler bug 1234")
    monkeypatch.setattr(handler, "_dispatch", broken)
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(REQUEST)
        assert server.closed.acquire(timeout=5)
    err = capfd.readouterr().err
    assert "Exception occurred during processing of request" in err and "handler bug 1234" in err, err
