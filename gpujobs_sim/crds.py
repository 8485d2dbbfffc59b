"""Upstream CRD schemas and a jsonschema validator for rendered objects.

The CRD manifests (Kueue, Volcano, MPI Operator, KubeRay, Training Operator v1,
Trainer v2, AppWrapper) live in a data folder found through ``GPUJOBS_CRDS_DIR``,
default ``shared/crds`` beside the repository (``../shared/crds`` from its root).

A CRD's ``openAPIV3Schema`` is OpenAPI 3.0 with Kubernetes extensions. Before
handing it to python-jsonschema (Draft 7) we map:

- ``x-kubernetes-int-or-string: true`` -> ``anyOf: [integer, string]``
- ``nullable: true`` -> the type also admits ``null``
- CEL rules (``x-kubernetes-validations``) are not JSON schema: :func:`cel_errors` evaluates them
  (:mod:`gpujobs_sim.cel`, with cel-python); ``format`` is not asserted (the apiserver's formats
  are not JSON-schema formats).

Compiled validators are cached per (apiVersion, kind).
"""
from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

import yaml

from gpujobs.errors import SpecError

_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_REPO_ROOT = Path(__file__).resolve().parent.parent


def crds_dir() -> Path:
    """``$GPUJOBS_CRDS_DIR``, else ``<repo>/../shared/crds``."""
    env = os.environ.get("GPUJOBS_CRDS_DIR")
    return Path(env).expanduser() if env else (_REPO_ROOT.parent / "shared" / "crds")


def crds_available() -> bool:
    d = crds_dir()
    return d.is_dir() and any(d.glob("*/*.yaml"))


@dataclass(frozen=True)
class CrdVersion:
    group: str
    version: str
    kind: str
    plural: str
    scope: str
    schema: dict


@lru_cache(maxsize=None)
def _index() -> dict[tuple[str, str], CrdVersion]:
    """(apiVersion, kind) -> CrdVersion for every CRD file under crds_dir()."""
    root = crds_dir()
    if not root.is_dir():
        raise SpecError("GPUJOBS_CRDS_DIR", f"CRD folder {root} does not exist",
                        "set GPUJOBS_CRDS_DIR to the folder holding the upstream CRD YAML files")
    out: dict[tuple[str, str], CrdVersion] = {}
    for path in sorted(root.glob("*/*.yaml")):
        for doc in yaml.load_all(path.read_text(), Loader=_FAST_LOADER):
            if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                continue
            spec = doc["spec"]
            for v in spec.get("versions", []):
                schema = (v.get("schema") or {}).get("openAPIV3Schema")
                if not schema:
                    continue
                api_version = f"{spec['group']}/{v['name']}"
                out[(api_version, spec["names"]["kind"])] = CrdVersion(
                    spec["group"], v["name"], spec["names"]["kind"], spec["names"]["plural"],
                    spec.get("scope", "Namespaced"), schema)
    return out


def crd_for(api_version: str, kind: str) -> CrdVersion:
    try:
        return _index()[(api_version, kind)]
    except KeyError:
        raise SpecError("kind", f"no CRD for {kind} ({api_version}) under {crds_dir()}",
                        "add the CRD manifest to the CRD folder") from None


def known_kinds() -> list[tuple[str, str]]:
    return sorted(_index())


def to_jsonschema(node: Any) -> Any:
    """Map a CRD openAPIV3Schema node to plain JSON schema (see module doc)."""
    if isinstance(node, list):
        return [to_jsonschema(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: to_jsonschema(v) for k, v in node.items()
           if k not in ("x-kubernetes-validations", "format")}
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("nullable") and "type" in out:
        t = out["type"]
        out["type"] = (t if isinstance(t, list) else [t]) + ["null"]
    return out


@lru_cache(maxsize=None)
def validator(api_version: str, kind: str):
    """A compiled (cached) jsonschema validator for objects of this kind."""
    import jsonschema

    schema = to_jsonschema(copy.deepcopy(crd_for(api_version, kind).schema))
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    return cls(schema)


def schema_errors(obj: dict) -> list[str]:
    """Every schema violation of ``obj`` as 'path: message' (empty when valid)."""
    v = validator(obj["apiVersion"], obj["kind"])
    return [f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
            for e in sorted(v.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))]


