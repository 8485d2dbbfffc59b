"""The CRDs' CEL validation rules (``x-kubernetes-validations``), evaluated as a Kubernetes API
server does, with cel-python (``celpy``, a maintained CEL implementation from PyPI).

What the API server does, and this module with it (kubernetes.io/docs/reference/using-api/cel/
and /docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#validation-rules):

- a rule sits on a schema node; ``self`` is the value at that node, and the rule runs only
  where that value is present; at the root ``self`` is the object, of whose metadata only
  ``name`` and ``generateName`` are visible;
- a *transition rule* (one that uses ``oldSelf``) runs only on update, and only where the old
  value can be correlated with the new: the same property of an object, the same key of a map
  (additionalProperties), the item with the same keys of a ``x-kubernetes-list-type: map``
  list; never under atomic or set lists (``optionalOldSelf`` is not used by these CRDs);
- schema ``default``s are applied before validation (the API server defaults, then validates);
- a rule that is false fails with its ``message`` (or ``failed rule: <rule>``) at its field path
  (``fieldPath`` when given), reason ``FieldValueInvalid`` unless ``reason`` says otherwise; a rule
  that cannot be evaluated fails too;
- the Kubernetes CEL libraries add functions to standard CEL; those the CRDs here use are in
  :data:`K8S_FUNCTIONS` (data: name -> implementation and the upstream library it comes from), and
  :func:`functions_used` lets a test check that every function a rule calls is known.
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable

import celpy
from celpy import celtypes

from .rules import QuantityError, quantity


# ------------------------------------------------------------ Kubernetes CEL extension functions
def _str(fn: Callable[[str], Any]) -> Callable[..., Any]:
    return lambda s, *a: fn(str(s), *a)


def _is_quantity(s: Any) -> celtypes.BoolType:
    try:
        quantity(str(s))
        return celtypes.BoolType(True)
    except QuantityError:
        return celtypes.BoolType(False)


K8S_FUNCTIONS: dict[str, tuple[Callable[..., Any], str]] = {
    # cel-go ext.Strings (enabled by the API server, k8s.io/apiserver/pkg/cel/environment/base.go)
    "lowerAscii": (_str(lambda s: celtypes.StringType(s.lower())), "cel-go ext/strings.go lowerAscii"),
    "upperAscii": (_str(lambda s: celtypes.StringType(s.upper())), "cel-go ext/strings.go upperAscii"),
    "trim": (_str(lambda s: celtypes.StringType(s.strip())), "cel-go ext/strings.go trim"),
    "split": (lambda s, sep: celtypes.ListType([celtypes.StringType(x) for x in str(s).split(str(sep))]),
              "cel-go ext/strings.go split"),
    "join": (lambda lst, sep="": celtypes.StringType(str(sep).join(str(x) for x in lst)),
             "cel-go ext/strings.go join"),
    "indexOf": (lambda s, sub: celtypes.IntType(str(s).find(str(sub))), "cel-go ext/strings.go indexOf"),
    # k8s.io/apiserver/pkg/cel/library/quantity.go: isQuantity(string) bool
    "isQuantity": (_is_quantity, "k8s.io/apiserver/pkg/cel/library/quantity.go isQuantity"),
}
# standard CEL, as cel-python implements them: "Functions" and macros of
# https://github.com/google/cel-spec/blob/master/doc/langdef.md
STANDARD_FUNCTIONS = frozenset({
    "has", "size", "matches", "exists", "all", "exists_one", "filter", "map", "startsWith", "endsWith",
    "contains", "int", "uint", "double", "string", "bytes", "bool", "type", "duration", "timestamp", "dyn",
})
_CALL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")


def functions_used(rule: str) -> set[str]:
    """The names of the functions and macros a rule calls (string literals left out)."""
    text = re.sub(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"", "''", rule)
    return set(_CALL.findall(text))


# ------------------------------------------------------------ compiled schema
_ENV = celpy.Environment()


@dataclass
class Rule:
    rule: str
    message: str
    reason: str
    field_path: str
    transition: bool
    program: Any


@dataclass
class Node:
    rules: list[Rule] = field(default_factory=list)
    props: dict[str, "Node"] = field(default_factory=dict)
    items: "Node | None" = None
    additional: "Node | None" = None
    list_type: str = "atomic"
    list_keys: tuple[str, ...] = ()


@lru_cache(maxsize=None)
def _program(rule: str) -> Any:
    return _ENV.program(_ENV.compile(rule), functions={k: v[0] for k, v in K8S_FUNCTIONS.items()})


def compile_schema(schema: dict) -> Node | None:
    """The schema's rule tree: only the nodes that hold rules or lead to one (None when none)."""
    if not isinstance(schema, dict):
        return None
    node = Node(list_type=schema.get("x-kubernetes-list-type", "atomic"),
                list_keys=tuple(schema.get("x-kubernetes-list-map-keys") or ()))
    for r in schema.get("x-kubernetes-validations") or []:
        text = r["rule"]
        node.rules.append(Rule(text, r.get("message") or f"failed rule: {text}", r.get("reason", "FieldValueInvalid"),
                               r.get("fieldPath", ""), "oldSelf" in re.sub(r"'[^']*'", "", text), _program(text)))
    for name, sub in (schema.get("properties") or {}).items():
        child = compile_schema(sub)
        if child is not None:
            node.props[name] = child
    node.items = compile_schema(schema.get("items")) if isinstance(schema.get("items"), dict) else None
    if isinstance(schema.get("additionalProperties"), dict):
        node.additional = compile_schema(schema["additionalProperties"])
    if node.rules or node.props or node.items or node.additional:
        return node
    return None


