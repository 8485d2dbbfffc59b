"""Two readers keep a preempted run's logs: the log keeper (it follows the pods once their
deletion can be seen coming) and the status reads' last log tails (pod_metrics). Each gone pod's
lines are kept exactly once, whichever reader ends first: the keeper's whole log when it kept
one, else the tail as last read (the keeper can keep nothing: the pod vanished before its stream
opened, or the stream dropped). No cluster, no sleeps: the order is set by hand."""
from __future__ import annotations

import threading
from types import SimpleNamespace

from kubernetes.client.exceptions import ApiException
from tests.support import wait_for

from gpujobs.backends.kubernetes.cluster import ClusterState
from gpujobs.backends.kubernetes.status import archive, pod_metrics
from gpujobs.backends.kubernetes.status.log_keeper import LogKeeper

JOB = "default/job1"
POD = {"metadata": {"name": "job1-launcher", "namespace": "default", "uid": "u1"},
       "spec": {"containers": [{"name": "launcher"}]}, "status": {"phase": "Running"}}


class FakeApi:
    """The pod list and its log: a tail read answers at once, a follow waits for ``opened``."""

    def __init__(self, log: str, follow_finds_pod: bool):
        self.pods = [POD]
        self.log = log.encode()
        self.follow_finds_pod = follow_finds_pod
        self.opened = threading.Event()

    def call_api(self, path, method, query_params=(), **_kw):
        if path.endswith("/pods"):
            return {"items": list(self.pods)}
        if ("follow", "true") in query_params:
            self.opened.wait(10)
            if not self.follow_finds_pod:
                raise ApiException(status=404)
            return SimpleNamespace(stream=lambda n: iter([self.log]))
        return SimpleNamespace(data=self.log)


def _setup(tmp_path, follow_finds_pod: bool):
    api = FakeApi("step 0\nstep 10\n", follow_finds_pod)
    kept_by_keeper: list[str] = []
    backend = SimpleNamespace(api_client=api, home=tmp_path, state=ClusterState())
    keeper = backend.state.log_keeper = LogKeeper(
        api, lambda job_id, text: (kept_by_keeper.append(text), archive.save_earlier_run(tmp_path, job_id, text)))
    pm = pod_metrics.for_backend(backend)
    pm.refresh(JOB, force=True)  # a status read while the run lives: its tail
    return api, keeper, pm, kept_by_keeper


def _keeper_done() -> None:
    for t in threading.enumerate():
        if t.name.startswith("keep-logs-"):
            t.join(10)


def test_a_follow_that_keeps_nothing_leaves_the_tail_read_to_be_kept(tmp_path):
    """The keeper starts following, the status read sees the pod gone, then the follow finds it
    gone (404): the run's lines come from the tail, once."""
    api, keeper, pm, by_keeper = _setup(tmp_path, follow_finds_pod=False)
    keeper.follow(JOB, [POD], [POD])
    api.pods = []
    pm.refresh(JOB, force=True)  # gone while the keeper is still opening its stream
    api.opened.set()
    _keeper_done()
    assert by_keeper == []
    assert archive.earlier_runs(tmp_path, JOB) == "[rank 0] step 0\n[rank 0] step 10\n"


def test_an_api_server_gone_while_the_keeper_opens_its_follow_ends_the_follow_quietly(tmp_path, monkeypatch):
    """The CI run of stop 43: the API server stopped while a follow was opening, urllib3 raised
    MaxRetryError (not an OSError) and the keeper's thread died with it. The follow keeps
    nothing and ends; the run's lines still come from the tail read, once."""
    import urllib3

    died: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: died.append(args.exc_value))
    api, keeper, pm, by_keeper = _setup(tmp_path, follow_finds_pod=True)
    plain = api.call_api

    def unreachable(path, method, query_params=(), **kw):
        if ("follow", "true") in query_params:
            raise urllib3.exceptions.MaxRetryError(None, path, reason=ConnectionRefusedError(111, "refused"))
        return plain(path, method, query_params, **kw)
    api.call_api = unreachable
    keeper.follow(JOB, [POD], [POD])
    _keeper_done()
    api.pods = []
    pm.refresh(JOB, force=True)
    assert died == []
    assert by_keeper == []
    assert archive.earlier_runs(tmp_path, JOB) == "[rank 0] step 0\n[rank 0] step 10\n"


def test_a_follow_that_kept_nothing_before_the_status_read_leaves_the_tail_read_to_be_kept(tmp_path):
    api, keeper, pm, by_keeper = _setup(tmp_path, follow_finds_pod=False)
    keeper.follow(JOB, [POD], [POD])
    api.pods = []
    api.opened.set()
    _keeper_done()
    pm.refresh(JOB, force=True)
    assert by_keeper == []
    assert archive.earlier_runs(tmp_path, JOB) == "[rank 0] step 0\n[rank 0] step 10\n"


def test_what_the_keeper_kept_is_not_kept_again_from_the_tail(tmp_path):
    """Either order: the keeper's whole log, once (the tail read is dropped)."""
    for keeper_first in (False, True):
        home = tmp_path / str(keeper_first)
        api, keeper, pm, by_keeper = _setup(home, follow_finds_pod=True)
        keeper.follow(JOB, [POD], [POD])
        api.pods = []
        if keeper_first:
            api.opened.set()
            _keeper_done()
        pm.refresh(JOB, force=True)
        api.opened.set()
        _keeper_done()
        assert by_keeper == ["[rank 0] step 0\n[rank 0] step 10\n"]
        assert archive.earlier_runs(home, JOB) == "[rank 0] step 0\n[rank 0] step 10\n", keeper_first


