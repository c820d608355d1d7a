"""Spec rules under `cluster.autoscaler: karpenter`: each bad input names its key path and the reason."""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.errors import ConfigError
from infra.stackfile import parse_config
from tests.conftest import ROOT
from tests.karpenter.conftest import as_karpenter, example_config

Config = dict[str, Any]
NP = "gpufleet:nodePools"


def karpenter() -> Config:
    return example_config("example-karpenter")


def pool(c: Config, name: str) -> dict[str, Any]:
    return next(p for p in c[NP] if p["name"] == name)


def problems_for(config: Config) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(config, "test")
    return info.value.problems


def _cluster_autoscaler(c: Config) -> None:
    c["gpufleet:cluster"]["autoscaler"] = "cluster-autoscaler"
    pool(c, "l40s-infer").pop("capacityReservationId")  # an ODCR is a Karpenter-only pool setting


CASES: list[tuple[str, Callable[[Config], None], str, str]] = [
    (
        "karpenter-key-without-karpenter",
        _cluster_autoscaler,
        f"{NP}[1].karpenter",
        "only with gpufleet:cluster.autoscaler: karpenter",
    ),
    (
        "karpenter-key-on-shared-pool",
        lambda c: pool(c, "a10g-shared").update(karpenter={"workload": "training"}),
        f"{NP}[3].karpenter",
        "kubernetes-sigs/karpenter#729",
    ),
    (
        "instance-types-differ-in-gpus",
        lambda c: pool(c, "a10g-spot").update(instanceTypes=["g5.12xlarge"]),
        f"{NP}[2].instanceTypes[0]",
        "one pool is one GPU model and count",
    ),
    (
        "instance-type-unknown",
        lambda c: pool(c, "a10g-spot").update(instanceTypes=["g5.3xlarge"]),
        f"{NP}[2].instanceTypes[0]",
        "not a GPU instance type in the catalog",
    ),
    (
        "efa-pool-with-non-efa-type",
        lambda c: pool(c, "a10g-spot").update(
            efa=True, instanceType="g5.8xlarge", instanceTypes=["g5.4xlarge"]
        ),
        f"{NP}[2].instanceTypes[0]",
        "has 0 EFA interfaces",
    ),
    (
        "reserved-without-reservation",
        lambda c: pool(c, "a10g-spot").update(karpenter={"capacityTypes": ["reserved", "spot"]}),
        f"{NP}[2].karpenter.capacityTypes",
        "needs capacityReservationId",
    ),
    (
        "reservation-not-used",
        lambda c: pool(c, "l40s-infer").update(karpenter={"capacityTypes": ["on-demand"]}),
        f"{NP}[1].karpenter.capacityTypes",
        "include 'reserved'",
    ),
    (
        "capacity-block-with-spot",
        lambda c: pool(c, "h100-train").update(karpenter={"capacityTypes": ["reserved", "spot"]}),
        f"{NP}[0].karpenter.capacityTypes",
        "accepted: [reserved]",
    ),
    (
        "training-consolidated-when-underutilised",
        lambda c: pool(c, "a10g-spot")["karpenter"].update(consolidationPolicy="WhenEmptyOrUnderutilized"),
        f"{NP}[2].karpenter.consolidationPolicy",
        "consolidated only when empty",
    ),
    (
        "oversubscribed-past-nodepool-limits",
        lambda c: pool(c, "a10g-spot").update(oversubscribe=True),
        f"{NP}[2].oversubscribe",
        "may not exceed the NodePool's limits",
    ),
    (
        "minimum-size",
        lambda c: pool(c, "l40s-infer").update(minSize=1),
        f"{NP}[1].minSize",
        "keep no minimum",
    ),
    (
        "zone-without-subnet",
        lambda c: pool(c, "a10g-spot").update(availabilityZones=["us-east-1d"]),
        f"{NP}[2].availabilityZones[0]",
        "is not one of the cluster's zones",
    ),
    (
        "provisioning-requests",
        lambda c: c.update({"gpufleet:scheduling": {"provisioningRequests": True}}),
        "gpufleet:scheduling.provisioningRequests",
        "Karpenter does not implement ProvisioningRequest; set it to false",
    ),
    (
        "training-before-1.36",
        lambda c: c["gpufleet:cluster"].update(kubernetesVersion="1.35"),
        "gpufleet:cluster.kubernetesVersion",
        "KEP-3962",
    ),
    (
        "empty-capacity-types",
        lambda c: pool(c, "a10g-spot")["karpenter"].update(capacityTypes=[]),
        f"{NP}[2].karpenter.capacityTypes",
        "at least 1",
    ),
    (
        "queue-name-too-long",
        lambda c: c["gpufleet:cluster"].update(name="k" * 81),
        "gpufleet:cluster.name",
        "SQS allows 80 characters",
    ),
    (
        "budget-window-half-given",
        lambda c: pool(c, "a10g-spot")["karpenter"]["budgets"][2].pop("duration"),
        f"{NP}[2].karpenter.budgets[2]",
        "schedule and duration go together",
    ),
    (
        "budget-nodes-pattern",
        lambda c: pool(c, "a10g-spot")["karpenter"]["budgets"][0].update(nodes="one"),
        f"{NP}[2].karpenter.budgets[0].nodes",
        "",
    ),
    (
        "drift-budget-on-a-training-pool",
        lambda c: pool(c, "a10g-spot")["karpenter"]["budgets"][0].update(nodes="1"),
        f"{NP}[2].karpenter.budgets[0]",
        "deletes running training pods",
    ),
    (
        "all-reasons-budget-on-a-training-pool",
        lambda c: pool(c, "a10g-spot")["karpenter"]["budgets"].append({"nodes": "10%"}),
        f"{NP}[2].karpenter.budgets[3]",
        "karpenter.drainBusyNodesOnDrift: true",
    ),
    (
        "expire-after-pattern",
        lambda c: pool(c, "a10g-spot")["karpenter"].update(expireAfter="30d"),
        f"{NP}[2].karpenter.expireAfter",
        "",
    ),
    (
        "unknown-capacity-type",
        lambda c: pool(c, "a10g-spot")["karpenter"].update(capacityTypes=["spot", "ondemand"]),
        f"{NP}[2].karpenter.capacityTypes[1]",
        "on-demand",
    ),
]


