"""Optional GPU metrics from NVIDIA dcgm-exporter, through Prometheus or a scraped /metrics page.

Counters (dcgm-exporter ``etc/default-counters.csv``): DCGM_FI_DEV_GPU_UTIL (%),
DCGM_FI_DEV_FB_USED / _FREE / _RESERVED (MiB), DCGM_FI_DEV_POWER_USAGE (W),
DCGM_FI_DEV_GPU_TEMP (°C), and where the exporter profiles (its
``dcp-metrics-included.csv``) DCGM_FI_PROF_SM_ACTIVE (the ratio of cycles an SM has a warp,
0-1; ``sm_util`` in percent, which tells a GPU that computes from one that waits). Labels: ``gpu`` (index), ``UUID``, ``hostname``
(``Hostname`` before dcgm-exporter PR #655), and the pod that holds the GPU as
``pod``/``namespace`` or, behind a ServiceMonitor with honorLabels false,
``exported_pod``/``exported_namespace``: both spellings are accepted, the
``exported_`` ones first. Samples are stale by the exporter's collect interval
plus the scrape interval (often 15-30 s); they say ``source="dcgm"``.
"""
from __future__ import annotations

import json
import math
import re
import urllib.error
import urllib.parse
import urllib.request
from typing import Iterable, Mapping, Sequence

from ..errors import BackendError, BackendUnavailable
from ..status import GpuSample

MIB = 2**20
UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
FB_RESERVED = "DCGM_FI_DEV_FB_RESERVED"
POWER = "DCGM_FI_DEV_POWER_USAGE"
TEMP = "DCGM_FI_DEV_GPU_TEMP"
SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"
COUNTERS = (UTIL, FB_USED, FB_FREE, FB_RESERVED, POWER, TEMP, SM_ACTIVE)

Series = tuple[str, dict[str, str], float, float | None]  # name, labels, value, timestamp (s)


def pod_of(labels: Mapping[str, str], exported: bool = False) -> str:
    """The pod holding the GPU. ``exported``: the scrape renamed the exporter's labels, so a
    plain ``pod`` is the exporter's own pod (a GPU no pod holds then has no ``exported_pod``)."""
    if exported:
        return labels.get("exported_pod", "")
    return labels.get("pod") or labels.get("pod_name") or ""


def namespace_of(labels: Mapping[str, str], exported: bool = False) -> str:
    if exported:
        return labels.get("exported_namespace", "")
    return labels.get("namespace") or labels.get("pod_namespace") or ""


def _is_exported(series: Sequence[Series]) -> bool:
    return any("exported_pod" in labels or "exported_namespace" in labels
               for _, labels, _, _ in series)


def host_of(labels: Mapping[str, str]) -> str:
    return labels.get("hostname") or labels.get("Hostname") or ""


# ------------------------------------------------------------------ parsing
def parse_query_response(doc: dict | str | bytes) -> list[Series]:
    """The series of a Prometheus ``/api/v1/query`` answer (vector; a matrix gives its last point)."""
    answer: dict = json.loads(doc) if isinstance(doc, (str, bytes)) else doc
    if answer.get("status") != "success":
        raise BackendError(f"Prometheus query failed: {answer.get('errorType', '?')}: "
                           f"{answer.get('error', 'no error message')}")
    data = answer.get("data") or {}
    rtype = data.get("resultType")
    out: list[Series] = []
    for item in data.get("result") or ():
        labels = dict(item.get("metric") or {})
        if rtype == "matrix":
            points = item.get("values") or []
            if not points:
                continue
            ts, val = points[-1]
        elif rtype == "vector":
            ts, val = item["value"]
        else:
            raise BackendError(f"Prometheus answered a {rtype!r}, expected a vector")
        out.append((labels.get("__name__", ""), labels, float(val), float(ts)))
    return out


