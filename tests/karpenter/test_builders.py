"""The NodePool / EC2NodeClass builders, per capacity type and sharing mode, without Pulumi or a cluster."""

from __future__ import annotations

import re
from typing import Any

import pytest

from infra import catalog
from infra.aws import launch_template as lt
from infra.aws.karpenter.pools import ami_alias, karpenter_objects, node_class, node_pool
from infra.aws.userdata import ENVVAR_SETTING
from infra.pools import karpenter_pools, managed_node_group_spec, needs_cluster_autoscaler
from infra.scheduling import scheduler_inputs
from infra.stackfile import parse_config
from scheduler import compile as compile_policy
from tests.karpenter.conftest import as_karpenter, example_config, karpenter_example

BASE = as_karpenter(example_config("dev"))


def spec_with(pool: dict[str, Any], *, extra: list[dict[str, Any]] | None = None, quota: int = 0) -> Any:
    config = {**BASE, "gpufleet:nodePools": [pool, *(extra or [])]}
    config["gpufleet:teams"] = [{"name": "research", "quotas": {pool["name"]: quota}}]
    return parse_config(config, "test")


def requirement(np: dict[str, Any], key: str) -> list[str]:
    (req,) = [r for r in np["spec"]["template"]["spec"]["requirements"] if r["key"] == key]
    assert req["operator"] == "In"
    return req["values"]


ON_DEMAND = {"name": "od", "instanceType": "g6e.xlarge", "maxSize": 3}
SPOT = {
    "name": "spot",
    "instanceType": "g5.2xlarge",
    "instanceTypes": ["g5.4xlarge"],
    "capacityType": "SPOT",
    "maxSize": 5,
}
BLOCK = {
    "name": "block",
    "instanceType": "p5.48xlarge",
    "capacityType": "CAPACITY_BLOCK",
    "capacityReservationId": "cr-0123456789abcdef0",
    "availabilityZone": "us-west-2b",
    "maxSize": 2,
    "efa": True,
}
ODCR = {
    "name": "odcr",
    "instanceType": "g6e.12xlarge",
    "capacityReservationId": "cr-0fedcba987654321a",
    "maxSize": 4,
}


@pytest.mark.parametrize(
    ("pool", "capacity", "weight"),
    [
        (ON_DEMAND, ["on-demand"], 20),
        (SPOT, ["spot"], 10),
        ({**SPOT, "karpenter": {"capacityTypes": ["spot", "on-demand"]}}, ["spot", "on-demand"], 10),
        (BLOCK, ["reserved"], 30),
        (ODCR, ["reserved", "on-demand"], 30),
    ],
    ids=["on-demand", "spot", "spot-fallback", "capacity-block", "odcr"],
)
def test_capacity_types_and_weights(pool: dict[str, Any], capacity: list[str], weight: int) -> None:
    """Reserved capacity is Karpenter's `reserved` capacity type (Karpenter docs, tasks/odcrs: "a NodePool
    must be compatible with karpenter.sh/capacity-type: reserved"); NodePool weights keep the priority
    expander's order, reserved > on-demand > spot (scheduler.autoscaling.PRIORITY)."""
    spec = spec_with(pool)
    np = node_pool(spec, spec.node_pools[0])
    assert requirement(np, "karpenter.sh/capacity-type") == capacity
    assert np["spec"]["weight"] == weight
    nc = node_class(spec, spec.node_pools[0])
    terms = nc["spec"].get("capacityReservationSelectorTerms")
    if "reserved" in capacity:
        assert terms == [{"id": pool["capacityReservationId"]}]
    else:
        assert terms is None


def test_capacity_block_is_pinned_to_its_zone_and_never_consolidated() -> None:
    """A capacity block is paid for whether used or not: consolidating its empty nodes saves nothing and
    gives the capacity up; `consolidateAfter: Never` turns consolidation off (NodePool CRD pattern
    `^(([0-9]+(s|m|h))+|Never)$`). A training pool: busy nodes do not drift (see the grace-period test)."""
    spec = spec_with(BLOCK)
    np = node_pool(spec, spec.node_pools[0])
    assert requirement(np, "topology.kubernetes.io/zone") == ["us-west-2b"]
    assert np["spec"]["disruption"]["consolidateAfter"] == "Never"
    assert {"nodes": "0", "reasons": ["Drifted"]} in np["spec"]["disruption"]["budgets"]


