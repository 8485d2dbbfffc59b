"""benchmarks/eta_oracle.py: the queue at a forecast's moment is rebuilt from the jobs' events,
and told the true runtimes the forecast gives the start the job really got."""
from __future__ import annotations

import json

import pytest

from tests.support import benchmark_module


@pytest.fixture
def eta_oracle():
    return benchmark_module("eta_oracle")


def row(i: str, queue: str, submitted: float, events: list, *, gpus: int = 1, at: float | None = None,
        expected: float | None = None, limit: float | None = 60.0, report: bool = False,
        run: float = 10.0, fail: float | None = None) -> dict:
    return {"id": i, "scenario": "s", "kind": {"user": "u", "name": f"u-{i}", "queue": queue, "typical": 8.0},
            "gpus": gpus, "prio": "normal", "report": report, "run": run, "fail": fail, "limit": limit, "submitted": submitted, "events": events,
            "final": "succeeded", "phase": "queued" if at is not None else "running", "at": at,
            "expected": expected, "naive": (expected or 0) + 5, "actual": next(
                (t for t, k in events if k == "started"), None)}


def scenario() -> list[dict]:
    """Two slots (a queue of one each, sharing a cohort). a (qa) runs 0-10 s, c (qb) 0-20 s; b
    (qa) comes at 1 s and waits for a's slot (c's is taken too, so it cannot borrow)."""
    a = row("a", "qa", 0.0, [(0.0, "submitted"), (0.05, "admitted"), (0.1, "started"), (10.1, "finished")])
    c = row("c", "qb", 0.0, [(0.0, "submitted"), (0.05, "admitted"), (0.1, "started"), (20.0, "finished")])
    b = row("b", "qa", 1.0, [(1.0, "submitted"), (1.0, "queued"), (10.15, "admitted"), (10.2, "started"),
                             (15.0, "finished")], at=1.2, expected=13.0)
    return [a, c, b]


def test_runs_split_a_preempted_run_at_its_preemption_and_its_quota_at_the_requeue(eta_oracle):
    d = row("d", "qa", 0.0, [(0.0, "submitted"), (2.0, "started"), (3.0, "preempted"), (3.4, "requeued"),
                             (12.0, "started"), (14.0, "finished")])
    assert eta_oracle.runs(d) == [(2.0, 3.0, 3.4), (12.0, 14.0, 14.0)]
    assert eta_oracle.work_left(d, 2.5) == pytest.approx(0.5 + 2.0)
    assert [eta_oracle.state_at(d, t) for t in (1.0, 2.5, 3.2, 5.0, 13.0, 15.0)] == \
        ["pending", "running", "stopping", "pending", "running", "gone"]


def test_told_the_true_runtimes_the_forecast_is_the_start_the_engine_gives(eta_oracle):
    rows = scenario()
    b = rows[2]
    known = eta_oracle.forecast_at(rows, b, 2, {"running", "queued"}, rows)
    assert known == pytest.approx(10.1)  # a's slot comes back at 10.1
    # the engine replay admits at the submission and runs a's 10 s of work: 10.0 (the agent's
    # 0.1 s from submit to start is part of the floor it reports)
    assert eta_oracle.all_known(rows, 2, 0.1)["b"] == pytest.approx(10.0)
    # from history and limits alone (no run finished before 1.2 s): a's end is its limit + grace
    assert eta_oracle.forecast_at(rows, b, 2, set(), rows) == pytest.approx(0.1 + 60.0 + eta_oracle.GRACE)


@pytest.mark.parametrize("fail, end", [(None, 10.1), (0.5, 20.1)])
def test_an_exact_rate_gives_a_reporting_run_its_end_and_a_failing_one_its_full_runs(eta_oracle, fail, end):
    """"exact progress rates": a's rate (it reports) says when its 10 s run ends; when it fails
    halfway (its work ended at 10.1), the rate still says the full 20 s run's end."""
    rows = scenario()
    rows[0].update(report=True, run=10.0 if fail is None else 20.0, fail=fail)
    b = rows[2]
    b["at"] = 3.0  # a has reported for 2.9 s: a rate is known (RATE_AFTER_S)
    assert eta_oracle.forecast_at(rows, b, 2, {"rates"}, rows) == pytest.approx(end)
    b["at"] = 1.2  # too early for a rate: a's end is its limit + grace, as predicted
    assert eta_oracle.forecast_at(rows, b, 2, {"rates"}, rows) == pytest.approx(0.1 + 60.0 + eta_oracle.GRACE)


def test_the_report_has_a_line_per_population(eta_oracle, tmp_path, capsys):
    dump = tmp_path / "d.json"
    dump.write_text(json.dumps(scenario()))
    assert eta_oracle.main([str(dump), "--slots", "2"]) == 0
    out = capsys.readouterr().out
    all_line = next(ln for ln in out.splitlines() if ln.startswith("| all |"))
    cells = [c.strip() for c in all_line.strip("|").split("|")]
    assert cells[1] == "1"  # b waited
    assert cells[-3].startswith("0.1 ") and cells[-1].startswith("0.2 ")  # |10.1 - 10.2|, |10.0 - 10.2|


