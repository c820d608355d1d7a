"""`invoke plan` on a FragmentationAware stack says, from the measured results, whether it pays on the stack's
layouts, and marks it experimental while no deployable layout has shown FGD a point ahead of MostAllocated
through the real scheduler (DRA shares has, so the mark is off and the rule is tested on made-up evidence)."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from infra import placement_evidence
from infra.placement_evidence import MEASURED, Measurement, verdict
from infra.stackfile import load_stack
from tests.conftest import ROOT

DOC = ROOT / "docs" / "simulation.md"


def section(title: str) -> str:
    text = DOC.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else len(text)]


def cells(text: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines()
            if line.startswith("|") and not line.startswith("|---")]  # fmt: skip


def documented(m: Measurement) -> tuple[float, float]:
    """FGD's and MostAllocated's numbers for ``m`` as docs/simulation.md's tables give them."""
    rows = cells(section(m.section))
    workload = m.setting.rsplit(", ", 1)[1]
    if m.section == "Through the real scheduler":
        i = next(i for i, r in enumerate(rows) if r[0] == m.setting)
        assert rows[i][1] == "gpu-binpack (MostAllocated)" and rows[i + 1][1] == "FragmentationAware"
        return float(rows[i + 1][2]), float(rows[i][2])
    if m.section == "As deployed":
        got = {r[1]: float(r[2]) for r in rows if r[0] == workload}
        return got["FGD-Extender"], got["MostAllocated"]
    (row,) = [r for r in rows if r[0] == workload]
    return float(row[1].split("±")[0]), float(row[2].split("±")[0])


@pytest.mark.parametrize("m", MEASURED, ids=lambda m: m.setting)
def test_the_evidence_is_what_the_docs_report(m: Measurement) -> None:
    assert documented(m) == (m.fgd, m.most_allocated)


def stack(tmp_path: Path, base: str, **placement: object) -> Path:
    doc = yaml.safe_load((ROOT / f"Pulumi.{base}.yaml").read_text())
    doc["config"]["gpufleet:scheduling"] = {
        **doc["config"].get("gpufleet:scheduling", {}),
        "placement": placement,
    }
    path = tmp_path / f"Pulumi.{base}-fa.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def invoke(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)  # fmt: skip


def test_the_plan_of_a_fragmentation_aware_stack_without_dra_shares_says_it_does_not_pay_there(
    tmp_path: Path,
) -> None:
    """example-prod's layouts (whole GPUs, time-sliced, MIG) have not shown FGD a point ahead: the plan says
    it does not pay there, and names DRA shares, the layout where it was measured ahead through the real
    scheduler."""
    path = stack(tmp_path, "example-prod", strategy="FragmentationAware")
    done = invoke("plan", "--stack", str(path), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    said = plan["placement_verdict"]
    dra = placement_evidence.best_real("draShares")
    assert dra is not None and dra.gain >= placement_evidence.PAYS_POINTS
    assert said["experimental"] is False and said["pays"] is False
    assert {mode: v["pools"] for mode, v in said["layouts"].items()} == {
        "exclusive": ["h100-train", "l40s-infer"], "timeSlicing": ["a10g-batch"], "mig": ["h100-mig"]}  # fmt: skip
    whole = placement_evidence.best_real("exclusive")
    assert whole is not None and whole.gain < 1
    assert f"at most {whole.gain:.2f} points ahead" in said["layouts"]["exclusive"]["says"]
    assert "MIG pods as CPU-only" in said["layouts"]["mig"]["says"]
    markdown = (tmp_path / "out" / "plan.md").read_text()
    assert "GPU placement FragmentationAware" in markdown.splitlines()[0]
    assert "(experimental)" not in markdown.splitlines()[0]
    assert f"- {said['line']}" in markdown
    printed = " ".join(done.stdout.split())
    assert "It is not shown to pay on this stack's layouts" in printed
    assert re.search(r"DRA shares, \d\.\d-\d\.\d points ahead in the simulator, \d\.\d through the real scheduler",
                     printed)  # fmt: skip


def test_the_plan_of_a_stack_with_a_dra_shares_pool_says_it_pays_there(tmp_path: Path) -> None:
    doc = yaml.safe_load((ROOT / "Pulumi.metal.yaml").read_text())
    doc["config"]["gpufleet:cluster"]["kubernetesVersion"] = "1.36"
    doc["config"]["gpufleet:nodePools"][1]["sharing"] = "dra-shares"
    doc["config"]["gpufleet:scheduling"] = {"placement": {"strategy": "FragmentationAware"}}
    path = tmp_path / "Pulumi.metal-shares.yaml"
    path.write_text(yaml.safe_dump(doc))
    said = verdict(load_stack(path))
    assert said is not None and said.pays and not said.experimental
    assert said.layouts["draShares"].pools == ["l40s"]
    assert "through the real scheduler (openb 60-node samples in DRA shares" in said.layouts["draShares"].says


def test_a_stack_without_the_extender_gets_no_word_on_it(tmp_path: Path) -> None:
    done = invoke("plan", "--stack", "metal", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "plan.json").read_text())["placement_verdict"] is None
    assert "experimental" not in done.stdout


def test_a_point_through_the_real_scheduler_on_a_deployable_layout_lifts_the_mark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rule, not the current numbers: a measured 1.2-point gain on whole GPUs through the real scheduler
    ends "experimental" and makes it pay on stacks with whole-GPU pools; a gain as large on a layout no device
    plugin offers (no sharing modes) changes nothing."""
    metal = load_stack(
        stack(tmp_path, "metal", strategy="FragmentationAware")
    )  # h100 whole, l40s time-sliced
    dev = load_stack(stack(tmp_path, "dev", strategy="FragmentationAware"))  # l40s whole
    # the evidence without the one layout that has shown a point through the real scheduler
    shown = [
        m for m in MEASURED if m.through == "real scheduler" and m.gain >= placement_evidence.PAYS_POINTS
    ]
    assert {layout for m in shown for layout in m.layouts} == {"draShares"}
    before = tuple(m for m in MEASURED if m not in shown)
    monkeypatch.setattr(placement_evidence, "MEASURED", before)
    assert verdict(metal).experimental  # type: ignore[union-attr]
    made_up = Measurement("x", frozenset(), 1.0, 9.0, "real scheduler", "Through the real scheduler")
    monkeypatch.setattr(placement_evidence, "MEASURED", (*before, made_up))
    assert verdict(metal).experimental  # type: ignore[union-attr]
    whole = dataclasses.replace(made_up, layouts=frozenset({"exclusive"}), fgd=7.8)
    monkeypatch.setattr(placement_evidence, "MEASURED", (*before, whole))
    said = verdict(dev)
    assert said is not None and not said.experimental and said.pays
    assert verdict(metal).pays  # type: ignore[union-attr]
