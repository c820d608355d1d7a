"""The examples of docs/twin.md, run on the twin: the Job manifest, and the scenario test as written."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from tests.conftest import ROOT
from tests.support import eventually
from tests.twin import kube as kube_module
from tests.twin.kube import Kube

DOC = (ROOT / "docs" / "twin.md").read_text()


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC, flags=re.S)


def test_the_job_example_is_admitted_as_a_team_member(metal_twin: Kube) -> None:
    """The page's Job, created by a member of vision as a server-side dry run (all admission runs)."""
    (manifest,) = [b for b in blocks("yaml") if "kind: Job" in b]
    doc = yaml.safe_load(manifest)
    result = metal_twin.as_member(("vision-team",)).attempt(
        "create", "--dry-run=server", "-f", "-", "-o", "json", stdin=json.dumps(doc)
    )
    assert result.ok, result.err
    assert json.loads(result.out)["spec"]["suspend"] is True  # Kueue's webhook queues it


def test_the_scenario_test_example_passes(metal_twin: Kube) -> None:
    (example,) = [b for b in blocks("python") if "def test_" in b]
    scope: dict[str, Any] = {name: getattr(kube_module, name) for name in ("Kube", "job", "name")}
    scope["eventually"] = eventually
    exec(compile(example, "docs/twin.md", "exec"), scope)
    test = next(v for k, v in scope.items() if k.startswith("test_"))
    test(metal_twin)
