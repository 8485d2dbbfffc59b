"""A job the apiserver has but the (already synced) watch has not delivered yet: ``status``
waits for the watch instead of answering "not found"; a job that does not exist is not found."""
from __future__ import annotations

import time

import pytest
from tests.k8s_status.test_faults_and_gang import pytorchjob

from gpujobs.errors import JobNotFound

pytestmark = pytest.mark.slow


def test_status_of_a_job_created_while_its_watch_reconnects(make_cluster):
    sim, be = make_cluster(gpus=2)
    sim.store.create(pytorchjob("first", workers=0, seconds=30, queue=None))
    assert be.status("default/first").job_id == "default/first"  # the hub now watches PyTorchJobs
    sim.server.inject(429, count=2, verb="watch", path="pytorchjobs", retry_after=1)
    sim.server.drop_watches()  # the PyTorchJob watch is away for ~2 s
    time.sleep(0.4)  # streams notice a drop within 0.1 s
    sim.store.create(pytorchjob("second", workers=0, seconds=30, queue=None))
    st = be.status("default/second")
    assert st.job_id == "default/second" and st.phase in ("admitted", "starting", "running")
    with pytest.raises(JobNotFound, match="not found"):
        be.status("default/nope")


def test_a_job_without_gpujobs_label_is_not_waited_for(make_cluster, monkeypatch):
    """The watch only delivers labelled jobs: waiting SEEN_WAIT_S for any other would stall
    every status() and widget poll, then say "not found" anyway."""
    from gpujobs.backends.kubernetes.status import live
    from gpujobs.backends.kubernetes.status.hub import StatusHub

    sim, be = make_cluster(gpus=2)
    sim.store.create(pytorchjob("first", workers=0, seconds=30, queue=None))
    assert be.status("default/first").job_id == "default/first"  # PyTorchJobs are watched
    foreign = pytorchjob("foreign", workers=0, seconds=30, queue=None)
    foreign["metadata"]["labels"] = {}  # made by someone else's tooling
    sim.store.create(foreign)
    waits = []
    real_wait = StatusHub.wait
    monkeypatch.setattr(StatusHub, "wait", lambda self, name, *a, **k: (
        waits.append(name), real_wait(self, name, *a, **k))[1])
    monkeypatch.setattr(live, "kind_of", lambda backend, ns, name: "PyTorchJob")
    with pytest.raises(JobNotFound, match="not found"):
        be.status("default/foreign")
    assert waits == []