def test_told_the_arrivals_a_later_higher_priority_job_goes_ahead(eta_oracle):
    """"arrivals known": h (high priority, submitted at 5 s, after b's forecast) is queued at its
    submission, preempts a (within-queue LowerPriority) and runs first; b comes next (a is
    requeued at its eviction, behind b); runtimes stay predicted (limit + grace)."""
    rows = scenario()
    h = row("h", "qa", 5.0, [(5.0, "submitted"), (5.0, "queued"), (10.15, "admitted"), (10.2, "started"),
                             (12.0, "finished")])
    h["prio"] = "high"
    rows.append(h)
    b = rows[2]
    alone = eta_oracle.forecast_at(rows, b, 2, set(), rows)
    assert alone == pytest.approx(0.1 + 60.0 + eta_oracle.GRACE)
    g = eta_oracle.GRACE
    assert eta_oracle.forecast_at(rows, b, 2, {"arrivals"}, rows) == pytest.approx(5.0 + g + 60.0 + g)


def test_several_dumps_are_also_reported_pooled(eta_oracle, tmp_path, capsys):
    for name in ("d1.json", "d2.json"):
        (tmp_path / name).write_text(json.dumps(scenario()))
    assert eta_oracle.main([str(tmp_path / "d1.json"), str(tmp_path / "d2.json"), "--slots", "2"]) == 0
    out = capsys.readouterr().out.split("2 dumps pooled")
    assert len(out) == 2
    pooled_all = next(ln for ln in out[1].splitlines() if ln.startswith("| all |"))
    assert pooled_all.split("|")[2].strip() == "2"  # b of each dump


# --floor: every job's work drawn from eta_replay's generator, given what a forecast sees


def test_a_posterior_draw_agrees_with_the_declared_limit_and_the_work_done(eta_oracle):
    """A draw's run is one the generator could have given that limit (limits are >= 1.1x the
    run), and longer than the work already done; without a limit nothing bounds it; a run
    already longer than the model allows ends soon."""
    import random
    limited, free = row("a", "qa", 0.0, [], limit=30), row("f", "qa", 0.0, [], limit=None)
    for r in (limited, free):
        r["kind"]["typical"] = 20.0  # a limit of 30 is a low one for it (~3x: 60)
    rng = random.Random(1)
    draws = [eta_oracle.posterior_work(limited, 9.0, rng) for _ in range(200)]
    assert all(9.0 < w <= 30 / 1.1 for w in draws)
    assert len({round(w, 6) for w in draws}) > 100  # draws, not one value
    assert sum(eta_oracle.posterior_work(free, 9.0, rng) > 30 / 1.1 for _ in range(200)) > 10
    assert eta_oracle.posterior_work(limited, 1e6, random.Random(1), tries=50) == 1e6 + 0.5


def test_a_floor_start_is_the_first_drawn_end_of_the_slots_it_can_take(eta_oracle):
    """b (qa) waits at 1.2 s for a's slot (qa) or c's (qb, borrowed): its start is the earlier of
    the two drawn ends (both started at 0.1 and have worked 1.1 s; a is drawn first, then c)."""
    import random
    rows = scenario()
    b = rows[2]
    rng = random.Random(7)
    wa, wc = (eta_oracle.posterior_work(r, 1.1, rng) for r in rows[:2])
    got = eta_oracle.floor_at(rows, b, 2, "none", random.Random(7))
    assert got == pytest.approx(0.1 + min(wa, wc))


def test_a_floor_preemption_waits_for_the_victims_grace_period(eta_oracle):
    """h (high priority, qa) preempts a, which stops after eta_replay's grace period (2 s, not
    the 30 s default of a job), and starts then: a and c run for ~100 s, nothing ends sooner."""
    import random
    rows = scenario()[:2]
    for r in rows:
        r["kind"]["typical"], r["limit"] = 100.0, None
    h = row("h", "qa", 5.0, [(5.0, "submitted"), (5.0, "queued")], at=5.1, expected=7.0)
    h["prio"] = "high"
    rows.append(h)
    assert eta_oracle.floor_at(rows, h, 2, "none", random.Random(2)) == pytest.approx(5.1 + eta_oracle.GRACE)


def test_drawn_arrivals_are_the_scenarios_jobs_still_to_come(eta_oracle):
    import random
    rows = [row(f"r{i}", "qa" if i % 2 else "qb", float(i), []) for i in range(12)]
    for r in rows:
        r["scenario"] = "steady"
    got = eta_oracle.drawn_arrivals(rows, 4.5, 2, random.Random(3))
    assert len(got) == 7  # submitted at 5..11 s
    times = [t for t, _ in got]
    assert times == sorted(times) and times[0] > 4.5
    assert len({j.id for _, j in got}) == 7 and all(j.max_runtime_s > 0 for _, j in got)


def test_floor_adds_its_columns_to_the_report(eta_oracle, tmp_path, capsys):
    dump = tmp_path / "d.json"
    dump.write_text(json.dumps(scenario()))
    assert eta_oracle.main([str(dump), "--slots", "2", "--floor"]) == 0
    out = capsys.readouterr().out
    assert "generator known, real arrivals" in out
    all_line = next(ln for ln in out.splitlines() if ln.startswith("| all |"))
    cells = [c.strip() for c in all_line.strip("|").split("|")]
    assert len(cells) == 3 + len(eta_oracle.COLUMNS) + len(eta_oracle.FLOOR)
    assert all(c and c != "nan" for c in cells[-3:])
