"""The panel's HTTP API on a real Jupyter server (127.0.0.1, a token): the list, one job, logs,
a cancel, and requests without the token refused. The server is stopped by pid."""
from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import gpujobs
from tests.browser.labserver import panel_server
from gpujobs.backends.local import stop_agent

pytestmark = pytest.mark.slow


def wait_for_file(path: str, value):
    import time as _t
    while not os.path.exists(path):
        _t.sleep(0.05)
    print(f"released {value}", flush=True)
    return value


@pytest.fixture
def server(tmp_path, gpujobs_home, monkeypatch):
    with panel_server(monkeypatch, tmp_path / "srv", gpujobs_home, app="server", refresh_s=0.2) as lab:
        yield lab


def call(lab, method: str, path: str, token: bool = True):
    url = lab.url(path) if token else f"http://127.0.0.1:{lab.port}/{path}"
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(req, timeout=30) as r:
        body = r.read().decode()
        return json.loads(body) if r.headers.get_content_type() == "application/json" else body


def until(fn, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: last {value!r}")
        time.sleep(0.2)


def test_list_one_job_logs_cancel_and_auth(server, tmp_path):
    gate = str(tmp_path / "go")
    blocker = gpujobs.submit(wait_for_file, gate, "b", gpus=2, name="blocker")
    waiting = gpujobs.submit(wait_for_file, gate, "w", gpus=2, name="waiting")
    doomed = gpujobs.submit(wait_for_file, gate, "d", gpus=2, name="doomed")

    def rows():
        return {r["job_id"]: r for r in call(server, "GET", "gpujobs/api/jobs")}
    listed = until(lambda: (lambda r: r if r.get(blocker.id, {}).get("phase") == "running" else None)(rows()))
    assert {blocker.id, waiting.id, doomed.id} <= set(listed)
    row = listed[waiting.id]
    assert set(row) >= {"job_id", "name", "backend", "queue", "phase", "queue_position", "reason",
                        "expected_start", "progress", "gang_ready", "gang_size"}
    assert (row["name"], row["backend"], row["phase"], row["queue_position"], row["gang_size"]) == \
        ("waiting", "local", "queued", 1, 2)
    assert listed[doomed.id]["queue_position"] == 2
    assert row["reason"]
    # active first, in queue order
    order = [r["job_id"] for r in call(server, "GET", "gpujobs/api/jobs")]
    assert order.index(waiting.id) < order.index(doomed.id)

    # "running" is the gang's start; its ranks reach the function a moment later
    stacks = until(lambda: (lambda s: s if set(s) == {"0", "1"} and all("wait_for_file" in t for t in s.values())
                            else None)(call(server, "GET", f"gpujobs/api/jobs/{blocker.id}/stacks")))
    assert set(stacks) == {"0", "1"} and all("wait_for_file" in t for t in stacks.values()), stacks
    with pytest.raises(urllib.error.HTTPError) as not_running:
        call(server, "GET", f"gpujobs/api/jobs/{waiting.id}/stacks")
    assert not_running.value.code == 409

    one = call(server, "GET", f"gpujobs/api/jobs/{waiting.id}")
    assert one["job_id"] == waiting.id and one["phase"] == "queued"
    with pytest.raises(urllib.error.HTTPError) as missing:
        call(server, "GET", "gpujobs/api/jobs/no-such-job")
    assert missing.value.code == 404

    # without the token: refused, and nothing cancelled
    for method, path in (("GET", "gpujobs/api/jobs"), ("GET", f"gpujobs/api/jobs/{waiting.id}"),
                         ("POST", f"gpujobs/api/jobs/{doomed.id}/cancel"), ("GET", "gpujobs/api/events"),
                         ("GET", f"gpujobs/api/jobs/{blocker.id}/logs")):
        with pytest.raises(urllib.error.HTTPError) as refused:
            call(server, method, path, token=False)
        assert refused.value.code in (401, 403), (method, path, refused.value.code)
    assert doomed.status().phase == "queued"

    assert call(server, "POST", f"gpujobs/api/jobs/{doomed.id}/cancel") == \
        {"job_id": doomed.id, "cancelled": True}
    assert doomed.wait(timeout=30).phase == "cancelled"
    until(lambda: rows()[doomed.id]["phase"] == "cancelled")
    assert rows()[waiting.id]["queue_position"] == 1

    Path(gate).touch()
    assert blocker.result(timeout=60) == "b" and waiting.result(timeout=60) == "w"
    final = until(lambda: (lambda r: r if r[waiting.id]["phase"] == "succeeded" else None)(rows()))
    assert final[waiting.id]["terminal"] and final[waiting.id]["gang_ready"] in (0, 2)
    logs = call(server, "GET", f"gpujobs/api/jobs/{waiting.id}/logs")
    assert "[rank 0] released w" in logs and "[rank 1] released w" in logs, logs
    rank1 = call(server, "GET", f"gpujobs/api/jobs/{waiting.id}/logs?rank=1")
    assert "[rank 1] released w" in rank1 and "[rank 0]" not in rank1, rank1
    with pytest.raises(urllib.error.HTTPError) as bad:
        call(server, "GET", f"gpujobs/api/jobs/{waiting.id}/logs?rank=x")
    assert bad.value.code == 400


def test_events_stream_a_snapshot_then_changes(server, tmp_path):
    gate = str(tmp_path / "go")
    job = gpujobs.submit(wait_for_file, gate, "e", gpus=1, name="streamed")
    req = urllib.request.Request(server.url("gpujobs/api/events"))
    events: list[tuple[str, object]] = []
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.headers.get_content_type() == "text/event-stream"
        kind = None
        released = False
        for raw in r:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                kind = line[len("event: "):]
            elif line.startswith("data: "):
                events.append((kind, json.loads(line[len("data: "):])))
                phases = [row["phase"] for k, d in events for row in
                          (d if k == "snapshot" else d["upsert"] if k == "changes" else [])
                          if row["job_id"] == job.id]
                if "running" in phases and not released:
                    Path(gate).touch()
                    released = True
                if phases and phases[-1] == "succeeded":
                    break
    assert events[0][0] == "snapshot"
    assert all(k == "changes" for k, _ in events[1:])
    assert phases[-1] == "succeeded" and "running" in phases, phases


def test_a_refresh_is_one_request_to_the_local_agent(gpujobs_home, monkeypatch, tmp_path):
    """However many jobs, the feed's refresh (``gpujobs.jobs()``) asks the agent once."""
    import asyncio

    from gpujobs.backends.local.client import AgentClient
    from gpujobs.lab.feed import JobFeed
    monkeypatch.setenv("GPUJOBS_LOCAL_GPUS", "2")
    gate = str(tmp_path / "go")
    jobs = [gpujobs.submit(wait_for_file, gate, i, gpus=2, name=f"n{i}") for i in range(4)]
    try:
        until(lambda: jobs[0].status().phase == "running")
        sent: list[str] = []
        original = AgentClient.request

        def counted(client, msg, *a, **kw):
            sent.append(msg["op"])
            return original(client, msg, *a, **kw)
        monkeypatch.setattr(AgentClient, "request", counted)
        feed = JobFeed(interval=60)
        rows = asyncio.run(feed.current())
        assert {r["job_id"] for r in rows} == {j.id for j in jobs}
        assert sent == ["jobs"]
    finally:
        Path(gate).touch()
        for j in jobs:
            j.wait(timeout=60)
        stop_agent(home=gpujobs_home)
