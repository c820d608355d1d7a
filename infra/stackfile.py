"""Reading a stack: the flat `config:` mapping of a `Pulumi.<stack>.yaml` file -> a checked `ClusterSpec`.

Kept apart from `infra.spec` so the models import nothing of their rules: this module is the one place that
joins the two (models, then `infra.rules.check_spec`), and nothing it imports imports it back.
"""

from __future__ import annotations

import copy
import difflib
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from infra.errors import ConfigError
from infra.rules import check_spec
from infra.spec import (
    DNS_LABEL,
    HOST_NAME,
    NAMESPACE,
    SLURM_TIME,
    AwsRole,
    Cluster,
    ClusterSpec,
    NodePool,
    Scheduling,
    Slurm,
    SystemPool,
    Team,
)
from infra.versions import Versions

SECTIONS: dict[str, tuple[str, Any]] = {
    # config key -> (ClusterSpec field, type)
    "aws:region": ("region", str),
    "aws:profile": ("aws_profile", str),
    "aws:assumeRoles": ("aws_assume_roles", list[AwsRole]),
    f"{NAMESPACE}:platform": ("platform", Literal["aws", "existing"]),
    f"{NAMESPACE}:cluster": ("cluster", Cluster),
    f"{NAMESPACE}:systemPool": ("system_pool", SystemPool),
    f"{NAMESPACE}:nodePools": ("node_pools", Annotated[list[NodePool], Field(min_length=1)]),
    f"{NAMESPACE}:teams": ("teams", list[Team]),
    f"{NAMESPACE}:versions": ("versions", Versions),
    f"{NAMESPACE}:scheduling": ("scheduling", Scheduling),
    f"{NAMESPACE}:slurm": ("slurm", Slurm),
}
REQUIRED = (f"{NAMESPACE}:platform", f"{NAMESPACE}:cluster", f"{NAMESPACE}:nodePools")
_ADAPTERS = {key: TypeAdapter(tp) for key, (_, tp) in SECTIONS.items()}


def key_path(root: str, loc: tuple[int | str, ...]) -> str:
    """`('nodePools', 1, 'maxSize')` under `gpufleet:nodePools` -> `gpufleet:nodePools[1].maxSize`."""
    out = root
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part not in ("function-after[_default_namespace()]",) and not part.startswith("function-"):
            out += f".{part}"
    return out


# What the spec's patterns accept, in words: an error names what a value may be, not the raw regex.
_PATTERNS = {
    DNS_LABEL: "lowercase letters, digits and '-', starting and ending with a letter or digit (a DNS label)",
    r"^[1-9]\d*(s|m|h|d)$": "a whole number and a unit s, m, h or d, e.g. 30m or 2h",
    r"^\d+(h|d|w|y)$": "a whole number and a unit h, d, w or y, e.g. 15d",
    r"^[1-9]\d*(Gi|Ti)$": "a whole number of Gi or Ti, e.g. 50Gi",
    r"^[1-9]\d*(MB|GB|TB)$": "a whole number of MB, GB or TB, e.g. 50GB",
    r"^sg-[0-9a-f]{8,17}$": "a security group ID, sg- and 8 to 17 hex digits",
    r"^cr-[0-9a-f]{8,17}$": "a capacity reservation ID, cr- and 8 to 17 hex digits",
    r"^arn:aws[a-z-]*:iam::\d{12}:role/.+$": "an IAM role ARN, arn:aws:iam::<12-digit account>:role/<name>",
    r"^(([0-9]+(s|m|h))+|Never)$": "a duration such as 720h or 30m, or Never",
    SLURM_TIME: "a Slurm time limit: minutes, days-hours:minutes:seconds or UNLIMITED, e.g. 7-00:00:00 for 7 "
    "days or 90 for 90 minutes",
    HOST_NAME: "a host name: letters, digits, '-' and '.'",
}
# What a key holds, in words and with an example, for a value of the wrong shape: "a valid dictionary or
# instance of Taint" names a Python class, not what to write.
_SHAPES = {
    "taints": "a list of {key, value, effect} mappings, e.g. [{key: dedicated, value: llm, effect: NoSchedule}] "
    "(not kubectl's key=value:Effect)",
    "quotas": "GPUs per pool name, e.g. {h100: 16, l40s: 4}",
    "cpuQuota": "a whole number of cores, e.g. 32",
    "memoryQuotaGiB": "a whole number of GiB, e.g. 128",
    "hosts": "a list of host names, e.g. [gpu-h100-01, gpu-h100-02]",
    "groups": "a list of group names, e.g. [vision-team]",
    "labels": "label: value pairs, e.g. {team: vision}",
}
_SHAPE_ERRORS = ("model_type", "dict_type", "list_type", "int_parsing", "int_type", "string_type")


