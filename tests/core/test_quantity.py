"""gpujobs.quantity: the one Kubernetes quantity grammar (spec, config, admin tables, pod sets)."""
from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpujobs.admin.teams import parse_table
from gpujobs.backends.local.queue_config import admission_config
from gpujobs.config import Settings
from gpujobs.errors import SpecError
from gpujobs.quantity import (BINARY, DECIMAL, MAX, format_quantity, parse_bytes, parse_quantity,
                              scale_quantity)
from gpujobs.spec import JobSpec


def _noop():
    return None


# ------------------------------------------------------------------ the grammar
DIGITS = st.text("0123456789", min_size=1, max_size=6)
NUMBER = st.one_of(DIGITS, st.builds(lambda a, b: f"{a}.{b}", DIGITS, DIGITS),
                   st.builds(lambda a: f"{a}.", DIGITS), st.builds(lambda b: f".{b}", DIGITS))
SUFFIX = st.one_of(st.sampled_from(["", *BINARY, *DECIMAL]),
                   st.builds(lambda e, s, d: f"{e}{s}{d}", st.sampled_from("eE"),
                             st.sampled_from(["", "+", "-"]), st.integers(0, 12)))
QUANTITY = st.builds(lambda sign, n, s: f"{sign}{n}{s}", st.sampled_from(["", "+"]), NUMBER, SUFFIX)


@given(QUANTITY)
def test_every_kubernetes_form_parses_like_the_kubernetes_client(text):
    """Differential: where the value is in range, our Decimal is the client's Decimal."""
    k8s = pytest.importorskip("kubernetes.utils.quantity")
    expected = k8s.parse_quantity(text)
    if expected > MAX:
        with pytest.raises(SpecError, match="larger than Kubernetes can store"):
            parse_quantity(text, "f")
    else:
        assert parse_quantity(text, "f") == expected


@given(QUANTITY)
def test_text_round_trip(text):
    """parse -> format -> parse keeps the amount exactly."""
    try:
        amount = parse_quantity(text, "f")
    except SpecError:
        return  # out of range: covered above
    assert parse_quantity(format_quantity(amount), "f") == amount


@given(st.one_of(st.integers(0, 2**63 - 1),
                 st.decimals(min_value=0, max_value=10**12, places=9, allow_nan=False,
                             allow_infinity=False)))
def test_amount_round_trip(amount):
    text = format_quantity(amount)
    assert parse_quantity(text, "f") == amount
    assert "e" not in text.lower() or text.endswith("E")  # never an exponent form


@pytest.mark.parametrize("amount,text", [
    (2**34, "16Gi"), (1536 * 2**20, "1536Mi"), (10**9, "1G"), (1000, "1k"), (1001, "1001"),
    (0, "0"), (Decimal("0.5"), "500m"), (Decimal("1.5"), "1500m"), (Decimal("1e-9"), "0.000000001"),
    (10**18, "1E"),
])
def test_format_examples(amount, text):
    assert format_quantity(amount) == text


def test_format_with_a_suffix_set():
    assert format_quantity(2**41, ("Gi", "Mi", "Ki")) == "2048Gi"
    assert format_quantity(10**9, ("Gi", "Mi", "Ki")) == "1000000000"  # shorter than 976562500Ki


@pytest.mark.parametrize("text,value", [
    ("16Gi", 16 * 2**30), ("1.5k", 1500), ("500m", Decimal("0.5")), ("1e3", 1000), ("1E3", 1000),
    ("1E", 10**18), (".5Ki", 512), ("5.", 5), ("+2M", 2 * 10**6), ("-0", 0), ("3n", Decimal("3e-9")),
    (8, 8), (0.25, Decimal("0.25")), ("2Ei", 2**61),
])
def test_forms(text, value):
    assert parse_quantity(text, "f") == value


@pytest.mark.parametrize("bad,words", [
    ("-1Gi", "negative"), (-3, "negative"), ("inf", "not a quantity"), ("nan", "not a quantity"),
    (float("inf"), "not a finite amount"), (float("nan"), "not a finite amount"),
    ("1K", "not a quantity"), ("1ki", "not a quantity"), ("Gi", "not a quantity"),
    (" 1Gi", "not a quantity"), ("1_000", "not a quantity"), ("", "not a quantity"),
    ("1e", "not a quantity"), (True, "not a quantity"), (None, "not a quantity"),
    ("16 Gi", "not a quantity"), ("8Ei", "larger than"), ("1e12345678", "exponent out of range"),
])
def test_refused(bad, words):
    with pytest.raises(SpecError, match=words) as err:
        parse_quantity(bad, "resources.memory", example="16Gi")
    assert err.value.field == "resources.memory" and "16Gi" in err.value.fix


