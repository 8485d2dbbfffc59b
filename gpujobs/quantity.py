"""Kubernetes resource quantities: the one parser and formatter every gpujobs input uses.

The grammar is Kubernetes' own (k8s.io/apimachinery ``resource.Quantity``)::

    quantity ::= [+-] number [suffix]
    number   ::= digits | digits "." | digits "." digits | "." digits
    suffix   ::= Ki | Mi | Gi | Ti | Pi | Ei          (powers of 1024)
               | n | u | m | k | M | G | T | P | E  (powers of 1000; m = thousandths)
               | (e | E) [+-] digits                (decimal exponent: 1e9, 5E-3)

gpujobs refuses what no resource amount can be: negative amounts, and amounts above
Kubernetes' int64 limit (the apiserver would silently cap them). ``inf`` and ``nan`` are not
in the grammar. The values are exact :class:`~decimal.Decimal` s, like the kubernetes
client's ``parse_quantity`` (which is stricter here: it also takes ``1K``, ``-1``, ``NaN``).
This module needs no kubernetes package, so the local backend works without it.
"""
from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Any, Sequence

from .errors import SpecError

BINARY: dict[str, int] = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
DECIMAL: dict[str, Decimal | int] = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "k": 10**3,
           "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
SUFFIXES = (*BINARY, "k", "M", "G", "T", "P", "E")
"""What :func:`format_quantity` may write (binary first: memory reads best in Gi/Mi)."""
MAX = Decimal(2**63 - 1)
"""The largest amount Kubernetes stores (int64); larger ones are refused, not capped."""

_RE = re.compile(r"(?P<sign>[+-]?)(?P<num>[0-9]+\.?[0-9]*|\.[0-9]+)"
                 r"(?P<suffix>[KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?")
_UNITS_HELP = "Ki Mi Gi Ti Pi Ei are powers of 1024, k M G T P E powers of 1000, m is 1/1000"


def parse_quantity(value: Any, field: str, *, example: str = "16Gi") -> Decimal:
    """``"16Gi"`` -> ``Decimal(17179869184)``; ints and finite floats pass through.

    A SpecError naming ``field`` for anything else, with ``example`` in the fix.
    """
    fix = f"write a number with an optional unit, e.g. {example} ({_UNITS_HELP})"
    if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value) or \
                isinstance(value, Decimal) and not value.is_finite():
            raise SpecError(field, f"{value!r} is not a finite amount", fix)
        amount = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    else:
        m = _RE.fullmatch(value) if isinstance(value, str) else None
        if m is None:
            raise SpecError(field, f"{value!r} is not a quantity", fix)
        suffix = m["suffix"] or ""
        if _is_exponent(suffix):
            if abs(int(suffix[1:])) > 10**6:  # beyond any amount (and Decimal's range)
                raise SpecError(field, f"{value!r} has an exponent out of range", fix)
            amount = Decimal(m["num"] + suffix)  # exact: no context rounding
        else:
            amount = Decimal(m["num"]) * (BINARY.get(suffix) or DECIMAL.get(suffix) or 1)
        if m["sign"] == "-":
            amount = -amount
    if amount < 0:
        raise SpecError(field, f"{value!r} is negative", f"an amount is 0 or more, e.g. {example}")
    if amount > MAX:
        raise SpecError(field, f"{value!r} is larger than Kubernetes can store (2^63 - 1)",
                        f"write a realistic amount, e.g. {example}")
    return amount.copy_abs()  # "-0" is 0


def _is_exponent(suffix: str | None) -> bool:
    return suffix is not None and len(suffix) > 1 and suffix[0] in "eE" and suffix[1] != "i"


def format_quantity(amount: Decimal | int, suffixes: Sequence[str] = SUFFIXES) -> str:
    """The shortest exact quantity text for ``amount`` using one of ``suffixes`` (or none).

    ``format_quantity(2**34) == "16Gi"``, ``format_quantity(10**9) == "1G"``,
    ``format_quantity(1536 * 2**20) == "1536Mi"``; on a tie the earlier suffix wins. A fraction
    of up to three decimals is written in milli (``"1500m"``), a finer one as a plain decimal.
    ``parse_quantity`` of the result gives ``amount`` back exactly.
    """
    amount = Decimal(amount)
    if not amount.is_finite() or amount < 0:
        raise SpecError("quantity", f"{amount} cannot be written as a quantity",
                        "only amounts of 0 or more have a quantity")
    if amount == amount.to_integral_value():
        whole = int(amount)
        texts = [f"{whole // int(f)}{s}" for s in suffixes
                 if (f := BINARY.get(s) or DECIMAL[s]) >= 1 and whole and whole % int(f) == 0]
        return min(texts + [str(whole)], key=len)
    milli = amount * 1000
    if milli == milli.to_integral_value():
        return f"{int(milli)}m"
    return format(amount.normalize(), "f")


def scale_quantity(text: str, n: float, field: str = "quantity") -> str:
    """``scale_quantity("16Gi", 2) == "32Gi"``: the amount times ``n``, keeping the suffix.

    Plain and suffixed forms keep their suffix (``"1.5Gi" * 3 -> "4.5Gi"``); exponent and
    signed forms are scaled exactly and written with :func:`format_quantity`.
    """
    amount = parse_quantity(text, field)
    m = _RE.fullmatch(str(text))
    factor = Decimal(repr(float(n)))
    if m is None or m["sign"] or _is_exponent(m["suffix"]):
        return format_quantity(amount * factor)
    value = (Decimal(m["num"]) * factor).normalize()  # exact: no float rounding, no "1e+06"
    return format(value, "f") + (m["suffix"] or "")


def parse_bytes(value: Any, field: str, *, example: str = "16Gi") -> Decimal:
    """A memory size: a quantity of whole bytes. ``"512m"`` (0.512 bytes in Kubernetes' grammar,
    usually a typo for ``"512Mi"``) is refused with that hint."""
    amount = parse_quantity(value, field, example=example)
    if amount != amount.to_integral_value():
        hint = f"; did you mean {str(value)[:-1]}Mi?" if str(value).endswith("m") else ""
        raise SpecError(field, f"{value!r} is not a whole number of bytes (in Kubernetes, 'm' "
                        f"means 1/1000){hint}", f"write bytes with a unit, e.g. {example}")
    return amount
