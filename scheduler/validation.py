"""Offline checks of compiled objects against the real upstream references, plus Kueue's own cross-field rules.

- custom resources: the CRD's `openAPIV3Schema` for the object's version, made strict (unknown fields rejected
  wherever the schema lists properties and does not preserve unknown fields; int-or-string handled);
- the CRD's CEL rules (`x-kubernetes-validations`, evaluated with cel-python) and the Kueue webhook rules that
  are in neither schema nor CEL (flavor resources in coveredResources order, lendingLimit <= nominalQuota);
- core objects: `kubernetes-validate --strict` for the cluster's Kubernetes version (a test/dev dependency,
  imported only when used).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

OBJECT_META = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", "maxLength": 253},
        "namespace": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63},
        "labels": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 63}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "additionalProperties": False,
}


def strict(schema: dict[str, Any]) -> dict[str, Any]:
    """An OpenAPI v3 structural schema as a strict JSON schema (returns a new dict)."""
    out = copy.deepcopy(schema)
    _strict(out)
    return out


def _strict(node: Any) -> None:
    if isinstance(node, list):
        for item in node:
            _strict(item)
        return
    if not isinstance(node, dict):
        return
    if node.pop("x-kubernetes-int-or-string", False):
        node.pop("type", None)
        node["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.pop("nullable", False) and "type" in node:
        node["type"] = [node["type"], "null"]
    if "(?i)" in node.get("pattern", ""):  # Go allows the flag after "^"; Python wants it first
        node["pattern"] = "(?i)" + node["pattern"].replace("(?i)", "")
    preserve = node.get("x-kubernetes-preserve-unknown-fields", False)
    if "properties" in node and not preserve and "additionalProperties" not in node:
        node["additionalProperties"] = False
    for key, value in node.items():
        if key in ("properties", "patternProperties", "definitions"):
            for child in value.values():
                _strict(child)
        elif key in ("items", "additionalProperties", "not", "allOf", "anyOf", "oneOf"):
            _strict(value)


LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: the GPU operator CRD alone is 150 kB


def load_crd_schemas(
    crd_dir: str | Path, groups: Iterable[str] | None = None
) -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> strict schema for every served version of the CRDs under crd_dir.

    `groups` limits loading to files named `<group>_<plural>.yaml` (the upstream naming) of those API groups.
    """
    return _load(str(Path(crd_dir).resolve()), tuple(sorted(groups)) if groups is not None else None)


@lru_cache(maxsize=8)
def _load(crd_dir: str, groups: tuple[str, ...] | None) -> dict[tuple[str, str], dict[str, Any]]:
    schemas: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(Path(crd_dir).rglob("*.yaml")):
        if groups is not None and path.name.split("_")[0] not in groups:
            continue
        doc = yaml.load(path.read_text(), Loader=LOADER)
        if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
            continue
        group, kind = doc["spec"]["group"], doc["spec"]["names"]["kind"]
        for version in doc["spec"]["versions"]:
            schema = strict(version["schema"]["openAPIV3Schema"])
            schema.setdefault("properties", {})["metadata"] = OBJECT_META
            schema["required"] = sorted({*schema.get("required", []), "apiVersion", "kind", "metadata"})
            schemas.setdefault((f"{group}/{version['name']}", kind), schema)
    return schemas


def describe(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata", {})
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj.get('kind')} {where}{meta.get('name')}"


def crd_problems(obj: dict[str, Any], schemas: dict[tuple[str, str], dict[str, Any]]) -> list[str]:
    schema = schemas.get((obj["apiVersion"], obj["kind"]))
    if schema is None:
        return [f"{describe(obj)}: no CRD serves {obj['apiVersion']} {obj['kind']}"]
    validator = jsonschema.Draft7Validator(schema)
    return [
        f"{describe(obj)}: {'.'.join(str(p) for p in err.absolute_path) or '<root>'}: {err.message}"
        for err in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))
    ]


def _resource_groups_problems(obj: dict[str, Any]) -> list[str]:
    out: list[str] = []
    spec = obj.get("spec", {})
    seen: set[str] = set()
    for g, group in enumerate(spec.get("resourceGroups", [])):
        covered = group["coveredResources"]
        for flavor in group["flavors"]:
            names = [r["name"] for r in flavor["resources"]]
            where = f"{describe(obj)}: resourceGroups[{g}] flavor {flavor['name']}"
            if names != covered:  # CEL counts them; the webhook also wants the same names in the same order
                out.append(f"{where}: resources {names} differ from coveredResources {covered}")
            if flavor["name"] in seen:
                out.append(f"{where}: flavor listed twice")
            seen.add(flavor["name"])
            for res in flavor["resources"]:
                if "lendingLimit" in res and _number(res["lendingLimit"]) > _number(res["nominalQuota"]):
                    out.append(f"{where}: lendingLimit above nominalQuota for {res['name']}")
    return out


def _number(quantity: int | str) -> float:
    text = str(quantity)
    for suffix, factor in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10), ("m", 1e-3)):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)


def kueue_rule_problems(obj: dict[str, Any]) -> list[str]:
    """Rules Kueue's admission webhook enforces on ClusterQueues and Cohorts (not in the CRD at all)."""
    return _resource_groups_problems(obj) if obj["kind"] in ("ClusterQueue", "Cohort") else []