def test_training_consolidates_only_when_empty_and_inference_when_underutilised() -> None:
    train = spec_with(ON_DEMAND)
    infer = spec_with({**ON_DEMAND, "karpenter": {"workload": "inference"}})
    t = node_pool(train, train.node_pools[0])["spec"]["disruption"]
    i = node_pool(infer, infer.node_pools[0])["spec"]["disruption"]
    assert (t["consolidationPolicy"], t["consolidateAfter"]) == ("WhenEmpty", "10m")
    assert (i["consolidationPolicy"], i["consolidateAfter"]) == ("WhenEmptyOrUnderutilized", "30m")
    assert {"nodes": "0", "reasons": ["Drifted"]} in t["budgets"]
    assert {"nodes": "1", "reasons": ["Drifted", "Underutilized"]} in i["budgets"]
    # Expiry is forceful in Karpenter v1 (docs, concepts/disruption "Expiration"): GPU nodes never expire by default.
    assert node_pool(train, train.node_pools[0])["spec"]["template"]["spec"]["expireAfter"] == "Never"


def test_limits_follow_the_pool_maximum() -> None:
    """GPUs exactly maxSize x GPUs per node; CPU and memory of the largest allowed type, so the GPU limit binds."""
    spec = spec_with(SPOT)
    limits = node_pool(spec, spec.node_pools[0])["spec"]["limits"]
    big = catalog.CATALOG["g5.4xlarge"]
    assert limits == {"nvidia.com/gpu": "5", "cpu": str(5 * big.vcpus), "memory": f"{5 * big.memory_gib}Gi"}
    assert requirement(node_pool(spec, spec.node_pools[0]), "node.kubernetes.io/instance-type") == [
        "g5.2xlarge",
        "g5.4xlarge",
    ]


@pytest.mark.parametrize("stack", ["example-karpenter", "example-prod", "dev"])
def test_labels_and_taints_are_exactly_what_the_kueue_flavors_select(stack: str) -> None:
    """A flavor's nodeLabels must all be on the node and its tolerations must tolerate every node taint,
    or Kueue admits jobs whose pods never schedule (they come from infra.scheduling.pool_view, one copy)."""
    spec = karpenter_example(stack)
    policy, pools = scheduler_inputs(spec)
    flavors = {
        o["metadata"]["name"]: o for o in compile_policy(policy, pools) if o["kind"] == "ResourceFlavor"
    }
    for pool in karpenter_pools(spec):
        template = node_pool(spec, pool)["spec"]["template"]
        (flavor,) = [
            f
            for f in flavors.values()
            if f["spec"].get("nodeLabels", {}).get("gpufleet.io/pool") == pool.name
        ]
        assert flavor["spec"]["nodeLabels"].items() <= template["metadata"]["labels"].items()
        tolerated = {(t["key"], t.get("value"), t["effect"]) for t in flavor["spec"].get("tolerations", [])}
        taints = {(t["key"], t["value"], t["effect"]) for t in template["spec"]["taints"]}
        assert ("nvidia.com/gpu", "true", "NoSchedule") in taints
        assert taints <= tolerated


@pytest.mark.parametrize(
    ("sharing", "karpenter"),
    [("exclusive", True), ({"timeSlicing": {"replicas": 4}}, False), ({"mig": "1g.10gb"}, False)],
    ids=["exclusive", "time-slicing", "mig"],
)
def test_sharing_modes(sharing: Any, karpenter: bool) -> None:
    """Karpenter cannot see nvidia.com/gpu.shared or MIG resources (kubernetes-sigs/karpenter#729): shared
    pools stay managed node groups, scaled by the cluster-autoscaler, in the same cluster."""
    pool = {"name": "p", "instanceType": "p5.48xlarge", "maxSize": 1, "sharing": sharing}
    spec = spec_with(pool, extra=[ON_DEMAND])
    assert [p.name for p in karpenter_pools(spec)] == (["p", "od"] if karpenter else ["od"])
    assert [p.name for p in managed_node_group_spec(spec).node_pools] == ([] if karpenter else ["p"])
    assert needs_cluster_autoscaler(spec) is (not karpenter)
    names = {o["metadata"]["name"] for o in karpenter_objects(spec)}
    assert ("p" in names) is karpenter


