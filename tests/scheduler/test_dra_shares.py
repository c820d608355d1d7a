"""GPU shares through DRA: the spec's rules, the objects rendered for them, and how Kueue is told to count them.

The rendered objects are validated against Kubernetes 1.36's schemas in tests/scheduler/test_validation.py
(the `shares` example); the twin's apiserver, scheduler and Kueue take them in tests/twin/test_dra_shares.py.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from infra.errors import ConfigError
from infra.scheduling import scheduler_inputs
from infra.stackfile import parse_config
from scheduler import compile, manager_config
from scheduler.dra import DEVICE_CLASS, DRIVER, KUEUE_GATE, SHARES
from scheduler.labels import SHARE_RESOURCE
from scheduler.validation import core_problems
from tests.conftest import ROOT
from tests.scheduler.examples import SHARES as POLICY
from tests.scheduler.examples import SHARES_POOLS
from tests.scheduler.helpers import find

NP, CLUSTER = "gpufleet:nodePools", "gpufleet:cluster"


def metal(minor: str = "1.36", sharing: Any = "dra-shares") -> dict[str, Any]:
    config = copy.deepcopy(yaml.safe_load((ROOT / "Pulumi.metal.yaml").read_text())["config"])
    config[CLUSTER]["kubernetesVersion"] = minor
    config[NP][1]["sharing"] = sharing
    return config


def problems(config: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(config, "test")
    return info.value.problems


def test_both_spellings_give_the_pool_its_shares() -> None:
    short = parse_config(metal(), "test")
    long = parse_config(metal(sharing={"draShares": {"shares": 4}}), "test")
    assert short.node_pools[1].sharing.mode == "draShares"
    assert short.node_pools[1].sharing.dra_shares.shares == 8  # type: ignore[union-attr]
    assert long.node_pools[1].sharing.dra_shares.shares == 4  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("config", "words"),
    [
        (metal(minor="1.35"), "needs Kubernetes 1.36 or later"),
        (metal(sharing={"draShares": {"shares": 4}, "mig": "1g.10gb"}), "one mode per pool"),
        (metal(sharing={"draShares": {"shares": 1}}), "greater than or equal to 2"),
    ],
    ids=["minor-1.35", "with-mig", "one-share"],
)
def test_a_pool_the_platform_cannot_share_is_one_problem_naming_its_sharing(
    config: dict[str, Any], words: str
) -> None:
    [problem] = problems(config)
    assert problem.startswith(f"{NP}[1].sharing") and words in problem, problem


def _aws(autoscaler: str, min_size: int, max_size: int) -> dict[str, Any]:
    config = copy.deepcopy(yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"])
    config[CLUSTER]["kubernetesVersion"] = "1.36"
    config[CLUSTER]["autoscaler"] = autoscaler
    pool = config[NP][0]
    pool.update(sharing="dra-shares", minSize=min_size, desiredSize=min_size, maxSize=max_size)
    return config


def test_eks_takes_shares_only_on_static_node_groups() -> None:
    parse_config(_aws("cluster-autoscaler", 2, 2), "test")
    [scaled] = problems(_aws("cluster-autoscaler", 0, 2))
    assert scaled.startswith(f"{NP}[0].sharing: ") and "minSize equal to maxSize" in scaled
    refused = [p for p in problems(_aws("karpenter", 2, 2)) if p.startswith(f"{NP}[0].sharing: ")]
    assert len(refused) == 1 and "Karpenter" in refused[0]


def test_quota_is_counted_in_shares_of_the_pool_flavor() -> None:
    """vision's 4 L40S GPUs at 8 shares each are 32 shares; its borrowing limit of 8 GPUs is 64 shares."""
    queue = find(compile(POLICY, SHARES_POOLS), "ClusterQueue", "vision")
    flavors = {f["name"]: f for g in queue["spec"]["resourceGroups"] for f in g["flavors"]}
    shares = {r["name"]: r for r in flavors["l40s"]["resources"]}[SHARE_RESOURCE]
    assert (shares["nominalQuota"], shares["borrowingLimit"]) == (32, 64)
    whole = {r["name"]: r for r in flavors["h100"]["resources"]}[SHARE_RESOURCE]
    assert whole["nominalQuota"] == 0


def test_kueue_maps_the_class_to_the_quota_resource_through_its_shares() -> None:
    config = manager_config(POLICY)
    assert config["featureGates"] == {KUEUE_GATE: True}
    [mapping] = config["resources"]["deviceClassMappings"]
    assert mapping["name"] == SHARE_RESOURCE and mapping["deviceClassNames"] == [DEVICE_CLASS]
    [source] = mapping["sources"]
    assert (source["capacity"]["name"], source["capacity"]["driver"]) == (SHARES, DRIVER)
    assert "deviceClassMappings" not in manager_config(replace_shares(False))["resources"]