@lru_cache(maxsize=1)
def _cel_environment() -> Any:
    import celpy  # cel-python: a test/dev dependency, imported only when CEL rules are checked

    return celpy.Environment()


def _find(text: Any, pattern: Any) -> Any:
    """`<string>.find(<regex>)`: the first match, or "" (Kubernetes CEL regex library, from cel-go)."""
    import re

    from celpy import celtypes

    match = re.search(str(pattern), str(text))
    return celtypes.StringType(match.group(0) if match else "")


def _split(text: Any, separator: Any) -> Any:
    """`<string>.split(<separator>)` (cel-go strings extension, enabled in the Kubernetes API server)."""
    from celpy import celtypes

    return celtypes.ListType([celtypes.StringType(part) for part in str(text).split(str(separator))])


# Functions the API server's CEL has and cel-python lacks (Karpenter's CRDs use them).
KUBERNETES_CEL_FUNCTIONS = {"find": _find, "split": _split}


@lru_cache(maxsize=256)
def _cel_program(rule: str) -> Any:
    env = _cel_environment()
    return env.program(env.compile(rule), functions=KUBERNETES_CEL_FUNCTIONS)


def cel_problems(obj: dict[str, Any], schemas: dict[tuple[str, str], dict[str, Any]]) -> list[str]:
    """Evaluate the CRD's `x-kubernetes-validations` CEL rules at every node of the object.

    Transition rules (those reading `oldSelf`) only apply to updates and are skipped: a rendered object is
    always a create.
    """
    import celpy

    schema = schemas.get((obj["apiVersion"], obj["kind"]))
    out: list[str] = []

    def walk(node: dict[str, Any], value: Any, path: str) -> None:
        for rule in node.get("x-kubernetes-validations", []):
            if "oldSelf" in rule["rule"]:
                continue
            try:  # as in the API server, a rule that fails to evaluate (e.g. a missing key) rejects the object
                result = _cel_program(rule["rule"]).evaluate({"self": celpy.json_to_cel(value)})
            except celpy.CELEvalError:
                result = None
            if not isinstance(result, bool | celpy.celtypes.BoolType) or not result:
                out.append(f"{describe(obj)}: {path or '<root>'}: {rule.get('message', rule['rule'])}")
        if isinstance(value, dict):
            props = node.get("properties", {})
            extra = node.get("additionalProperties")
            for key, child in value.items():
                sub = props.get(key, extra if isinstance(extra, dict) else None)
                if sub is not None:
                    walk(sub, child, f"{path}.{key}" if path else key)
        elif isinstance(value, list) and isinstance(node.get("items"), dict):
            for i, child in enumerate(value):
                walk(node["items"], child, f"{path}[{i}]")

    if schema is not None:
        walk(schema, obj, "")
    return out


@lru_cache(maxsize=64)
def _core_validator(api_version: str, kind: str, kubernetes_version: str) -> Any:
    """kubernetes-validate's strict schema for this kind and version, built once (it re-reads JSON per call)."""
    import re

    from kubernetes_validate import utils
    from referencing import Registry, Resource

    minor = utils.major_minor(kubernetes_version.removeprefix("v"))
    if utils.Version(minor) > utils.Version(utils.latest_version()):
        raise utils.VersionNotSupportedError(version=minor)
    version = [
        v for v in utils.all_versions() if utils.Version(utils.major_minor(v)) <= utils.Version(minor)
    ][-1]
    schema_dir = f"kubernetes-json-schema/v{version}-local-strict"
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    try:
        schema = utils.schema_contents(f"{schema_dir}/{kind.lower()}-{group_version}.json", minor)
    except FileNotFoundError:
        raise utils.SchemaNotFoundError(version=minor, kind=kind, api_version=api_version) from None
    definitions = utils.schema_contents(f"{schema_dir}/_definitions.json", minor)
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


def core_problems(obj: dict[str, Any], kubernetes_version: str) -> list[str]:
    """The same check as `kubernetes-validate --strict -k <version>`, listing every error."""
    validator = _core_validator(obj["apiVersion"], obj["kind"], kubernetes_version)
    return [
        f"{describe(obj)}: {'.'.join(str(p) for p in err.absolute_path) or '<root>'}: {err.message}"
        for err in validator.iter_errors(obj)
    ]


def validate_objects(
    objects: Iterable[dict[str, Any]], crd_dir: str | Path, kubernetes_version: str
) -> list[str]:
    """Every problem of every object: CRD schema + Kueue rules for custom resources, strict core schemas else."""
    objects = list(objects)
    groups = {obj["apiVersion"].split("/")[0] for obj in objects if "/" in obj["apiVersion"]}
    schemas = load_crd_schemas(crd_dir, groups)
    problems: list[str] = []
    for obj in objects:
        if (obj["apiVersion"], obj["kind"]) in schemas or (
            "." in obj["apiVersion"].split("/")[0]
            and not (obj["apiVersion"].split("/")[0].endswith(".k8s.io"))
        ):
            problems += crd_problems(obj, schemas) + cel_problems(obj, schemas) + kueue_rule_problems(obj)
        else:
            problems += core_problems(obj, kubernetes_version)
    return problems