@pytest.mark.parametrize(("mutate", "path", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rule_names_key_path(mutate: Callable[[Config], None], path: str, words: str) -> None:
    config = copy.deepcopy(karpenter())
    mutate(config)
    found = problems_for(config)
    assert any(p.startswith(f"{path}:") and words in p for p in found), found


@pytest.mark.parametrize(
    "allow",
    [{"terminationGracePeriod": "Never"}, {"drainBusyNodesOnDrift": True}, {"workload": "inference"}],
    ids=["drift-waits-for-jobs", "explicit-opt-in", "inference-pool"],
)
def test_a_drift_budget_is_accepted_where_it_cannot_kill_a_training_job(allow: dict[str, Any]) -> None:
    config = copy.deepcopy(karpenter())
    settings = pool(config, "a10g-spot")["karpenter"]
    settings["budgets"][0]["nodes"] = "1"
    settings.update(allow)
    assert parse_config(config, "test").pool("a10g-spot").karpenter is not None


def test_karpenter_is_refused_on_an_existing_cluster() -> None:
    config = copy.deepcopy(example_config("metal"))
    config["gpufleet:cluster"]["autoscaler"] = "karpenter"
    config[NP][0]["karpenter"] = {"workload": "inference"}
    found = problems_for(config)
    assert "gpufleet:cluster.autoscaler: karpenter is only for platform aws" in found
    assert f"{NP}[0].karpenter: only for platform aws" in found


def test_kueue_quotas_may_not_exceed_nodepool_limits() -> None:
    """Karpenter never launches past a NodePool's limits, which are the pool's max GPUs; a quota above them
    would admit jobs that can never get nodes."""
    config = copy.deepcopy(karpenter())
    config["gpufleet:teams"][0]["quotas"]["h100-train"] = 40  # 4 nodes x 8 GPUs = 32
    assert any("quotas on pool 'h100-train' add up to 40" in p for p in problems_for(config))


def test_the_example_stack_and_the_default_still_load() -> None:
    spec = parse_config(karpenter(), "example-karpenter")
    assert spec.cluster.autoscaler == "karpenter"
    default = parse_config(example_config("dev"), "dev")
    assert default.cluster.autoscaler == "cluster-autoscaler"
    assert (
        parse_config(as_karpenter(example_config("example-prod")), "prod").cluster.autoscaler == "karpenter"
    )


def test_cli_exits_2_with_the_key_path_and_creates_nothing(tmp_path: Path) -> None:
    doc = yaml.safe_load((ROOT / "Pulumi.example-karpenter.yaml").read_text())
    pool(doc["config"], "a10g-spot").update(oversubscribe=True)
    stack = tmp_path / "Pulumi.bad.yaml"
    stack.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-m", "invoke", "render", "--stack", str(stack), "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert f"{NP}[2].oversubscribe" in result.stderr and "Traceback" not in result.stderr
    assert not out.exists()


def test_cli_refuses_a_drift_budget_that_would_kill_training_in_one_line(tmp_path: Path) -> None:
    doc = yaml.safe_load((ROOT / "Pulumi.example-karpenter.yaml").read_text())
    pool(doc["config"], "a10g-spot")["karpenter"]["budgets"][0]["nodes"] = "1"
    stack = tmp_path / "Pulumi.bad.yaml"
    stack.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-m", "invoke", "render", "--stack", str(stack), "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    named = [line for line in result.stderr.splitlines() if f"{NP}[2].karpenter.budgets[0]" in line]
    assert len(named) == 1 and "Drifted" in named[0] and "Traceback" not in result.stderr
    assert not out.exists()


def test_the_docs_state_karpenters_limits_as_of_v1_14_not_as_absolutes(shared_dir: Path) -> None:
    """charts/karpenter/values.yaml @v1.14.1 has the ALPHA feature gates `nodeOverlay` (NodeOverlay
    `spec.capacity` declares extended resources) and `staticCapacity` (NodePool `replicas`): "cannot see
    shared/MIG resources" and "keeps no minimum" are gpufleet's choices, which the docs must say as such."""
    gates = yaml.safe_load((shared_dir / "crds" / "karpenter" / "chart" / "values.yaml").read_text())[
        "settings"
    ]["featureGates"]
    assert gates["nodeOverlay"] is False and gates["staticCapacity"] is False
    text = " ".join((ROOT / "docs" / "aws.md").read_text().split())
    assert "Karpenter keeps no minimum" not in text and "What Karpenter cannot do" not in text
    assert "NodeOverlay" in text and "featureGates.staticCapacity" in text
