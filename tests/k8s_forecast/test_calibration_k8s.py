"""Start ranges on Kubernetes are calibrated as locally: each pending Workload's first forecast
is scored when the cluster shows it admitted (gpujobs.admission.forecast.calibration.FirstForecasts,
kept by the backend's KubeForecasts), and the errors give the ranges."""
from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from tests.k8s_forecast.test_reasons_k8s import nap, queued, submit, two_teams_one_queue
from tests.support import MPI_IMAGE, wait_for

import gpujobs

from gpujobs.admission.forecast import StartErrors
from gpujobs.admission.forecast.calibration import FirstForecasts
from gpujobs.backends.kubernetes.status import live

pytestmark = pytest.mark.slow  # a pod process runs once the job is admitted


def test_a_first_forecast_is_scored_at_admission_and_past_errors_give_the_range(make_cluster):
    sim, be = make_cluster(two_teams_one_queue(time.time() - 60))  # their 2-GPU job holds the queue
    kf = live.forecasts_for(be, "default")
    for _ in range(20):  # 20 past forecasts of 2-GPU jobs, each 2x too late
        kf.start_errors.add(2.0, 0, 600.0, 300.0)
    mine = submit(be, "mine", "q", 2, limit=60)
    st = queued(mine, lambda s: s.expected_start is not None)
    assert "range from the errors of 20 past forecasts" in st.expected_start_basis, st.expected_start_basis
    lo, hi = st.expected_start_range
    assert lo < hi == st.expected_start  # the past forecasts were all too late: it starts earlier
    plan = be.plan(gpujobs.job(print).mpi(ranks=1, gpus_per_rank=2).image(MPI_IMAGE).queue("q").max_runtime(60).spec())
    assert "range from the errors of 20 past forecasts" in plan.basis, plan.basis  # plan() reads them too
    assert len(kf.firsts.waiting()) == 1, kf.firsts.waiting()
    made = kf.firsts.waiting()[0][1]

    sim.store.delete("batch/v1", "Job", "r", "other")  # their job goes: Kueue admits mine
    before = time.time()
    wait_for(lambda: mine.status().phase != "queued", timeout=60)
    wait_for(lambda: (kf.refresh(), len(kf.start_errors) == 21)[1], timeout=30)
    assert kf.firsts.waiting() == []  # scored once
    forecast_wait, actual_wait = kf.start_errors._pairs[()][-1]
    assert forecast_wait == pytest.approx(st.expected_start - made, abs=2)  # about 570 s
    assert 0 <= actual_wait <= time.time() - made and actual_wait >= before - made - 1.5


def test_first_forecasts_of_a_cluster_view():
    errs = StartErrors()
    firsts = FirstForecasts(errs)

    def job(jid, gpus=1.0):
        return SimpleNamespace(id=jid, workload=SimpleNamespace(total=lambda: {"gpu": gpus}, priority=0))

    snap = SimpleNamespace(now=100.0, pending=[job("a"), job("b"), job("c")], running=[], priorities={},
                           default_priority=0)
    fc = {"a": SimpleNamespace(expected_start=160.0), "b": SimpleNamespace(expected_start=None),
          "c": SimpleNamespace(expected_start=130.0)}
    firsts.note(snap, fc)
    assert sorted(firsts.waiting()) == [("a", 100.0), ("c", 100.0)]  # b has no start to score
    later = SimpleNamespace(now=110.0, pending=[job("a")])
    firsts.note(later, {"a": SimpleNamespace(expected_start=999.0)})  # the first forecast stays
    firsts.score({"c": 150.0}, ["a"])  # c admitted at 150
    assert firsts.waiting() == [("a", 100.0)] and errs._pairs[()][-1] == (30.0, 50.0)
    firsts.score({}, [])  # a was deleted
    assert firsts.waiting() == [] and len(errs) == 1
    firsts.note(SimpleNamespace(now=200.0, pending=[job("d"), job("e")], running=[], priorities={},
                                default_priority=0),
                {"d": SimpleNamespace(expected_start=260.0), "e": SimpleNamespace(expected_start=230.0)})
    # d started before its forecast was made (a start the cluster had not shown yet): not scored;
    # e within the second that Kubernetes times are rounded to: scored, as a wait of 0
    firsts.score({"d": 198.0, "e": 199.5}, [])
    assert firsts.waiting() == [] and len(errs) == 2 and errs._pairs[()][-1] == (30.0, 0.0)


def test_a_job_admitted_and_finished_between_two_refreshes_is_scored_too(make_cluster):
    """A refresh runs only while someone asks; a Workload admitted and finished since the last
    one is no longer pending or running, but its Admitted condition still says when."""
    from gpujobs.backends.kubernetes.status.kueue_model import forecasts
    from gpujobs.handle import Job
    sim, be = make_cluster(two_teams_one_queue(time.time() - 60))
    short = Job(be.submit(gpujobs.job(nap, 0.5).mpi(ranks=1, gpus_per_rank=2).image(MPI_IMAGE).queue("q")
                          .name("short").max_runtime(60).spec()), be)
    sim.store.delete("batch/v1", "Job", "r", "other")
    assert short.result(timeout=120) is None
    c = live.forecasts_for(be, "default").cluster()
    wl = next(w for w in c.workloads if w["metadata"]["namespace"] == "default")
    assert any(x["type"] == "Finished" and x["status"] == "True" for x in wl["status"]["conditions"])
    errs = StartErrors()
    firsts = FirstForecasts(errs)
    wid = short.id
    made = time.time() - 30  # as if its first forecast had been made 30 s ago, 60 s ahead
    firsts.note(SimpleNamespace(now=made, priorities={}, default_priority=0, pending=[SimpleNamespace(
        id=wid, workload=SimpleNamespace(total=lambda: {"gpu": 2.0}, priority=0))]),
        {wid: SimpleNamespace(expected_start=made + 60)})
    forecasts(c, firsts=firsts)
    assert firsts.waiting() == [] and len(errs) == 1
    forecast_wait, actual_wait = errs._pairs[()][-1]
    assert forecast_wait == 60.0 and 0.0 < actual_wait <= 31.0  # admitted a few seconds ago
