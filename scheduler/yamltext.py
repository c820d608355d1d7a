"""YAML text for config files embedded in objects (ConfigMaps, Helm values): plain, with no anchors or aliases.

PyYAML writes `&id001` / `*id001` when one Python object appears twice; some consumers (and every reader of a
GitOps diff) handle that badly, so rendered output never contains them.
"""

from __future__ import annotations

from typing import Any

import yaml


class NoAliasDumper(yaml.SafeDumper):
    """A SafeDumper that writes a repeated object out again instead of as an alias."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump_text(obj: Any) -> str:
    return yaml.dump(obj, Dumper=NoAliasDumper, sort_keys=False)
