"""The agent's socket server: ops in UNLOCKED do their slow part (plan's simulation, jobs'
store read and encoding) without the agent's lock, so other clients' requests do not wait
for it. In-process agent, a socket pair; no rank processes."""
from __future__ import annotations

import socket
import threading

import gpujobs
from gpujobs.backends.local import protocol
from gpujobs.backends.local.server import make_handler
from tests.local.inproc import submit


def nap(seconds):
    import time as _t
    _t.sleep(seconds)


def serve_one(agent, msg):
    client, served = socket.socketpair()
    try:
        protocol.send(client, msg)
        client.shutdown(socket.SHUT_WR)
        make_handler(agent)(served, "", None)  # answers, then sees the end of input
        return protocol.raise_reply(protocol.LineReader(client).read())
    finally:
        client.close()
        served.close()


def lock_is_free(agent) -> bool:
    """From another thread (the agent's lock is re-entrant for this one)."""
    got = []

    def try_it():
        ok = agent.lock.acquire(timeout=30)
        if ok:
            agent.lock.release()  # by its owner: an RLock
        got.append(ok)
    t = threading.Thread(target=try_it)
    t.start()
    t.join(60)
    return got == [True]


def test_jobs_reads_the_store_without_the_agent_lock(local_agent, monkeypatch):
    jid, _ = submit(local_agent, gpujobs.job(nap, 60).ddp(gpus_per_node=1).name("listed"))
    free = []
    real = local_agent.store.status_rows

    def probing(queue=None):
        free.append(lock_is_free(local_agent))
        return real(queue)

    monkeypatch.setattr(local_agent.store, "status_rows", probing)
    reply = serve_one(local_agent, {"op": "jobs"})
    assert free == [True]
    assert [j["job_id"] for j in reply["jobs"]] == [jid]
    assert reply["jobs"][0]["queue_position"] == 1  # the live view, not the stored row
