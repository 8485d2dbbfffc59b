"""JSON documents: a fast deep copy, RFC 7386 merge patch and RFC 6902 JSON patch."""
from __future__ import annotations

from typing import Any

from .resources import ApiError

__all__ = ["clone", "merge_patch", "json_patch"]


def clone(o: Any) -> Any:
    """Fast deep copy of JSON-like data."""
    if isinstance(o, dict):
        return {k: clone(v) for k, v in o.items()}
    if isinstance(o, list):
        return [clone(v) for v in o]
    return o


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (strategic merge is treated the same)."""
    if not isinstance(patch, dict):
        return clone(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(422, "Invalid", f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str]) -> Any:
    cur = doc
    for p in parts[:-1]:
        cur = cur[int(p)] if isinstance(cur, list) else cur[p]
    return cur


def json_patch(doc: Any, ops: list[dict]) -> Any:
    """RFC 6902 JSON patch: add, remove, replace, move, copy, test."""
    doc = clone(doc)
    try:
        for op in ops:
            kind, parts = op["op"], _pointer(op["path"])
            if kind in ("move", "copy"):
                src = _pointer(op["from"])
                sp = _parent(doc, src)
                value = clone(sp[int(src[-1])] if isinstance(sp, list) else sp[src[-1]])
                if kind == "move":
                    json_patch_remove(sp, src[-1])
                op = {"op": "add", "path": op["path"], "value": value}
                kind = "add"
            if not parts:
                if kind in ("add", "replace"):
                    doc = clone(op["value"])
                    continue
                raise ApiError(422, "Invalid", f"cannot {kind} the whole document")
            parent, last = _parent(doc, parts), parts[-1]
            if kind == "test":
                cur = parent[int(last)] if isinstance(parent, list) else parent[last]
                if cur != op["value"]:
                    raise ApiError(422, "Invalid", f"test operation failed at {op['path']}")
            elif kind == "remove":
                json_patch_remove(parent, last)
            elif kind == "add":
                if isinstance(parent, list):
                    idx = len(parent) if last == "-" else int(last)
                    parent.insert(idx, clone(op["value"]))
                else:
                    parent[last] = clone(op["value"])
            elif kind == "replace":
                if isinstance(parent, list):
                    parent[int(last)] = clone(op["value"])
                else:
                    if last not in parent:
                        raise KeyError(last)
                    parent[last] = clone(op["value"])
            else:
                raise ApiError(422, "Invalid", f"unknown JSON patch op {kind!r}")
    except (KeyError, IndexError, ValueError, TypeError) as exc:
        raise ApiError(422, "Invalid", f"JSON patch failed: {exc!r}") from None
    return doc


def json_patch_remove(parent: Any, last: str) -> None:
    if isinstance(parent, list):
        del parent[int(last)]
    else:
        del parent[last]
