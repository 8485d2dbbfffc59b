"""live.outcomes caches a job's outcomes once it is terminal, but never an empty read: a read made
while the last log lines were still on their way (KubeRay's submitter, a restarted container)
must not become the answer for the rest of the process."""
from __future__ import annotations

from types import SimpleNamespace

from gpujobs.backends.kubernetes.status import live
from gpujobs.status import JobStatus


def test_an_empty_read_of_a_terminal_job_is_read_again(monkeypatch, tmp_path):
    reads = [{}, {0: b"sealed"}]
    monkeypatch.setattr(live.results, "outcomes", lambda api, ns, name: reads.pop(0))
    monkeypatch.setattr(live.archive, "outcomes", lambda home, job_id: {})
    monkeypatch.setattr(live, "_hub_status", lambda be, job_id: JobStatus(
        job_id=job_id, name="r", backend="kubernetes", phase="succeeded"))
    be = SimpleNamespace(state=SimpleNamespace(outcomes={}), api_client=None, home=tmp_path)
    assert live.outcomes(be, "default/r") == {}
    assert live.outcomes(be, "default/r") == {0: b"sealed"}
    assert be.state.outcomes == {"default/r": {0: b"sealed"}}
    assert live.outcomes(be, "default/r") == {0: b"sealed"}  # cached now: no third read