@given(st.sampled_from(["16Gi", "1.5Gi", "512Mi", "4", "2.5", "500m", "1T", "8k"]), st.integers(1, 16))
def test_scale_keeps_the_suffix_and_the_amount(text, n):
    out = scale_quantity(text, n)
    assert out.endswith(text.lstrip("0123456789."))
    assert parse_quantity(out, "f") == pytest.approx(parse_quantity(text, "f") * n)


def test_scale_exponent_and_signed_forms():
    assert scale_quantity("1e9", 2) == "2G"
    assert scale_quantity("+1Gi", 4) == "4Gi"


# ------------------------------------------------------------------ every user of it
def test_spec_memory_and_shm_use_the_grammar():
    assert JobSpec(fn=_noop, memory_per_proc="1.5e9", shm_size="512Mi").memory_per_proc == "1.5e9"
    assert JobSpec(fn=_noop, memory_per_proc=2**30).memory_per_proc == 2**30
    with pytest.raises(SpecError) as err:
        JobSpec(fn=_noop, shm_size="lots")
    assert err.value.field == "shm_size" and "8Gi" in err.value.fix
    with pytest.raises(SpecError, match="negative") as err:
        JobSpec(fn=_noop, memory_per_proc="-16Gi")
    assert err.value.field == "memory"


def test_config_queue_memory_uses_the_grammar():
    cfg = {"local": {"queues": [{"name": "a", "gpus": 1, "memory": "1.5E3"}]}}
    assert admission_config(1, Settings.from_dict(cfg))["queues"][0].quota["memory"] == 1500.0
    cfg["local"]["queues"][0]["memory"] = "1K"
    with pytest.raises(SpecError) as err:
        admission_config(1, Settings.from_dict(cfg))
    assert err.value.field == "[[local.queues]] #1 memory"


def test_admin_quota_uses_the_grammar_and_keeps_the_text():
    table = parse_table({"flavors": {"f": {}},
                         "teams": {"a": {"quota": {"f": {"memory": "1e12", "cpu": "500m", "gpu": 2.0}}}}})
    quota = table.teams[0].quota["f"]
    assert (quota["memory"].nominal, quota["cpu"].nominal, quota["nvidia.com/gpu"].nominal) == ("1e12", "500m", 2)
    with pytest.raises(SpecError, match="negative") as err:
        parse_table({"flavors": {"f": {}}, "teams": {"a": {"quota": {"f": {"memory": "-1Gi"}}}}})
    assert err.value.field.endswith("memory")


def test_a_long_written_small_exponent_is_fine():
    assert parse_quantity("1e0000001", "f") == 10


@pytest.mark.parametrize("memory", ["512m", "1.5", "100u"])
def test_memory_is_whole_bytes(memory):
    """'512m' is 0.512 bytes in Kubernetes' grammar: almost always a typo for '512Mi'."""
    with pytest.raises(SpecError) as err:
        JobSpec(fn=_noop, memory_per_proc=memory)
    assert err.value.field == "memory" and "whole number of bytes" in err.value.problem
    if memory == "512m":
        assert "512Mi" in err.value.problem
    assert parse_bytes("1.5Ki", "m") == 1536 and parse_bytes("1e3", "m") == 1000


@pytest.mark.parametrize("text,n,expected", [
    ("333333.3Ki", 3, "999999.9Ki"), ("1234567.5Ki", 1, "1234567.5Ki"),
    ("12345.67Mi", 1, "12345.67Mi"), ("16Gi", 2, "32Gi"), ("1.5Gi", 3, "4.5Gi")])
def test_scaling_is_exact_and_stays_valid(text, n, expected):
    out = scale_quantity(text, n)
    assert out == expected
    assert parse_quantity(out, "f") == parse_quantity(text, "f") * n


def test_config_cpus_and_gpus_use_the_grammar():
    cfg = {"local": {"queues": [{"name": "a", "gpus": "2", "cpus": "500m", "memory": " 1Gi "}]}}
    q = admission_config(2, Settings.from_dict(cfg))["queues"][0]
    assert q.quota["cpu"] == 0.5 and q.quota["gpu"] == 2.0 and q.quota["memory"] == 2.0**30
    cfg["local"]["queues"][0]["cpus"] = "lots"
    with pytest.raises(SpecError) as err:
        admission_config(2, Settings.from_dict(cfg))
    assert err.value.field == "[[local.queues]] #1 cpus"
