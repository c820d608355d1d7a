"""The cluster spec from a running Pulumi program's configuration: same parser, same object as `load_stack`.

Kept apart from `infra.spec` so the spec stays importable (and checkable) without pulumi.
"""

from __future__ import annotations

import json
from typing import Any

import pulumi

from infra.spec import NAMESPACE, ClusterSpec
from infra.stackfile import SECTIONS, parse_config


def load_pulumi_config() -> ClusterSpec:
    """The same spec, read from the running Pulumi program's configuration (same parser, same object)."""
    settings = {**pulumi.runtime.config.get_config_env(), **pulumi.runtime.config.CONFIG.get()}
    raw: dict[str, Any] = {}
    for key, value in settings.items():
        key = key.replace(":config:", ":")
        if key in SECTIONS or key.startswith(f"{NAMESPACE}:"):
            try:
                raw[key] = json.loads(value)
            except json.JSONDecodeError:
                raw[key] = value  # plain strings: aws:region, gpufleet:platform
    return parse_config(raw, pulumi.get_stack())
