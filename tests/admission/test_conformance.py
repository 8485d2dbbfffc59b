"""Kueue conformance: cases of Kueue's own scheduler tests (unit tests and integration specs),
per supported Kueue version, as data, replayed against gpujobs.admission.Engine at that version.
Data and how they are compared: tests/admission/conformance/README.md."""
from __future__ import annotations


import pytest

from gpujobs.admission import gates as GATES
from tests.admission.conformance import runner

CASES = runner.load()
DIFFERENCES = runner.differences()


def _params():
    for _fname, fixtures, case in CASES:
        cid = runner.case_id(case)
        marks = []
        if "skip" in case:
            marks.append(pytest.mark.skip(reason=case["skip"]))
        elif cid in DIFFERENCES:
            marks.append(pytest.mark.xfail(strict=True, reason=DIFFERENCES[cid]))
        yield pytest.param(fixtures, case, id=cid, marks=marks)


@pytest.mark.parametrize("fixtures,case", list(_params()))
def test_kueue_case(fixtures, case):
    got = runner.run_case(fixtures, case)
    diffs = runner.compare(case, got)
    assert not diffs, f"{case['source']['file']} {case_id_of(case)}:\n  " + "\n  ".join(diffs)


def case_id_of(case):
    return runner.case_id(case)


def test_suite_size_and_sources():
    """Every supported Kueue version has its own replayed cases (at least 80; v0.19.2 and v0.20
    with integration specs), each naming its upstream file, test and case at that version's
    ref; every documented difference names a case that exists and says why."""
    replayed = [c for _, _, c in CASES if "skip" not in c]
    for v in GATES.VERSIONS:
        mine = [c for c in replayed if c["kueue_version"] == v]
        assert len(mine) >= 80, (v, len(mine))
        if v != "v0.17.0":
            assert sum("steps" in c for c in mine) >= 9, v
    for c in replayed:
        src = c["source"]
        assert src["repo"] == "kubernetes-sigs/kueue" and src["ref"] == GATES.REFS[c["kueue_version"]]
        assert src["file"].startswith(("pkg/scheduler/", "test/integration/singlecluster/scheduler/"))
        assert src["test"] and src["case"]
    ids = {runner.case_id(c) for _, _, c in CASES}
    for cid, why in DIFFERENCES.items():
        assert cid in ids and len(why) > 20, cid