def test_ami_pinned_from_the_versions_recipe_never_latest() -> None:
    """Alias format `family@version`, the version being the AMI's release tag (Karpenter docs, nodeclasses
    "spec.amiSelectorTerms": al2023@v20240807, bottlerocket@v1.20.4), from the same release the node groups pin."""
    spec = spec_with(ON_DEMAND)
    pool = spec.node_pools[0]
    date = (spec.versions.al2023_nvidia_ami_release or "").rsplit("-", 1)[1]
    assert ami_alias(spec, pool) == f"al2023@v{date}"
    rocket = spec_with({**ON_DEMAND, "amiFamily": "BOTTLEROCKET_NVIDIA"})
    os_version = (rocket.versions.bottlerocket_nvidia_release or "").split("-")[0]
    assert ami_alias(rocket, rocket.node_pools[0]) == f"bottlerocket@v{os_version}"
    for obj in karpenter_objects(karpenter_example("example-karpenter")):
        if obj["kind"] == "EC2NodeClass":
            assert all("latest" not in t["alias"] for t in obj["spec"]["amiSelectorTerms"])


def test_node_class_hardening_and_bootstrap() -> None:
    """IMDSv2 with hop limit 1 and encrypted gp3 as on the managed node groups (infra.aws.launch_template);
    the toolkit setting from the node groups' own first-boot script (infra.aws.userdata)."""
    spec = spec_with({**ON_DEMAND, "rootVolumeGiB": 300})
    nc = node_class(spec, spec.node_pools[0])["spec"]
    assert nc["metadataOptions"]["httpTokens"] == "required"
    assert nc["metadataOptions"]["httpPutResponseHopLimit"] == lt.IMDS_HOP_LIMIT == 1
    (root,) = nc["blockDeviceMappings"]
    assert root == {
        "deviceName": "/dev/xvda",
        "ebs": {"volumeSize": "300Gi", "volumeType": "gp3", "encrypted": True, "deleteOnTermination": True},
        "rootVolume": True,
    }
    assert f"--set {ENVVAR_SETTING}=false" in nc["userData"]
    assert nc["userData"].startswith("Content-Type: multipart/mixed")
    assert nc["role"] == "gpufleet-dev-karpenter-node"
    assert (
        nc["subnetSelectorTerms"]
        == nc["securityGroupSelectorTerms"]
        == [{"tags": {"karpenter.sh/discovery": "gpufleet-dev"}}]
    )
    rocket = spec_with({**ON_DEMAND, "amiFamily": "BOTTLEROCKET_NVIDIA"})
    rc = node_class(rocket, rocket.node_pools[0])["spec"]
    assert [d["deviceName"] for d in rc["blockDeviceMappings"]] == ["/dev/xvda", "/dev/xvdb"]
    assert all(d["ebs"]["encrypted"] and d["ebs"]["volumeType"] == "gp3" for d in rc["blockDeviceMappings"])
    assert "userData" not in rc  # Bottlerocket's toolkit is configured by the OS (infra.aws.userdata)


