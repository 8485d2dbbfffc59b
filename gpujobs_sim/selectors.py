"""Kubernetes label and field selectors: parsing and matching."""
from __future__ import annotations

import re
from typing import Any, Callable

from .resources import ApiError

__all__ = ["LabelSelector", "field_value"]

_SEL_RE = re.compile(r"^\s*(?P<neg>!)?\s*(?P<key>[A-Za-z0-9_./-]+)\s*"
                     r"(?:(?P<op>==|=|!=|\s+in\s+|\s+notin\s+)\s*(?P<val>\(.*\)|[^,]*?))?\s*$")


def _split_top(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return parts


class LabelSelector:
    """Kubernetes label (or field) selector: =, ==, !=, in, notin, key, !key."""

    def __init__(self, text: str | None):
        self.reqs: list[tuple[str, str, set[str]]] = []
        for part in _split_top(text or ""):
            m = _SEL_RE.match(part)
            if not m:
                raise ApiError(400, "BadRequest", f"unable to parse requirement: {part!r}")
            key, op, val = m["key"], (m["op"] or "").strip(), m["val"]
            if m["neg"]:
                self.reqs.append((key, "!", set()))
            elif not op:
                self.reqs.append((key, "exists", set()))
            elif op in ("in", "notin"):
                vals = {v.strip() for v in val.strip()[1:-1].split(",") if v.strip()}
                self.reqs.append((key, op, vals))
            else:
                self.reqs.append((key, "!=" if op == "!=" else "=", {val.strip()}))

    def matches(self, values: Callable[[str], str | None]) -> bool:
        for key, op, vals in self.reqs:
            v = values(key)
            if op == "exists" and v is None or op == "!" and v is not None:
                return False
            if op in ("=", "in") and v not in vals:
                return False
            if op in ("!=", "notin") and v in vals:
                return False
        return True

    def __bool__(self) -> bool:
        return bool(self.reqs)


def field_value(obj: dict, path: str) -> str | None:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return None if cur is None else str(cur)
