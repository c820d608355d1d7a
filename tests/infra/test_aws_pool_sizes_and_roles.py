"""AWS spec rules on a pool's instance sizes and the provider's role chain (exit 2, key path named), and the
kubeconfig's role."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pulumi
import pytest

from infra import build
from infra.errors import ConfigError
from infra.stackfile import load_stack, parse_config
from tests.conftest import load_example
from tests.preflight.helpers import invoke, stack_doc, write_stack


def _config(*pools: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "aws:region": "us-east-1",
        "gpufleet:platform": "aws",
        "gpufleet:cluster": {"name": "c", "availabilityZones": ["us-east-1a", "us-east-1b", "us-east-1c"]},
        "gpufleet:nodePools": list(pools),
        **extra,
    }


def _problems(config: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(config, "t")
    return info.value.problems


SPOT = {"name": "spot", "capacityType": "SPOT", "minSize": 0, "maxSize": 4}


def test_autoscaler_pool_types_must_have_equal_cpu_and_memory() -> None:
    """cluster-autoscaler-1.35.2 cloudprovider/aws/README.md:344-346: "instance types should have the same
    amount of RAM and number of CPU cores", and aws_wrapper.go:768 builds the node template from the first
    override. g5.2xlarge (8 vCPU, 32 GiB) with g5.8xlarge (32 vCPU, 128 GiB) passes the "same GPU model and
    count" rule, and is refused on the pool's instanceTypes key."""
    (problem,) = _problems(_config({**SPOT, "instanceTypes": ["g5.2xlarge", "g5.8xlarge"]}))
    assert problem.startswith("gpufleet:nodePools[0].instanceTypes: the cluster autoscaler sizes")
    assert "g5.2xlarge (8 vCPU, 32 GiB), g5.8xlarge (32 vCPU, 128 GiB)" in problem
    assert "Accepted: types with equal vCPUs and memory" in problem
    # instanceType beside instanceTypes is one more type of the same group
    (problem,) = _problems(_config({**SPOT, "instanceType": "g5.4xlarge", "instanceTypes": ["g5.2xlarge"]}))
    assert problem.startswith("gpufleet:nodePools[0].instanceTypes:")


def test_equal_sizes_pass_and_karpenter_pools_may_mix() -> None:
    """Types of one size pass; Karpenter sizes each type itself, so its pools may mix (the
    example-karpenter stack lists g5.4xlarge with g5.8xlarge)."""
    spec = parse_config(
        _config({**SPOT, "instanceTypes": ["p5e.48xlarge", "p5en.48xlarge"], "maxSize": 1}), "t"
    )
    assert spec.node_pools[0].instance_types == ["p5e.48xlarge", "p5en.48xlarge"]
    for stack in ("example-prod", "example-karpenter", "dev"):
        load_example(stack)


def test_bad_mixed_pool_is_exit_2_and_nothing_created(tmp_path: Path) -> None:
    """Mixed sizes as a user meets them: `invoke plan` exits 2 naming the key, before anything runs."""
    doc = stack_doc("example-prod")
    pools = doc["config"]["gpufleet:nodePools"]
    index = next(i for i, p in enumerate(pools) if p["name"] == "a10g-batch")
    pools[index]["instanceTypes"] = ["g5.2xlarge", "g5.8xlarge"]
    write_stack(tmp_path, "mixed", doc)
    result = invoke("plan", "--stack", str(tmp_path / "Pulumi.mixed.yaml"))
    assert result.returncode == 2, result.stderr
    assert f"gpufleet:nodePools[{index}].instanceTypes: the cluster autoscaler" in result.stderr
    assert "Traceback" not in result.stderr


def test_role_chains_and_external_ids_are_refused(tmp_path: Path) -> None:
    """pulumi-aws provider configuration, `assumeRoles`: the roles are assumed in order, so the
    provider (the cluster's creator and first admin) is the last role. The kubeconfig's exec plugin,
    `aws eks get-token --role-arn`, assumes one role from the profile's credentials and takes no external
    ID, so a chain or an external ID would mint a token for another principal (Unauthorized)."""
    doc = stack_doc("example-prod")
    doc["config"]["aws:assumeRoles"] = [
        {"roleArn": "arn:aws:iam::123456789012:role/hop"},
        {"roleArn": "arn:aws:iam::123456789012:role/deployer", "externalId": "x-123"},
    ]
    write_stack(tmp_path, "chain", doc)
    with pytest.raises(ConfigError) as info:
        load_stack(tmp_path / "Pulumi.chain.yaml")
    text = "\n".join(info.value.problems)
    assert "aws:assumeRoles: 2 roles; the kubeconfig's `aws eks get-token --role-arn` assumes one" in text
    assert "aws:assumeRoles[1].externalId: `aws eks get-token`" in text
    assert "set aws:profile" in text
    result = invoke("plan", "--stack", str(tmp_path / "Pulumi.chain.yaml"))
    assert result.returncode == 2, result.stderr
    assert "aws:assumeRoles[1].externalId" in result.stderr and "Traceback" not in result.stderr
    doc["config"]["aws:assumeRoles"] = [{"roleArn": "arn:aws:iam::123456789012:role/deployer"}]
    write_stack(tmp_path, "one", doc)
    assert load_stack(tmp_path / "Pulumi.one.yaml").aws_assume_roles[0].role_arn.endswith("/deployer")


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_kubeconfig_uses_the_last_role_of_the_chain() -> pulumi.Output[Any]:
    """pulumi-aws provider configuration, `assumeRoles`: applied in order, so the provider's identity is the
    last role and `get-token --role-arn` names it, not the first."""
    first, last = "arn:aws:iam::123456789012:role/hop", "arn:aws:iam::123456789012:role/deployer"
    pulumi.runtime.set_config("aws:assumeRoles", json.dumps([{"roleArn": first}, {"roleArn": last}]))
    try:
        outputs = build(load_example("dev"))
    finally:
        pulumi.runtime.config.CONFIG.get().pop("aws:assumeRoles", None)

    def check(text: str) -> None:
        assert json.loads(text)["users"][0]["user"]["exec"]["args"][-2:] == ["--role-arn", last]

    return outputs["kubeconfig"].apply(check)
