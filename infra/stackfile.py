"""Reading a stack: the flat `config:` mapping of a `Pulumi.<stack>.yaml` file -> a checked `ClusterSpec`.

Kept apart from `infra.spec` so the models import nothing of their rules: this module is the one place that
joins the two (models, then `infra.rules.check_spec`), and nothing it imports imports it back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, TypeAdapter, ValidationError

from infra.errors import ConfigError
from infra.rules import check_spec
from infra.spec import (
    NAMESPACE,
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


def _describe(err: Any) -> str:
    kind, msg = err["type"], err["msg"]
    if kind == "extra_forbidden":
        return "unknown key (check the spelling; docs/spec.md lists every key)"
    if kind == "missing":
        return "required key is missing"
    if kind == "value_error":
        return msg.removeprefix("Value error, ")
    got = err.get("input")
    return f"{msg} (got {got!r})" if not isinstance(got, dict | list) else msg


def parse_config(config: dict[str, Any], stack: str) -> ClusterSpec:
    """Validate a stack's flat `config:` mapping; raise ConfigError listing every problem with its key path."""
    problems: list[str] = []
    values: dict[str, Any] = {"stack": stack}
    for key in config:
        if key.startswith(f"{NAMESPACE}:") and key not in SECTIONS:
            accepted = ", ".join(k for k in SECTIONS if k.startswith(NAMESPACE))
            problems.append(f"{key}: unknown key; accepted: {accepted}")
    for key in REQUIRED:
        if key not in config:
            problems.append(f"{key}: required key is missing")
    for key, (field, _) in SECTIONS.items():
        if key not in config:
            continue
        try:
            values[field] = _ADAPTERS[key].validate_python(config[key])
        except ValidationError as exc:
            problems += [f"{key_path(key, e['loc'])}: {_describe(e)}" for e in exc.errors()]
    if problems:
        raise ConfigError(problems)
    spec = ClusterSpec.model_validate(values)
    return check_spec(spec)


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        stacks = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in path.parent.glob("Pulumi.*.yaml"))
        hint = f"; stacks here: {', '.join(stacks)}" if stacks else ""
        raise ConfigError(f"stack file not found: {path}{hint}")
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"YAML syntax error{where}: {problem}", source=str(path)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("config", {}), dict):
        raise ConfigError("expected a mapping with a `config:` mapping inside", source=str(path))
    return doc.get("config") or {}


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