@lru_cache(maxsize=None)
def rules_for(api_version: str, kind: str) -> Node | None:
    """The compiled rule tree of a CRD version from the CRD folder (None: no rules or no CRD)."""
    from . import crds
    try:
        schema = crds.crd_for(api_version, kind).schema
    except Exception:  # noqa: BLE001 - no CRD folder, or not a CRD kind: nothing to enforce
        return None
    return compile_schema(schema)


@lru_cache(maxsize=None)
def _schema_of(api_version: str, kind: str) -> dict | None:
    from . import crds
    try:
        return crds.crd_for(api_version, kind).schema
    except Exception:  # noqa: BLE001
        return None


def defaulted(schema: dict, value: Any) -> Any:
    """``value`` with the schema's ``default``s filled in where a property is absent, recursively
    (the defaults themselves defaulted too), as the API server defaults before it validates
    (custom-resource-definitions/#defaulting)."""
    if not isinstance(schema, dict):
        return value
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        out = dict(value)
        for name, sub in props.items():
            if name not in out and isinstance(sub, dict) and "default" in sub:
                out[name] = copy.deepcopy(sub["default"])
            if name in out and out[name] is not None:
                out[name] = defaulted(sub, out[name])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for k in [k for k in out if k not in props]:
                out[k] = defaulted(extra, out[k])
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [defaulted(schema["items"], v) for v in value]
    return value


def count_rules(node: Node | None) -> int:
    if node is None:
        return 0
    return (len(node.rules) + sum(count_rules(c) for c in node.props.values()) + count_rules(node.items)
            + count_rules(node.additional))


# ------------------------------------------------------------ evaluation
@dataclass(frozen=True)
class Violation:
    field: str
    message: str
    reason: str
    rule: str

    def __str__(self) -> str:
        return f"{self.field or '<nil>'}: Invalid value: {self.message}"


def _root_view(obj: dict) -> dict:
    out = {k: v for k, v in obj.items() if k != "metadata"}
    md = obj.get("metadata") or {}
    out["metadata"] = {k: md[k] for k in ("name", "generateName") if k in md}
    return out


def _type_name(v: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer",
            float: "number"}.get(type(v), "null")


def validate(obj: dict, old: dict | None = None) -> list[Violation]:
    """Every CEL rule of the object's CRD that ``obj`` breaks (``old``: the stored object on update,
    for transition rules). Empty when the kind has no CRD rules."""
    api, kind = obj.get("apiVersion", ""), obj.get("kind", "")
    root = rules_for(api, kind)
    if root is None:
        return []
    schema = _schema_of(api, kind) or {}
    out: list[Violation] = []
    _walk(root, defaulted(schema, _root_view(obj)), defaulted(schema, _root_view(old)) if old is not None else None,
          old is not None, "", out)
    return out


def _walk(node: Node, value: Any, old: Any, has_old: bool, path: str, out: list[Violation]) -> None:
    cel_self = cel_old = None  # converted once per node, for all its rules
    for r in node.rules:
        if r.transition and not has_old:
            continue
        if cel_self is None:
            cel_self = celpy.json_to_cel(value)
        act = {"self": cel_self}
        if r.transition:
            if cel_old is None:
                cel_old = celpy.json_to_cel(old)
            act["oldSelf"] = cel_old
        where = path + r.field_path  # fieldPath is a JSONPath relative to the node (".spec.x")
        try:
            ok = r.program.evaluate(act)
        except celpy.CELEvalError as exc:
            out.append(Violation(where.lstrip("."), f'"{_type_name(value)}": {r.message} (rule evaluation error: '
                                 f'{exc.args[0] if exc.args else exc})', r.reason, r.rule))
            continue
        if not (isinstance(ok, celtypes.BoolType) and bool(ok)):
            out.append(Violation(where.lstrip("."), f'"{_type_name(value)}": {r.message}', r.reason, r.rule))
    if isinstance(value, dict):
        for name, child in node.props.items():
            if name in value and value[name] is not None:
                o_ok = has_old and isinstance(old, dict) and name in old and old[name] is not None
                _walk(child, value[name], old.get(name) if o_ok else None, o_ok, f"{path}.{name}", out)
        if node.additional is not None:
            for k, v in value.items():
                o_ok = has_old and isinstance(old, dict) and k in old
                _walk(node.additional, v, old.get(k) if o_ok else None, o_ok, f"{path}[{k}]", out)
    elif isinstance(value, list) and node.items is not None:
        for i, v in enumerate(value):
            prev, o_ok = None, False
            if has_old and isinstance(old, list) and node.list_type == "map" and node.list_keys and isinstance(v, dict):
                key = tuple(v.get(k) for k in node.list_keys)
                prev = next((o for o in old if isinstance(o, dict) and tuple(o.get(k) for k in node.list_keys) == key),
                            None)
                o_ok = prev is not None
            _walk(node.items, v, prev, o_ok, f"{path}[{i}]", out)


def invalid_message(obj: dict, violations: list[Violation], group: str) -> str:
    """The API server's 422 text: ``TrainJob.trainer.kubeflow.org "x" is invalid: <field>: ...``."""
    name = (obj.get("metadata") or {}).get("name") or (obj.get("metadata") or {}).get("generateName", "")
    errs = [str(v) for v in violations]
    body = errs[0] if len(errs) == 1 else "[" + ", ".join(errs) + "]"
    return f'{obj.get("kind")}.{group} "{name}" is invalid: {body}'