def replace_shares(on: bool) -> Any:
    from dataclasses import replace

    return replace(POLICY, dra_shares=on)


def test_every_team_namespace_gets_templates_below_a_whole_gpu() -> None:
    objects = compile(POLICY, SHARES_POOLS)
    templates = sorted(
        (o["metadata"]["namespace"], o["metadata"]["name"])
        for o in objects
        if o["kind"] == "ResourceClaimTemplate"
    )
    assert templates == [(ns, f"gpu-share-{n}") for ns in ("nlp", "vision") for n in (1, 2, 4)]
    [device_class] = [o for o in objects if o["kind"] == "DeviceClass"]
    assert device_class["metadata"]["name"] == DEVICE_CLASS
    assert [
        p
        for o in objects
        if o["kind"] in ("DeviceClass", "ResourceClaimTemplate")
        for p in core_problems(o, "1.36")
    ] == []


def test_the_stack_bridge_sets_shares_and_keeps_the_device_plugin_off() -> None:
    spec = parse_config(metal(), "test")
    policy, pools = scheduler_inputs(spec)
    assert policy.dra_shares and pools[1].dra_shares == 8
    assert pools[1].labels["nvidia.com/gpu.deploy.device-plugin"] == "false"
    assert "nvidia.com/device-plugin.config" not in pools[1].labels


def test_a_shared_pool_runs_no_device_plugin_and_advertises_no_gpu_resource() -> None:
    from infra.aws.nodepools import node_template_resources
    from scheduler.sharing import device_plugin_configmap

    configmap = device_plugin_configmap(SHARES_POOLS)
    assert "l40s" not in configmap["data"]  # only time-sliced and MIG pools have an entry
    assert node_template_resources(SHARES_POOLS[1]) == {}
    assert node_template_resources(SHARES_POOLS[0]) == {"nvidia.com/gpu": 8}


def test_a_view_without_its_share_count_is_refused_naming_the_key() -> None:
    from dataclasses import replace

    from scheduler.checks import check
    from scheduler.errors import SchedulerConfigError

    broken = (SHARES_POOLS[0], replace(SHARES_POOLS[1], dra_shares=None))
    with pytest.raises(SchedulerConfigError) as info:
        check(POLICY, broken)
    assert any(
        p.endswith("nodePools[1].sharing.draShares.shares: at least 2 shares per GPU (got None)")
        for p in info.value.problems
    )


def test_the_docs_share_job_uses_a_rendered_template_and_the_packing_scheduler() -> None:
    """docs/scheduling.md's DRA example: the template it names is one every team namespace gets."""
    import re

    text = (ROOT / "docs" / "scheduling.md").read_text()
    section = text[text.index("## GPU shares through DRA") :]
    [block] = re.findall(r"```yaml\n(.*?)```", section, flags=re.S)[:1]
    job = yaml.safe_load(block)
    spec = job["spec"]["template"]["spec"]
    [claim] = spec["resourceClaims"]
    rendered = {
        o["metadata"]["name"] for o in compile(POLICY, SHARES_POOLS) if o["kind"] == "ResourceClaimTemplate"
    }
    assert claim["resourceClaimTemplateName"] in rendered
    assert spec["schedulerName"] == "gpu-binpack"
    assert spec["containers"][0]["resources"]["claims"] == [{"name": claim["name"]}]
    assert core_problems(job, "1.36") == []


def test_provisioning_requests_leave_a_static_share_pool_alone() -> None:
    """On EKS with provisioningRequests, the check runs on autoscaled flavors only; a dra-shares pool is static
    (min = max), and cluster-autoscaler counts no shares, so its flavor gets no check and the
    ProvisioningRequestConfig manages no share resource."""
    from dataclasses import replace

    pools = (
        replace(SHARES_POOLS[0], node_group="eks-h100-.*"),
        replace(SHARES_POOLS[1], node_group="eks-l40s-.*"),
    )
    policy = replace(POLICY, platform="aws", provisioning_requests=True, fair_sharing=False)
    objects = compile(policy, pools)
    queue = find(objects, "ClusterQueue", "vision")
    [check] = queue["spec"]["admissionChecksStrategy"]["admissionChecks"]
    assert check["onFlavors"] == ["h100"]
    [config] = [o for o in objects if o["kind"] == "ProvisioningRequestConfig"]
    assert SHARE_RESOURCE not in config["spec"]["managedResources"]
