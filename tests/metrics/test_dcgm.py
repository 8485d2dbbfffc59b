"""dcgm-exporter through Prometheus: recorded /api/v1/query answers, a scraped page, real HTTP."""
from __future__ import annotations

import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gpujobs.errors import BackendError, BackendUnavailable, SpecError
from gpujobs.metrics.dcgm import (MIB, PrometheusSource, parse_exposition, parse_query_response,
                                  samples_from_series, scrape_samples)

DATA = Path(__file__).parent / "data"  # captured DCGM exporter pages


JOB = {"exp-1-worker-0": 0, "exp-1-worker-1": 1}


def load(name):
    return json.loads((DATA / name).read_text())


@pytest.mark.parametrize("fixture", ["query_exported_pod_Hostname.json", "query_pod_hostname.json"])
def test_job_gpus_from_either_label_spelling(fixture):
    got = samples_from_series(parse_query_response(load(fixture)), JOB, namespace="team-a")
    assert [(x.host, x.rank, x.device) for x in got] == [
        ("gpu-node-1", 0, 0), ("gpu-node-1", 0, 1), ("gpu-node-2", 1, 0)]
    first = got[0]
    assert first.source == "dcgm" and first.time == pytest.approx(1764431100.123)
    assert (first.util, first.temp_c, first.power_w) == (97.0, 71.0, 612.415)
    assert first.mem_used == 71234 * MIB
    assert first.mem_total == 81559 * MIB  # used + free + reserved


def test_exporter_pod_is_not_mistaken_for_a_job_pod():
    series = parse_query_response(load("query_exported_pod_Hostname.json"))
    everything = samples_from_series(series)
    idle = [x for x in everything if x.host == "gpu-node-1" and x.device == 2]
    assert len(idle) == 1 and idle[0].rank == -1 and idle[0].util == 0.0
    assert len(everything) == 5
    # the exporter's own pod name never counts as the pod holding a GPU
    assert samples_from_series(series, {"nvidia-dcgm-exporter-7xk2p": 0}) == []


def test_namespace_filter_drops_other_teams():
    series = parse_query_response(load("query_pod_hostname.json"))
    got = samples_from_series(series, {"other-job-worker-0": 0}, namespace="team-a")
    assert got == []
    assert len(samples_from_series(series, {"other-job-worker-0": 0}, namespace="team-b")) == 1


def test_prometheus_error_answer_is_a_backend_error():
    with pytest.raises(BackendError, match="bad_data"):
        parse_query_response(load("query_error_bad_data.json"))


def test_matrix_answer_uses_last_point():
    doc = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0", "pod": "p", "hostname": "n"},
         "values": [[10, "5"], [25, "55"]]}]}}
    (x,) = samples_from_series(parse_query_response(json.dumps(doc)), {"p": 3})
    assert (x.rank, x.util, x.time, x.mem_total) == (3, 55.0, 25.0, None)


def test_exposition_page_matches_prometheus_client_parser():
    text = (DATA / "dcgm_exporter_metrics.txt").read_text()
    mine = parse_exposition(text)
    prom = pytest.importorskip("prometheus_client.parser")
    # prometheus_client names counter samples NAME_total; the page (and we) keep NAME
    theirs = [(s.name.removesuffix("_total") if fam.type == "counter" else s.name, s.labels,
               s.value) for fam in prom.text_string_to_metric_families(text) for s in fam.samples]
    assert [(n, labels, v) for n, labels, v, _ in mine] == theirs
    assert len(mine) == 27


def test_scraped_page_to_samples():
    text = (DATA / "dcgm_exporter_metrics.txt").read_text()
    got = scrape_samples(text, {"exp-1-worker-0": 0}, now=42.0)
    assert [(x.device, x.util, x.time, x.host) for x in got] == [
        (0, 97.0, 42.0, "gpu-node-1"), (1, 94.0, 42.0, "gpu-node-1")]


def test_exposition_escapes_timestamps_and_errors():
    text = ('# comment\nup{job="a \\"q\\" b",path="C:\\\\x",msg="l1\\nl2"} 1 1764431100123\n'
            'nan_metric NaN\nbare 3\n')
    (up, nan, bare) = parse_exposition(text)
    assert up[1] == {"job": 'a "q" b', "path": "C:\\x", "msg": "l1\nl2"}
    assert up[3] == pytest.approx(1764431100.123)
    assert nan[2] != nan[2] and bare == ("bare", {}, 3.0, None)
    with pytest.raises(BackendError, match="line 1"):
        parse_exposition("this is not a metric line at all {")


class _Prometheus(BaseHTTPRequestHandler):
    answers: dict = {}
    queries: list = []

    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        query = urllib.parse.parse_qs(url.query).get("query", [""])[0]
        self.queries.append((url.path, query))
        code, body = (200, load("query_exported_pod_Hostname.json"))
        if "broken{" in query:
            code, body = 400, load("query_error_bad_data.json")
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def prometheus():
    _Prometheus.queries = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Prometheus)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    t.join(5)
    assert not t.is_alive()


def test_source_queries_real_http_with_both_label_spellings(prometheus):
    src = PrometheusSource(prometheus + "/", namespace="team-a")
    got = src.job_samples(JOB)
    assert [(x.rank, x.device) for x in got] == [(0, 0), (0, 1), (1, 0)]
    ((path, q),) = _Prometheus.queries
    assert path == "/api/v1/query"
    assert 'exported_pod=~"exp\\-1\\-worker\\-0|exp\\-1\\-worker\\-1"' in q
    assert ' or {' in q and 'namespace="team-a"' in q and "DCGM_FI_DEV_GPU_UTIL" in q


def test_source_errors(prometheus):
    with pytest.raises(BackendError, match="bad_data"):
        PrometheusSource(prometheus).query("broken{")
    dead = PrometheusSource("http://127.0.0.1:9", timeout=1)
    with pytest.raises(BackendUnavailable, match="cannot be reached"):
        dead.query("up")
    with pytest.raises(SpecError, match="prometheus_url"):
        PrometheusSource("prometheus:9090")


def test_sm_active_from_a_profiling_exporter_is_sm_utilisation_in_percent():
    page = ('DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",Hostname="n1",pod="job-worker-0",namespace="a"} 100\n'
            'DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-a",Hostname="n1",pod="job-worker-0",namespace="a"} 0.008\n'
            'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b",Hostname="n1",pod="job-worker-1",namespace="a"} 93\n')
    a, b = samples_from_series(parse_exposition(page), {"job-worker-0": 0, "job-worker-1": 1})
    assert a.util == 100.0 and a.sm_util == pytest.approx(0.8)
    assert b.util == 93.0 and b.sm_util is None  # the default counters have no profiling fields