def _describe(err: Any, root: str = "") -> str:
    kind, msg = err["type"], err["msg"]
    if kind == "extra_forbidden":
        known = _keys_at(SECTIONS[root][1], err["loc"][:-1]) if root in SECTIONS else []
        close = difflib.get_close_matches(str(err["loc"][-1]), known, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return f"unknown key ({hint}docs/spec.md lists every key)"
    if kind == "missing":
        return "required key is missing"
    if kind == "value_error":
        return msg.removeprefix("Value error, ")
    got = err.get("input")
    shape = _shape(err["loc"])
    if kind in _SHAPE_ERRORS and shape and not (kind == "string_type" and isinstance(got, int | float)):
        return f"expected {shape} (got {got!r})"
    if kind == "model_type" and root in SECTIONS and (keys := _keys_at(SECTIONS[root][1], err["loc"])):
        return f"expected a mapping with the keys {', '.join(keys)} (got {got!r})"
    if kind == "string_pattern_mismatch" and err.get("ctx", {}).get("pattern") in _PATTERNS:
        return f"expected {_PATTERNS[err['ctx']['pattern']]} (got {got!r})"
    if kind == "string_type" and isinstance(got, int | float) and not isinstance(got, bool):
        return (
            f"expected a string, got the number {got!r}: YAML reads an unquoted 1.30 as the number 1.3; "
            'put the value in quotes as meant, e.g. "1.30"'
        )
    return f"{msg} (got {got!r})" if not isinstance(got, dict | list) else msg


def _shape(loc: tuple[int | str, ...]) -> str:
    """The words for the key `loc` ends at, or for an item of its list (`taints[0]`); "" for any other key."""
    names = [part for part in loc if isinstance(part, str)]
    if not names or names[-1] not in _SHAPES:
        return ""
    after = loc[len(loc) - loc[::-1].index(names[-1]) :]
    return _SHAPES[names[-1]] if all(isinstance(part, int) for part in after) else ""


def _keys_at(tp: Any, loc: tuple[int | str, ...]) -> list[str]:
    """The keys a stack file may give at `loc` below a section of type `tp` (for "did you mean")."""
    for part in loc:
        tp = _unwrap(tp)
        args = typing.get_args(tp)
        if isinstance(part, int) and typing.get_origin(tp) in (list, tuple) and args:
            tp = args[0]
        elif isinstance(tp, type) and issubclass(tp, BaseModel):
            fields = {f.alias or name: f for name, f in tp.model_fields.items()}
            if part not in fields:
                return []
            tp = fields[str(part)].annotation
        elif typing.get_origin(tp) is dict and len(args) == 2:
            tp = args[1]
        else:
            return []
    tp = _unwrap(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [f.alias or name for name, f in tp.model_fields.items()]
    return []


def _unwrap(tp: Any) -> Any:
    """Annotated[X, ...] -> X; X | None -> X (the one member that is not None)."""
    while True:
        if typing.get_origin(tp) is Annotated:
            tp = typing.get_args(tp)[0]
            continue
        members = [a for a in typing.get_args(tp) if a is not type(None)]
        if typing.get_origin(tp) in (typing.Union, types.UnionType) and len(members) == 1:
            tp = members[0]
            continue
        return tp


def parse_config(config: dict[str, Any], stack: str) -> ClusterSpec:
    """Validate a stack's flat `config:` mapping; raise ConfigError listing every problem with its key path."""
    problems: list[str] = []
    values: dict[str, Any] = {"stack": stack}
    for key in config:
        if key.startswith(f"{NAMESPACE}:") and key not in SECTIONS:
            accepted = [k for k in SECTIONS if k.startswith(NAMESPACE)]
            close = difflib.get_close_matches(key, accepted, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            problems.append(f"{key}: unknown key; {hint}accepted: {', '.join(accepted)}")
    if "aws:region" not in config:
        for key in config:
            if key.startswith("aws:") and difflib.get_close_matches(key, ["aws:region"], cutoff=0.8):
                problems.append(f"{key}: not an AWS provider setting; did you mean 'aws:region'?")
    for key in REQUIRED:
        if key not in config:
            problems.append(f"{key}: required key is missing")
    errors = _validate(config, values)
    for key, found in errors.items():
        problems += [f"{key_path(key, e['loc'])}: {_describe(e, key)}" for e in found]
    if problems:
        raise ConfigError(problems + _rules_despite(config, stack, errors))
    spec = ClusterSpec.model_validate(values)
    return check_spec(spec)


def _validate(config: dict[str, Any], values: dict[str, Any]) -> dict[str, list[Any]]:
    """Each section of `config` validated into `values`; the errors of those that fail, by section."""
    errors: dict[str, list[Any]] = {}
    for key, (field, _) in SECTIONS.items():
        if key not in config:
            continue
        try:
            values[field] = _ADAPTERS[key].validate_python(config[key])
        except ValidationError as exc:
            errors[key] = list(exc.errors())
    return errors


# Errors whose value cannot be left out to check the rest: a required key, and the choices that switch what
# other keys mean (platform, orchestrator, autoscaler: a default there would judge the rest by another mode).
_NOT_LEFT_OUT = ("missing", "literal_error")


def _rules_despite(config: dict[str, Any], stack: str, errors: dict[str, list[Any]]) -> list[str]:
    """The cross-field rules' problems with the bad values left out (each falls back to its default), so one run
    reports the mistakes of every kind; none that names a key left out (that key's own problem is reported).
    Empty when the values cannot be left out (a required key, a mode switch) or the rest still does not
    validate."""
    if any(e["type"] in _NOT_LEFT_OUT for found in errors.values() for e in found):
        return []
    trimmed, left_out = copy.deepcopy(config), []
    for key, found in errors.items():
        for err in found:
            loc = [
                part for part in err["loc"] if not (isinstance(part, str) and part.startswith("function-"))
            ]
            while loc and isinstance(loc[-1], int):
                loc.pop()  # a bad item: leave out the list it is in
            if not loc or not _leave_out(trimmed[key], loc):
                return []
            left_out.append(key_path(key, tuple(loc)).removeprefix(f"{NAMESPACE}:"))
    values: dict[str, Any] = {"stack": stack}
    if _validate(trimmed, values) or any(key not in trimmed for key in REQUIRED):
        return []
    try:
        check_spec(ClusterSpec.model_validate(values))
    except ConfigError as exc:
        return [p for p in exc.problems if not any(path in p for path in left_out)]
    return []


def _leave_out(data: Any, loc: list[int | str]) -> bool:
    """Delete the value at `loc` below `data`; False when the path is not there."""
    for part in loc[:-1]:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return False
    if isinstance(data, dict) and loc[-1] in data:
        del data[loc[-1]]
        return True
    return False


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        stacks = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in path.parent.glob("Pulumi.*.yaml"))
        hint = f"; stacks here: {', '.join(stacks)}" if stacks else ""
        raise ConfigError(f"stack file not found: {path}{hint}")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ConfigError(
            f"not UTF-8 text: byte 0x{data[exc.start]:02x} at line {line}, column {column}; Pulumi reads stack "
            "files as UTF-8 (save the file as UTF-8)",
            source=str(path),
        ) from None
    try:
        doc = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: no arbitrary objects
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"YAML syntax error{where}: {problem}", source=str(path)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("config", {}), dict):
        raise ConfigError("expected a mapping with a `config:` mapping inside", source=str(path))
    stray = [
        key for key in doc if isinstance(key, str) and (key in SECTIONS or key.startswith(f"{NAMESPACE}:"))
    ]
    if stray:
        raise ConfigError(
            f"{', '.join(stray)}: at the top level of the file; stack settings go under `config:` "
            "(Pulumi stack settings files: `config:` then one key per setting)",
            source=str(path),
        )
    return doc.get("config") or {}


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping. YAML 1.2 requires keys to be unique (spec
    section 3.2.1.1), but PyYAML keeps the last value silently (`maxSize: 2` then `maxSize: 5` planned 5)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first at line {seen[key]}); YAML keys must be unique",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def stack_name(path: Path) -> str:
    name = path.name
    if not (name.startswith("Pulumi.") and name.endswith(".yaml")) or name == "Pulumi.yaml":
        raise ConfigError(f"{path}: a stack file is named Pulumi.<stack>.yaml")
    return name[len("Pulumi.") : -len(".yaml")]


def load_stack(path: str | Path) -> ClusterSpec:
    """Read and validate a `Pulumi.<stack>.yaml` file."""
    path = Path(path)
    stack = stack_name(path)
    try:
        return parse_config(_read_yaml(path), stack)
    except ConfigError as exc:
        if exc.source is None:
            raise ConfigError(exc.problems, source=str(path)) from None
        raise