def unknown_fields(obj: dict) -> list[str]:
    """Paths the apiserver would silently prune (fields the CRD schema does not declare)."""
    root = crd_for(obj["apiVersion"], obj["kind"]).schema
    out: list[str] = []

    def walk(value: Any, node: dict, path: str) -> None:
        if node.get("x-kubernetes-preserve-unknown-fields") or not isinstance(node, dict):
            return
        if isinstance(value, dict):
            props = node.get("properties")
            extra = node.get("additionalProperties")
            for k, v in value.items():
                if props is not None and k in props:
                    walk(v, props[k], f"{path}.{k}" if path else k)
                elif isinstance(extra, dict):
                    walk(v, extra, f"{path}.{k}" if path else k)
                elif props is not None or extra is False:
                    out.append(f"{path}.{k}" if path else k)
        elif isinstance(value, list) and isinstance(node.get("items"), dict):
            for i, v in enumerate(value):
                walk(v, node["items"], f"{path}[{i}]")

    walk({k: v for k, v in obj.items() if k != "metadata"}, root, "")
    return out


def prune(obj: dict, schema: dict) -> list[str]:
    """Drop, in place, every field of ``obj`` (metadata aside) that the structural ``schema`` does
    not declare, as the API server does on every write to a custom resource
    (kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/
    #field-pruning: unknown fields are removed unless x-kubernetes-preserve-unknown-fields; an
    x-kubernetes-embedded-resource keeps apiVersion/kind/metadata). Returns the pruned paths."""
    out: list[str] = []

    def walk(value: Any, node: Any, path: str) -> None:
        if not isinstance(node, dict) or node.get("x-kubernetes-preserve-unknown-fields"):
            return
        if isinstance(value, dict):
            props, extra = node.get("properties"), node.get("additionalProperties")
            keep = ("apiVersion", "kind", "metadata") if node.get("x-kubernetes-embedded-resource") else ()
            for k in list(value):
                sub = f"{path}.{k}" if path else k
                if props is not None and k in props:
                    walk(value[k], props[k], sub)
                elif isinstance(extra, dict):
                    walk(value[k], extra, sub)
                elif (props is not None or extra is False) and k not in keep:
                    del value[k]
                    out.append(sub)
        elif isinstance(value, list) and isinstance(node.get("items"), dict):
            for i, v in enumerate(value):
                walk(v, node["items"], f"{path}[{i}]")

    rest = {k: v for k, v in obj.items() if k != "metadata"}
    walk(rest, schema, "")
    for k in [k for k in obj if k != "metadata" and k not in rest]:
        del obj[k]
    return out


def cel_errors(obj: dict, old: dict | None = None) -> list[str]:
    """Every CEL rule (``x-kubernetes-validations``) of the CRD that ``obj`` breaks, as
    'path: Invalid value: "type": message'; ``old`` (the stored object) runs the transition rules."""
    from . import cel
    return [str(v) for v in cel.validate(obj, old)]


def validate(obj: dict) -> None:
    """Raise SpecError listing the violations when ``obj`` does not match its CRD."""
    errs = (schema_errors(obj) + [f"{p}: unknown field (would be pruned)" for p in unknown_fields(obj)]
            + cel_errors(obj))
    if errs:
        raise SpecError(f"{obj['kind']} {obj.get('metadata', {}).get('name', '')}".strip(),
                        "does not match its CRD schema: " + "; ".join(errs[:5]),
                        "this is a gpujobs renderer bug; please report it")


class _NoTimestampLoader(yaml.SafeLoader):
    """SafeLoader that keeps timestamps as strings (the apiserver sees strings)."""


_NoTimestampLoader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:timestamp"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}


def iter_examples(sub: str = "") -> Iterator[tuple[Path, dict]]:
    """(path, object) for every YAML object under crds_dir()/examples/<sub>."""
    for path in sorted((crds_dir() / "examples" / sub).rglob("*.yaml")):
        for doc in yaml.load_all(path.read_text(), Loader=_NoTimestampLoader):
            if isinstance(doc, dict):
                yield path, doc