def test_efa_on_every_network_card_without_vpc_addresses() -> None:
    """p5.48xlarge has 32 network cards, one EFA each; `efa-only` devices take no IP (Karpenter docs,
    nodeclasses "spec.networkInterfaces"), beside the primary ENA interface on card 0."""
    spec = spec_with(BLOCK)
    nics = node_class(spec, spec.node_pools[0])["spec"]["networkInterfaces"]
    assert nics[0] == {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"}
    efa = [n for n in nics if n["interfaceType"] == "efa-only"]
    assert sorted(n["networkCardIndex"] for n in efa) == list(
        range(catalog.CATALOG["p5.48xlarge"].efa_interfaces)
    )
    assert (
        "networkInterfaces"
        not in node_class(spec_with(ON_DEMAND), spec_with(ON_DEMAND).node_pools[0])["spec"]
    )


def test_user_budgets_replace_the_defaults() -> None:
    pool = {**ON_DEMAND, "karpenter": {"budgets": [{"nodes": "0", "schedule": "@daily", "duration": "8h"}]}}
    spec = spec_with(pool)
    budgets = node_pool(spec, spec.node_pools[0])["spec"]["disruption"]["budgets"]
    assert budgets == [{"nodes": "0", "schedule": "@daily", "duration": "8h"}]


def test_priority_expander_is_replaced_by_nodepool_weights() -> None:
    """The cluster-autoscaler's priority expander only knows node groups: under Karpenter it lists the
    shared-GPU node groups alone, and NodePool weights order the rest."""
    spec = karpenter_example("example-karpenter")
    policy, pools = scheduler_inputs(spec)
    (configmap,) = [
        o
        for o in compile_policy(policy, pools)
        if o["kind"] == "ConfigMap" and "priorit" in o["metadata"]["name"]
    ]
    listed = configmap["data"]["priorities"]
    assert re.escape("a10g-shared") in listed
    assert not any(re.escape(p.name) in listed for p in karpenter_pools(spec))


def test_efa_plugin_runs_on_every_type_an_efa_pool_may_launch() -> None:
    from infra.aws.addons.efa import efa_values

    spec = spec_with(
        {
            **ODCR,
            "capacityReservationId": "cr-0fedcba987654321a",
            "instanceType": "g6e.16xlarge",
            "instanceTypes": ["g6e.8xlarge"],
            "availabilityZone": "us-west-2a",
            "efa": True,
        }
    )
    # by pool label, so every type the pool may launch is covered
    assert efa_values(spec)["supportedInstanceLabels"] == {"keys": ["gpufleet.io/pool"], "values": ["odcr"]}
    labels = node_pool(spec, spec.node_pools[0])["spec"]["template"]["metadata"]["labels"]
    assert labels["gpufleet.io/pool"] == "odcr"


@pytest.mark.parametrize(
    ("pool", "notice_s"),
    [
        (SPOT, 120),
        (BLOCK, 600),
        (ON_DEMAND, None),
        ({**ON_DEMAND, "karpenter": {"workload": "inference"}}, None),
    ],
    ids=["spot", "capacity-block", "on-demand", "inference"],
)
def test_forced_termination_ends_in_bounded_time_with_sigterm_first(
    pool: dict[str, Any], notice_s: int | None
) -> None:
    """Karpenter v1.14.1 docs, concepts/disruption.md, "Pod-Level Controls": pods with
    `karpenter.sh/do-not-disrupt` are not evicted by the termination controller, which cannot finish until
    they end or "the owning NodeClaim's terminationGracePeriod has elapsed"; "TerminationGracePeriod": such a
    pod is deleted at `terminationGracePeriod - terminationGracePeriodSeconds` after the drain starts.
    "Interruption": Spot gives a 2-minute notice; tasks/odcrs.md: Karpenter drains capacity-block nodes 10
    minutes before EC2 terminates them. So a training pod (Kubernetes' default 30 s grace) gets SIGTERM and
    its full grace before the instance goes, and a node deletion (`invoke destroy`, 45-minute timeout per
    EC2NodeClass) ends within the grace period. tests/karpenter/test_crds.py checks the field against the
    NodePool CRD (pattern `^([0-9]+(s|m|h))+$`)."""
    spec = spec_with(pool)
    template = node_pool(spec, spec.node_pools[0])["spec"]["template"]["spec"]
    grace = _seconds(template["terminationGracePeriod"])
    pod_grace = 30  # PodSpec terminationGracePeriodSeconds default
    assert grace >= pod_grace  # the pod gets its whole grace period
    if notice_s is not None:
        assert grace <= notice_s - 15  # deleted before the instance goes, with time for the event to arrive
    assert grace < 45 * 60  # inside the destroy's EC2NodeClass deletion timeout


def test_a_grace_period_can_be_set_or_turned_off() -> None:
    """`karpenter.terminationGracePeriod` overrides the default; `Never` leaves the field unset, which the CRD
    describes as "the controller will wait indefinitely for pods to be drained"."""
    given = spec_with({**SPOT, "karpenter": {"terminationGracePeriod": "1m"}})
    assert node_pool(given, given.node_pools[0])["spec"]["template"]["spec"]["terminationGracePeriod"] == "1m"
    never = spec_with({**SPOT, "karpenter": {"terminationGracePeriod": "Never"}})
    assert "terminationGracePeriod" not in node_pool(never, never.node_pools[0])["spec"]["template"]["spec"]


def _seconds(duration: str) -> int:
    units = {"s": 1, "m": 60, "h": 3600}
    return sum(int(n) * units[u] for n, u in re.findall(r"([0-9]+)(s|m|h)", duration))
