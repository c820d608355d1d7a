"""The real API server accepts what we render: every object `invoke render` writes for every example stack,
applied server-side at the stack's Kubernetes minor, dry run first, with no error and no warning.

CRDs are the pinned upstream releases the twin installs from their Go modules (Kueue's chart, the Prometheus
operator's, Karpenter's AWS build). Field validation is the API server's default for server-side apply,
Strict (unknown or duplicate fields are errors; kubernetes.io "Server-Side Field Validation"), and Kueue's own
validating and mutating webhooks see every Kueue object.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import EXAMPLE_STACKS, ROOT
from tests.twin.conftest import start_twin
from tests.twin.kube import Kube


def rendered(stack: str, out: Path) -> list[tuple[str, dict[str, object]]]:
    """(file, object) for every Kubernetes object `invoke render` writes, in apply order."""
    done = subprocess.run([sys.executable, "-m", "invoke", "render", "--stack", stack, "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = []
    for path in sorted(out.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if (
                isinstance(doc, dict)
                and "kind" in doc
                and "apiVersion" in doc
                and doc["kind"] != "Kustomization"
            ):
                found.append((str(path.relative_to(out)), doc))
    return found


def stream(objects: list[tuple[str, dict[str, object]]]) -> str:
    return "".join(f"---\n# {file}\n{yaml.safe_dump(obj)}" for file, obj in objects)


@pytest.mark.parametrize("stack", EXAMPLE_STACKS)
def test_every_rendered_object_is_accepted(
    stack: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Namespaces first (a dry run in a namespace that does not exist yet is NotFound), then everything else in
    the files' order; each batch as one server-side apply, dry run first. kubectl applies every object of a
    stream and reports each failure and warning with the object's kind and name."""
    objects = rendered(stack, tmp_path / "out")
    assert len(objects) > 20
    namespaces = [o for o in objects if o[1]["kind"] == "Namespace"]
    rest = [o for o in objects if o[1]["kind"] != "Namespace"]
    twin = start_twin(tmp_path_factory, stack, bare=True)
    try:
        kube = Kube.of(twin)
        if any(o[1]["kind"] == "NodePool" for o in rest):
            # A Karpenter twin runs the stack's NodePools on KWOKNodeClasses (twin.karpenter_objects), and a
            # NodePool's class reference is immutable: the rendered ones go onto a cluster without them, as on EKS.
            kube.ok("delete", "nodepools.karpenter.sh", "--all", "--wait=true")
        problems = []
        for batch in (namespaces, rest):
            for mode in (["--dry-run=server"], []):
                result = kube.attempt(
                    "apply",
                    "--server-side",
                    "--field-manager=render-test",
                    # acceptance, not ownership: a Karpenter twin applies the training pools' do-not-disrupt
                    # policy itself (twin.karpenter_objects), as the deploy's field manager would take it over
                    "--force-conflicts",
                    *mode,
                    "-f",
                    "-",
                    stdin=stream(batch),
                )
                applied = result.out.count("serverside-applied")  # one line per object
                if not result.ok or "Warning" in result.err or applied < len(batch):
                    problems.append(f"{' '.join(mode) or 'apply'}: {result.err.strip() or result.out}")
        assert not problems, "\n".join(problems)
    finally:
        twin.stop()