def test_a_pod_no_keeper_followed_is_kept_from_the_tail(tmp_path):
    api, keeper, pm, by_keeper = _setup(tmp_path, follow_finds_pod=True)
    api.pods = []
    pm.refresh(JOB, force=True)
    assert archive.earlier_runs(tmp_path, JOB) == "[rank 0] step 0\n[rank 0] step 10\n"


def _pod(uid: str, name: str, created: str, index: int) -> dict:
    return {"metadata": {"name": name, "namespace": "default", "uid": uid, "creationTimestamp": created,
                         "labels": {"training.kubeflow.org/replica-index": str(index)}},
            "spec": {"containers": [{"name": "worker"}]}, "status": {"phase": "Running"}}


def test_once_the_job_has_ended_its_last_runs_deleted_pods_are_not_an_earlier_run(tmp_path):
    """The job was requeued at 10:00:05; its last run's worker (made at 10:00:09) is deleted as
    the job ends (the MPI Operator's cleanPodPolicy), and the first run's pod (made at 10:00:00) is
    only seen gone by the same final read: the first run's lines are an earlier run's, the last
    run's are not."""
    import calendar
    import time as _time
    api = FakeApi("hello\n", follow_finds_pod=False)
    backend = SimpleNamespace(api_client=api, home=tmp_path, state=ClusterState())
    pm = pod_metrics.for_backend(backend)
    requeued = calendar.timegm(_time.strptime("2026-12-02T10:00:05", "%Y-%m-%dT%H:%M:%S"))
    pm.requeued_at = lambda job_id: requeued
    api.pods = [_pod("first", "job1-worker-0", "2026-12-02T10:00:00Z", 0)]
    pm.refresh(JOB, force=True)  # the first run
    api.pods = [_pod("last", "job1-worker-0", "2026-12-02T10:00:09Z", 0),
                _pod("last1", "job1-worker-1", "2026-12-02T10:00:09Z", 1)]
    api.log = b"again\n"
    pm.refresh(JOB, force=True)  # the last run (the first run's pod is gone: kept)
    assert archive.earlier_runs(tmp_path, JOB) == "[rank 0] hello\n"
    api.pods = api.pods[1:]
    pm.refresh(JOB, terminal=True, force=True)  # ended; worker-0 deleted
    assert archive.earlier_runs(tmp_path, JOB) == "[rank 0] hello\n"


def test_a_run_first_seen_gone_by_the_final_read_is_still_an_earlier_run(tmp_path):
    import calendar
    import time as _time
    api = FakeApi("hello\n", follow_finds_pod=False)
    backend = SimpleNamespace(api_client=api, home=tmp_path, state=ClusterState())
    pm = pod_metrics.for_backend(backend)
    pm.requeued_at = lambda job_id: calendar.timegm(_time.strptime("2026-12-02T10:00:05", "%Y-%m-%dT%H:%M:%S"))
    api.pods = [_pod("first", "job1-worker-0", "2026-12-02T10:00:00Z", 0)]
    pm.refresh(JOB, force=True)
    api.pods = []
    pm.refresh(JOB, terminal=True, force=True)
    assert archive.earlier_runs(tmp_path, JOB) == "[rank 0] hello\n"


def test_a_job_never_requeued_has_no_earlier_run(tmp_path):
    """Its pods deleted as it ends (an operator's clean-up) are its only run's."""
    api = FakeApi("hello\n", follow_finds_pod=False)
    backend = SimpleNamespace(api_client=api, home=tmp_path, state=ClusterState())
    pm = pod_metrics.for_backend(backend)
    api.pods = [_pod("only", "job1-worker-0", "2026-12-02T10:00:00Z", 0)]
    pm.refresh(JOB, force=True)
    api.pods = []
    pm.refresh(JOB, terminal=True, force=True)
    assert archive.earlier_runs(tmp_path, JOB) == ""


def test_two_readers_keeping_runs_at_once_lose_neither(tmp_path, monkeypatch):
    """The keeper's threads (one per pod) and the status reads save into the same archive entry:
    the second save reads the entry only once the first has written it (read-modify-write in
    one process is one at a time). Here the first save waits, once it has read, for the second
    to read too (it never can once saves are one at a time: the wait then ends unanswered)."""
    real_read = archive._read
    second_read = threading.Event()
    readers: list[str] = []

    def read(path):
        doc = real_read(path)
        readers.append(threading.current_thread().name)
        if len(readers) == 1:
            second_read.wait(2)
        else:
            second_read.set()
        return doc

    monkeypatch.setattr(archive, "_read", read)
    threads = [threading.Thread(target=archive.save_earlier_run, args=(tmp_path, JOB, f"[rank {r}] run 1\n"),
                                name=f"saver-{r}") for r in (0, 1)]
    threads[0].start()
    wait_for(lambda: readers)
    threads[1].start()
    for t in threads:
        t.join(10)
    kept = archive.earlier_runs(tmp_path, JOB)
    assert sorted(kept.splitlines()) == ["[rank 0] run 1", "[rank 1] run 1"], kept