_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+(-?\d+))?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def _labels(text: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    pos = 0
    while pos < len(text):
        m = _LABEL.match(text, pos)
        if not m:
            if text[pos:].strip(" ,"):
                raise ValueError(f"bad label set {{{text}}}")
            break
        labels[m.group(1)] = re.sub(r'\\[\\"n]', lambda e: _UNESCAPE[e.group(0)], m.group(2))
        pos = m.end()
    return labels


def parse_exposition(text: str) -> list[Series]:
    """Samples of a Prometheus text-format page (e.g. dcgm-exporter's :9400/metrics)."""
    out: list[Series] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            raise BackendError(f"metrics page line {n} is not Prometheus text format: {raw!r}")
        name, labels, value, ts = m.groups()
        try:
            out.append((name, _labels(labels or ""), float(value),
                        int(ts) / 1000.0 if ts else None))
        except ValueError as exc:
            raise BackendError(f"metrics page line {n}: {exc}") from None
    return out


def samples_from_series(series: Iterable[Series], ranks: Mapping[str, int] | None = None,
                        namespace: str | None = None, now: float | None = None) -> list[GpuSample]:
    """Join the counters into one GpuSample per (pod, GPU).

    ``ranks`` maps pod name -> rank and keeps only those pods (None: every GPU,
    rank -1 for GPUs no pod holds, rank = position of the pod otherwise).
    """
    series = list(series)
    exported = _is_exported(series)
    groups: dict[tuple[str, str, int], dict] = {}
    for name, labels, value, ts in series:
        if name not in COUNTERS or "gpu" not in labels:
            continue
        pod = pod_of(labels, exported)
        if ranks is not None and pod not in ranks:
            continue
        if namespace is not None and pod and namespace_of(labels, exported) != namespace:
            continue
        key = (host_of(labels), pod, int(labels["gpu"]))
        g = groups.setdefault(key, {"t": None})
        if not math.isnan(value):
            g[name] = value
        if ts is not None:
            g["t"] = ts if g["t"] is None else max(g["t"], ts)
    pods = sorted({p for _, p, _ in groups if p})
    out = []
    for (host, pod, gpu), g in sorted(groups.items()):
        rank = (ranks[pod] if ranks is not None else (pods.index(pod) if pod else -1))
        used = g.get(FB_USED)
        parts = [g.get(FB_USED), g.get(FB_FREE)]
        total = sum(p for p in parts if p is not None) + g.get(FB_RESERVED, 0.0) if None not in parts else None
        t = g["t"] if g["t"] is not None else now
        sm = g.get(SM_ACTIVE)
        out.append(GpuSample(
            time=float(t if t is not None else 0.0), rank=rank, device=gpu, util=g.get(UTIL),
            mem_used=None if used is None else used * MIB,
            mem_total=None if total is None else total * MIB,
            power_w=g.get(POWER), temp_c=g.get(TEMP), source="dcgm", host=host or pod,
            sm_util=None if sm is None else 100.0 * sm))
    return out


# ------------------------------------------------------------------ sources
def _selector(namespace: str | None, pod_regex: str, exported: bool) -> str:
    p = "exported_" if exported else ""
    names = "|".join(COUNTERS)
    parts = [f'__name__=~"{names}"', f'{p}pod=~"{pod_regex}"']
    if namespace:
        parts.append(f'{p}namespace="{namespace}"')
    return "{" + ",".join(parts) + "}"


class PrometheusSource:
    """Reads a job's GPUs from a Prometheus that scrapes dcgm-exporter (one query per refresh)."""

    def __init__(self, url: str, namespace: str | None = None, headers: Mapping[str, str] | None = None,
                 timeout: float = 5.0):
        if not url.startswith(("http://", "https://")):
            from ..errors import SpecError
            raise SpecError("prometheus_url", f"{url!r} is not an http(s) URL",
                            "pass e.g. http://prometheus-k8s.monitoring:9090")
        self.url = url.rstrip("/")
        self.namespace = namespace
        self.headers = dict(headers or {})
        self.timeout = timeout

    def query(self, promql: str) -> list[Series]:
        """GET /api/v1/query; Prometheus errors raise BackendError, no answer BackendUnavailable."""
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
        req = urllib.request.Request(url, headers={"Accept": "application/json", **self.headers})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                body = resp.read()
        except urllib.error.HTTPError as exc:  # 400/422/503 carry a JSON error body
            body = exc.read()
            try:
                return parse_query_response(body)
            except (ValueError, AttributeError):
                raise BackendError(f"Prometheus answered HTTP {exc.code} to {promql!r}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise BackendUnavailable(f"Prometheus at {self.url} cannot be reached: {exc}") from None
        return parse_query_response(body)

    def job_query(self, pods: Iterable[str]) -> str:
        regex = "|".join(re.escape(p) for p in sorted(pods)) or "^$"
        return (f"{_selector(self.namespace, regex, True)} or "
                f"{_selector(self.namespace, regex, False)}")

    def job_samples(self, ranks: Mapping[str, int]) -> list[GpuSample]:
        """The latest samples of the pods in ``ranks`` (pod name -> rank)."""
        return samples_from_series(self.query(self.job_query(ranks)), ranks, self.namespace)


def scrape_samples(text: str, ranks: Mapping[str, int] | None = None,
                   namespace: str | None = None, now: float | None = None) -> list[GpuSample]:
    """Samples from a dcgm-exporter /metrics page (exporters send no timestamps: ``now`` is used)."""
    import time
    return samples_from_series(parse_exposition(text), ranks, namespace,
                               now=time.time() if now is None else now)
