"""`invoke plan` shows the Karpenter pools with limits and a cost range; `invoke render` writes their
NodePools and EC2NodeClasses to <manifests>/karpenter/ for GitOps."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from infra import catalog
from infra.plan import build_plan
from infra.plan_report import to_markdown
from scheduler.validation import cel_problems, crd_problems
from tests.conftest import ROOT, load_example


def invoke(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_plan_rows_limits_and_cost_range() -> None:
    plan = build_plan(load_example("example-karpenter"))
    rows = {r["pool"]: r for r in plan.karpenter}
    assert set(rows) == {"h100-train", "l40s-infer", "a10g-spot"}  # not the time-sliced node group
    spot = rows["a10g-spot"]
    assert spot["limits"]["nvidia.com/gpu"] == "8"
    hours = catalog.HOURS_PER_MONTH
    prices = [catalog.CATALOG[t].price_per_hour or 0 for t in ("g5.2xlarge", "g5.4xlarge", "g5.8xlarge")]
    assert spot["monthly_cost_min"] == 0.0
    assert spot["monthly_cost_max_low"] == round(8 * min(prices) * hours, 2)
    assert spot["monthly_cost_max_high"] == round(8 * max(prices) * hours, 2)
    assert rows["h100-train"]["consolidation"] == "WhenEmpty after Never"
    # The pool table prices a Karpenter pool's maximum at its dearest type, so totals are an upper bound.
    (pool,) = [p for p in plan.pools if p.name == "a10g-spot"]
    assert pool.monthly_cost_max == spot["monthly_cost_max_high"]
    text = to_markdown(plan)
    assert "## Karpenter NodePools (limits and cost range)" in text
    assert "8 GPUs, 256 vCPUs, 1024Gi" in text
    assert build_plan(load_example("example-prod")).karpenter == []


def test_plan_task_prints_the_karpenter_table(tmp_path: Path) -> None:
    result = invoke("plan", "--stack", "example-karpenter", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "Karpenter NodePools" in result.stdout


def test_render_writes_nodepools_and_nodeclasses(tmp_path: Path, karpenter_schemas: dict) -> None:
    out = tmp_path / "manifests"
    (out / "karpenter").mkdir(parents=True)
    (out / "karpenter" / "02-nodepool-removed-pool.yaml").write_text("stale: true\n")
    result = invoke("render", "--stack", "example-karpenter", "--out", str(out))
    assert result.returncode == 0, result.stderr
    folder = out / "karpenter"
    listed = yaml.safe_load((folder / "kustomization.yaml").read_text())["resources"]
    assert sorted(p.name for p in folder.glob("*.yaml") if p.name != "kustomization.yaml") == sorted(listed)
    assert "02-nodepool-removed-pool.yaml" not in listed  # a pool removed from the spec leaves Git too
    docs = [yaml.safe_load((folder / name).read_text()) for name in listed]
    assert [d["kind"] for d in docs] == ["EC2NodeClass"] * 3 + ["NodePool"] * 3 + [
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
    ]
    for doc in docs[:6]:
        assert crd_problems(doc, karpenter_schemas) + cel_problems(doc, karpenter_schemas) == []
    assert "\nMIME-Version: 1.0\n" in docs[0]["spec"]["userData"]  # written as a readable block


def test_render_of_a_cluster_autoscaler_stack_writes_no_karpenter_folder(tmp_path: Path) -> None:
    assert invoke("render", "--stack", "dev", "--out", str(tmp_path)).returncode == 0
    assert not (tmp_path / "karpenter").exists()
