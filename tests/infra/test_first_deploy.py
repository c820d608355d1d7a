"""What a first real `invoke deploy` on AWS needs, one rule per test; each docstring names its upstream source.

Nothing here reaches AWS: the rules EKS, EC2, the cluster-autoscaler, the GPU operator and the NVIDIA
container toolkit impose are encoded from their documents and sources, and the program's output (plans,
Helm values, Pulumi resource inputs under mocks) is checked against them.
"""

from __future__ import annotations

import base64
import email
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from infra import build
from infra.aws.addons.efa import efa_values
from infra.aws.addons.eks_addons import monitoring_agent_values
from infra.aws.cluster import placement_config, private_access_rules
from infra.aws.kubeconfig import kubeconfig
from infra.aws.nodepools import plan_gpu_pool, plan_node_groups, repair_config
from infra.aws.scheduler_config import EKS_SCHEDULER_RESOURCES
from infra.aws.tags import TEMPLATE
from infra.aws.userdata import ENVVAR_SETTING, TOOLKIT_CONFIG, node_user_data
from infra.errors import ConfigError
from infra.gpu_stack.gpu_operator import gpu_operator_values, tolerations
from infra.plan import build_plan
from infra.scheduling import ACCELERATOR_LABEL, scheduler_inputs
from infra.spec import ClusterSpec
from infra.stackfile import parse_config
from scheduler import compile
from scheduler.labels import POOL_LABEL
from tests.conftest import ROOT, load_example
from tests.infra.conftest import Mocks, after_registration
from tests.preflight.helpers import run_task, write_stack

AWS_EXAMPLES = ("dev", "example-prod")


def _config(*pools: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "aws:region": "us-east-1",
        "gpufleet:platform": "aws",
        "gpufleet:cluster": {"name": "c", "availabilityZones": ["us-east-1a", "us-east-1b", "us-east-1c"]},
        "gpufleet:nodePools": list(pools),
        **extra,
    }


def _problems(config: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(config, "t")
    return "\n".join(info.value.problems)


# A stack with every sharing mode (and EFA, Bottlerocket, several Spot types), every pool at minSize 0.
EVERY_MODE_POOLS: list[dict[str, Any]] = [
    {"name": "whole", "instanceType": "g6e.xlarge", "minSize": 0, "maxSize": 2},
    {
        "name": "sliced",
        # several types of one size (the autoscaler's rule): 8 x H200, 192 vCPU and 2 TiB
        "instanceTypes": ["p5e.48xlarge", "p5en.48xlarge"],
        "capacityType": "SPOT",
        "minSize": 0,
        "maxSize": 4,
        "sharing": {"timeSlicing": {"replicas": 4}},
    },
    {"name": "mig", "instanceType": "p5.48xlarge", "minSize": 0, "maxSize": 1, "sharing": {"mig": "1g.10gb"}},
    {
        "name": "efa",
        "instanceType": "p5.48xlarge",
        "minSize": 0,
        "maxSize": 2,
        "efa": True,
        "availabilityZone": "us-east-1a",
        "topologyLabels": [],  # at minSize 0 without ProvisioningRequests (infra.rules)
    },
    {
        "name": "rocket",
        "instanceType": "g6e.12xlarge",
        "minSize": 0,
        "maxSize": 2,
        "amiFamily": "BOTTLEROCKET_NVIDIA",
    },
]
EVERY_MODE = _config(
    *EVERY_MODE_POOLS,
    **{
        "gpufleet:teams": [
            {"name": "a", "quotas": {"whole": 2, "sliced": 4, "mig": 4, "efa": 16, "rocket": 8}},
        ]
    },
)


def every_mode_spec() -> ClusterSpec:
    return parse_config(EVERY_MODE, "every-mode")


# ---- 1. the managed scheduler's configuration -------------------------------------------------------------


def test_eks_scheduler_config_names_only_resources_eks_accepts_with_explicit_weights() -> None:
    """EKS User Guide, "Advanced Kubernetes control plane configuration" (scheduler): the managed scheduler
    scores only cpu, memory, nvidia.com/gpu, aws.amazon.com/neuron and aws.amazon.com/neuroncore; EKS API
    reference ResourceWeight: weight 1..100. An update keeps the old value of a field it omits, so the type and
    every default weight are always sent. example-prod has time-sliced and MIG pools, whose resources
    (nvidia.com/gpu.shared, nvidia.com/mig-1g.10gb) made CreateCluster fail."""
    for stack in AWS_EXAMPLES:
        strategy = placement_config(load_example(stack))["node_resources_fit"]["scoring_strategy"]
        names = [r["name"] for r in strategy["resources"]]
        assert set(names) <= set(EKS_SCHEDULER_RESOURCES)
        assert {"cpu", "memory", "nvidia.com/gpu"} <= set(names)  # explicit, even when the spec says nothing
        assert all(1 <= r["weight"] <= 100 for r in strategy["resources"])
        assert strategy["type"] == "MostAllocated"
    spec = every_mode_spec()
    names = [r["name"] for r in placement_config(spec)["node_resources_fit"]["scoring_strategy"]["resources"]]
    assert "nvidia.com/gpu.shared" not in names and not any(n.startswith("nvidia.com/mig-") for n in names)


def test_placement_weights_eks_refuses_are_refused_with_the_key_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """EKS User Guide, control-plane configuration: other resource names are refused by CreateCluster, after
    the VPC, KMS key and roles exist. The spec refuses them first: key path, exit 2, nothing created."""
    doc = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())
    doc["config"]["gpufleet:scheduling"] = {"placement": {"weights": {"nvidia.com/gpu.shared": 10, "cpu": 1}}}
    path = write_stack(tmp_path, "bad-weights", doc)
    result = run_task(capsys, "plan", "--stack", str(path), "--out", str(tmp_path / "out"))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "gpufleet:scheduling.placement.weights.nvidia.com/gpu.shared" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()
    # Existing clusters run their own scheduler, which takes any extended resource.
    assert (
        "nvidia.com/gpu.shared"
        in parse_config(
            {
                **yaml.safe_load((ROOT / "Pulumi.metal.yaml").read_text())["config"],
                "gpufleet:scheduling": {"placement": {"weights": {"nvidia.com/gpu.shared": 10}}},
            },
            "metal",
        ).scheduling.placement.weights
    )


# ---- 3. every pool scales up from zero -----------------------------------------------------------------


def _flavor_requests(spec: ClusterSpec) -> dict[str, dict[str, int]]:
    """pool -> the extended resources its Kueue flavor gives quota for (what its pods request)."""
    policy, pools = scheduler_inputs(spec)
    objects = compile(policy, pools)
    flavor_pool = {
        o["metadata"]["name"]: o["spec"].get("nodeLabels", {}).get(POOL_LABEL)
        for o in objects
        if o["kind"] == "ResourceFlavor"
    }
    wanted: dict[str, dict[str, int]] = {}
    for cq in (o for o in objects if o["kind"] == "ClusterQueue"):
        for group in cq["spec"]["resourceGroups"]:
            for flavor in group["flavors"]:
                pool = flavor_pool.get(flavor["name"])
                for res in flavor["resources"]:
                    if not pool or res["name"] in ("cpu", "memory"):
                        continue
                    if int(str(res["nominalQuota"])) > 0:
                        wanted.setdefault(pool, {})[res["name"]] = int(str(res["nominalQuota"]))
    return wanted


@pytest.mark.parametrize("stack", [*AWS_EXAMPLES, "every-mode"])
def test_every_flavor_resource_is_in_its_groups_node_template(stack: str) -> None:
    """cluster-autoscaler cloudprovider/aws/README.md, "Auto-Discovery Setup" / scaling a node group to 0:
    for a group with no node, the autoscaler builds the node from the ASG's
    `k8s.io/cluster-autoscaler/node-template/resources/<name>` tags; a pending pod whose request is missing
    from the template never triggers a scale-up. The counts come from scheduler.resources (the functions that
    size the Kueue quota): GPUs x replicas for nvidia.com/gpu.shared, GPUs x instances for
    nvidia.com/mig-<profile>. Before, every group advertised only nvidia.com/gpu."""
    spec = every_mode_spec() if stack == "every-mode" else load_example(stack)
    plans = {p.pool: p for p in plan_node_groups(spec)}
    wanted = _flavor_requests(spec)
    assert wanted, "the stack's teams give quota on its pools"
    for pool, resources in wanted.items():
        tags = plans[pool].autoscaler_tags
        for name in resources:
            assert int(tags.get(f"{TEMPLATE}/resources/{name}", "0")) > 0, (pool, name, tags)
    if stack == "every-mode":
        assert plans["sliced"].autoscaler_tags[f"{TEMPLATE}/resources/nvidia.com/gpu.shared"] == "32"  # 8 x 4
        assert plans["mig"].autoscaler_tags[f"{TEMPLATE}/resources/nvidia.com/mig-1g.10gb"] == "56"  # 8 x 7
        assert plans["efa"].autoscaler_tags[f"{TEMPLATE}/resources/vpc.amazonaws.com/efa"] == "32"
        for pool in ("sliced", "mig"):
            assert f"{TEMPLATE}/resources/nvidia.com/gpu" not in plans[pool].autoscaler_tags


def test_the_aws_gpu_label_only_on_pools_that_advertise_whole_gpus() -> None:
    """cluster-autoscaler processors/customresources/gpu_processor.go (FilterOutNodesWithUnreadyResources): a
    node labelled with the cloud provider's GPU label (AWS: `k8s.amazonaws.com/accelerator`,
    cloudprovider/aws/aws_cloud_provider.go GPULabel) and no allocatable nvidia.com/gpu counts as unready.
    Renamed time-slicing and mixed MIG leave nvidia.com/gpu at 0 for good, so once enough such nodes exist
    the autoscaler stops scaling the whole cluster (kubernetes/autoscaler#8095, #7050)."""
    plans = {p.pool: p for p in plan_node_groups(every_mode_spec())}
    for pool in ("sliced", "mig"):
        assert ACCELERATOR_LABEL not in plans[pool].labels
        assert f"{TEMPLATE}/label/{ACCELERATOR_LABEL}" not in plans[pool].autoscaler_tags
    for pool in ("whole", "efa", "rocket"):
        assert plans[pool].labels[ACCELERATOR_LABEL].startswith("nvidia-")


# ---- 4. network ordering ----------------------------------------------------------------------------------


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_eips_and_nat_gateways_wait_for_the_internet_gateway(mocks: Mocks) -> pulumi.Output[Any]:
    """Terraform AWS provider docs (which pulumi-aws wraps), aws_eip and aws_nat_gateway: "EIP may require IGW
    to exist prior to association. Use depends_on to set an explicit dependency on the IGW." Their inputs do
    not reference the gateway, so without it the engine creates them in parallel and the first `up` fails
    now and then."""

    def check(m: Mocks) -> None:
        (igw,) = m.of_type("aws:ec2/internetGateway:InternetGateway")
        eips, nats = m.of_type("aws:ec2/eip:Eip"), m.of_type("aws:ec2/natGateway:NatGateway")
        assert len(eips) == len(nats) == 3
        for res in (*eips, *nats):
            assert igw.urn in res.dependencies, res.name

    outputs = build(load_example("example-prod"))  # the program first, then the check that waits for it
    return pulumi.Output.all(after_registration(lambda: check(mocks)), outputs)


# ---- 5. EFA pools in one zone, EFA-only interfaces ----------------------------------------------------------


def test_efa_pools_are_pinned_to_one_zone() -> None:
    """EC2 User Guide, "Placement groups": a cluster placement group cannot span Availability Zones. An EFA
    pool on ON_DEMAND or SPOT capacity gets one, so its group must be in one zone: `availabilityZone` is
    required there (and accepted), its subnets are that zone's."""
    efa = {"name": "e", "instanceType": "p5.48xlarge", "maxSize": 2, "efa": True, "topologyLabels": []}
    assert "gpufleet:nodePools[0].availabilityZone: required for efa pools" in _problems(_config(efa))
    assert "gpufleet:nodePools[0].availabilityZones: efa pools" in _problems(
        _config({**efa, "availabilityZones": ["us-east-1a", "us-east-1b"]})
    )
    assert "'us-east-1f' is not one of the cluster's zones" in _problems(
        _config({**efa, "availabilityZone": "us-east-1f"})
    )
    (_, plan) = plan_node_groups(parse_config(_config({**efa, "availabilityZone": "us-east-1b"}), "t"))
    assert plan.placement_group and plan.availability_zones == ("us-east-1b",)
    # and a non-EFA, non-capacity-block pool still may not use the one-zone key
    assert "availabilityZone: only for capacityType CAPACITY_BLOCK or efa pools" in _problems(
        _config({"name": "g", "instanceType": "g6e.xlarge", "maxSize": 1, "availabilityZone": "us-east-1a"})
    )


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_an_efa_pools_group_uses_only_its_zones_subnet(mocks: Mocks) -> pulumi.Output[Any]:
    """The placement group's zone and the node group's subnets must agree (EC2 refuses a launch into a
    cluster placement group from another zone)."""
    spec = every_mode_spec()

    def check(m: Mocks) -> None:
        (group,) = [g for g in m.of_type("aws:eks/nodeGroup:NodeGroup") if g.name == "c-nodes-efa"]
        (subnet,) = group.inputs["subnetIds"]
        assert "us-east-1a" in subnet
        (pg,) = m.of_type("aws:ec2/placementGroup:PlacementGroup")
        assert pg.inputs["strategy"] == "cluster"

    outputs = build(spec)  # the program first, then the check that waits for it
    return pulumi.Output.all(after_registration(lambda: check(mocks)), outputs)


def test_efa_only_interfaces_on_every_network_card_but_the_first() -> None:
    """EC2 User Guide, "Maximize network bandwidth on instances with multiple network cards" (efa-acc-inst-types):
    the primary interface (card 0, device 0) cannot be EFA-only; each further card gets an EFA-only interface
    at device index 0, which takes no IP address. A p5.48xlarge with 32 EFA-with-ENA interfaces took 32 VPC
    addresses per node."""
    plan = plan_gpu_pool(every_mode_spec(), every_mode_spec().pool("efa"))
    nics = plan.launch_template({}, "sg-1", "pg")["network_interfaces"]
    assert len(nics) == 32
    assert (nics[0]["network_card_index"], nics[0]["device_index"], nics[0]["interface_type"]) == (
        0,
        0,
        "efa",
    )
    assert all(n["interface_type"] == "efa-only" and n["device_index"] == 0 for n in nics[1:])
    assert [n["network_card_index"] for n in nics] == list(range(32))


# ---- 6. auto-repair -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("max_size", "threshold"), [(1, 1), (3, 1), (4, 2), (16, 5)])
def test_auto_repair_counts_unhealthy_nodes_and_repairs_one_at_a_time(max_size: int, threshold: int) -> None:
    """EKS API reference NodeRepairConfig: maxUnhealthyNodeThresholdCount / maxParallelNodesRepairedCount
    (minimum 1; each excludes its percentage twin). With a 30 % threshold one sick node of three (33 %)
    stopped all repairs; as counts, a group repairs while at most ~30 % of its maximum (at least one node) is
    sick, one node at a time."""
    config = repair_config(max_size)
    assert config == {
        "enabled": True,
        "max_parallel_nodes_repaired_count": 1,
        "max_unhealthy_node_threshold_count": threshold,
    }
    assert not {"max_parallel_nodes_repaired_percentage", "max_unhealthy_node_threshold_percentage"} & set(
        config
    )


# ---- 7. one DCGM host engine per node, reaching the GPU nodes ---------------------------------------------


def test_node_monitoring_agents_dcgm_server_tolerates_the_gpu_and_pool_taints() -> None:
    """aws/eks-node-monitoring-agent v1.6.6 charts/eks-node-monitoring-agent/values.yaml: `dcgmAgent.tolerations`
    defaults to [], so the dcgm-server DaemonSet never runs on nodes tainted nvidia.com/gpu and
    AcceleratedHardwareReady gets no DCGM signal; charts/configuration.schema.json accepts
    `dcgmAgent.tolerations` as add-on configuration."""
    spec = parse_config(
        _config(
            {
                "name": "g",
                "instanceType": "g6e.xlarge",
                "maxSize": 1,
                "taints": [{"key": "team", "value": "ml", "effect": "NoExecute"}],
            }
        ),
        "t",
    )
    values = monitoring_agent_values(spec)
    assert set(values) == {"dcgmAgent", "extraObjects"}  # extraObjects: the dcgm-server NetworkPolicy
    tols = values["dcgmAgent"]["tolerations"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in tols
    assert {"key": "team", "operator": "Exists", "effect": "NoExecute"} in tols


def test_dcgm_exporter_uses_the_agents_host_engine_on_eks() -> None:
    """The agent's dcgm-server runs `nv-hostengine -n -b ALL` on host port 5555 (templates/dcgm-daemonset.yaml).
    dcgm-exporter's `--remote-hostengine-info` / DCGM_REMOTE_HOSTENGINE_INFO connects to a running engine
    instead of starting an embedded one (dcgm-exporter pkg/cmd/app.go); on the host network, localhost:5555 is
    that engine. Existing clusters keep the exporter's own engine (no agent there)."""
    exporter = gpu_operator_values(load_example("example-prod"))["dcgmExporter"]
    assert exporter["hostNetwork"] is True
    assert {"name": "DCGM_REMOTE_HOSTENGINE_INFO", "value": "localhost:5555"} in exporter["env"]
    metal = gpu_operator_values(load_example("metal"))["dcgmExporter"]
    assert "hostNetwork" not in metal
    assert all(e["name"] != "DCGM_REMOTE_HOSTENGINE_INFO" for e in metal.get("env", []))


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_the_monitoring_add_on_gets_its_configuration(mocks: Mocks) -> pulumi.Output[Any]:
    """`configuration_values` of aws.eks.Addon is a JSON document of chart values (EKS API CreateAddon)."""

    def check(m: Mocks) -> None:
        (addon,) = [
            a
            for a in m.of_type("aws:eks/addon:Addon")
            if a.inputs["addonName"] == "eks-node-monitoring-agent"
        ]
        config = json.loads(addon.inputs["configurationValues"])
        assert config["dcgmAgent"]["tolerations"] == tolerations(load_example("example-prod"))

    outputs = build(load_example("example-prod"))  # the program first, then the check that waits for it
    return pulumi.Output.all(after_registration(lambda: check(mocks)), outputs)


# ---- 8. capacity blocks are never scaled down: tests/infra/test_autoscaler_scale_down.py ----------------------


def test_plan_says_a_running_capacity_block_cannot_change_version() -> None:
    """EKS User Guide, "Capacity Blocks for ML" with managed node groups: update the group's AMI or version only
    at desired size 0. The plan says so for a capacity-block pool that is meant to run nodes; preflight
    (tests/preflight/test_first_deploy_preflight.py) refuses the change against the live group."""
    doc = yaml.safe_load((ROOT / "Pulumi.example-prod.yaml").read_text())["config"]
    doc["gpufleet:nodePools"][0].update({"minSize": 2, "desiredSize": 2})
    notes = build_plan(parse_config(doc, "cb")).notes
    assert any(n.startswith("h100-train: CAPACITY_BLOCK with desiredSize 2") for n in notes)


# ---- 9. MIG on AL2023 -----------------------------------------------------------------------------------


def test_mig_manager_may_reboot_and_the_device_plugin_waits_for_the_layout() -> None:
    """GPU operator docs, "GPU Operator with MIG": in a CSP environment set migManager env WITH_REBOOT=true so
    the node reboots to apply MIG mode. NVIDIA/gpu-operator#2670: a node that boots with nvidia.com/mig.config
    already set (a scale-from-zero group's label) runs the device plugin before mig-manager has partitioned
    the GPUs. Booting with nvidia.com/gpu.deploy.device-plugin=paused-for-mig-change holds it back: mig-manager
    v0.15.0 applies the label's layout at start and sets paused operands to "true" after
    (mig-parted pkg/mig/reconfigure/reconfigure.go, maybeSetTrue)."""
    values = gpu_operator_values(load_example("example-prod"))["migManager"]
    assert values["enabled"] is True and {"name": "WITH_REBOOT", "value": "true"} in values["env"]
    plans = {p.pool: p for p in plan_node_groups(load_example("example-prod"))}
    assert plans["h100-mig"].labels["nvidia.com/gpu.deploy.device-plugin"] == "paused-for-mig-change"
    assert plans["h100-mig"].labels["nvidia.com/mig.config"] == "all-1g.10gb"
    for pool in ("h100-train", "a10g-batch"):
        assert "nvidia.com/gpu.deploy.device-plugin" not in plans[pool].labels
    # the operand switches are gpufleet's: a user label must not flip them
    assert "labels.nvidia.com/gpu.deploy.device-plugin: set by gpufleet" in _problems(
        _config(
            {
                "name": "g",
                "instanceType": "g6e.xlarge",
                "maxSize": 1,
                "labels": {"nvidia.com/gpu.deploy.device-plugin": "true"},
            }
        )
    )


# ---- 10. kubeconfig identity ------------------------------------------------------------------------------


def test_kubeconfig_authenticates_as_the_providers_profile_and_role() -> None:
    """The cluster creator is its only admin until access entries exist (EKS User Guide, "Grant IAM users
    access to Kubernetes with EKS access entries": bootstrapClusterCreatorAdminPermissions), so `aws eks
    get-token` must run as the AWS provider's identity: its profile (AWS_PROFILE in the exec env) and its
    assumed role (`--role-arn`, aws eks get-token reference)."""
    doc = json.loads(
        kubeconfig(
            "c1", "https://x", "Q0E=", "us-west-2", profile="ml", role_arn="arn:aws:iam::1:role/deploy"
        )
    )
    exec_ = doc["users"][0]["user"]["exec"]
    assert exec_["args"][-2:] == ["--role-arn", "arn:aws:iam::1:role/deploy"]
    assert exec_["env"] == [{"name": "AWS_PROFILE", "value": "ml"}]
    plain = json.loads(kubeconfig("c1", "https://x", "Q0E=", "us-west-2"))["users"][0]["user"]["exec"]
    assert "env" not in plain and "--role-arn" not in plain["args"]


# ---- 2. private access rules --------------------------------------------------------------------------------


def test_private_endpoint_gets_port_443_from_the_connected_networks() -> None:
    """EKS User Guide, "Cluster API server endpoint": with private access, requests must come from the VPC or
    a connected network, and the cluster security group must allow them on port 443."""
    spec = parse_config(
        {
            **_config({"name": "g", "instanceType": "g6e.xlarge", "maxSize": 1}),
            "gpufleet:cluster": {
                "name": "c",
                "endpointAccess": {
                    "privateAccessCidrs": ["10.8.0.0/16"],
                    "privateAccessSecurityGroupIds": ["sg-0123456789abcdef0"],
                },
                "network": {"vpcId": "vpc-1", "privateSubnetIds": ["subnet-1"]},
            },
        },
        "t",
    )
    rules = private_access_rules(spec)
    assert {(r.get("cidr_ipv4"), r.get("referenced_security_group_id")) for r in rules} == {
        ("10.8.0.0/16", None),
        (None, "sg-0123456789abcdef0"),
    }
    assert all((r["ip_protocol"], r["from_port"], r["to_port"]) == ("tcp", 443, 443) for r in rules)
    assert "privateAccessCidrs" in _problems(
        {
            **_config({"name": "g", "instanceType": "g6e.xlarge", "maxSize": 1}),
            "gpufleet:cluster": {"name": "c", "endpointAccess": {"privateAccessCidrs": ["0.0.0.0/0"]}},
        }
    )


# ---- 12. pool options -------------------------------------------------------------------------------------


def test_spot_pools_take_several_instance_types_of_one_gpu_model_and_count() -> None:
    """EKS API CreateNodegroup `instanceTypes`: a managed node group takes several types (Spot draws on several
    capacity pools). One pool is one Kueue flavor, so every type must have the same GPU model, GPU count and
    architecture; its CPU and memory quota come from the smallest type. Under the cluster autoscaler they
    also share one size (tests/infra/test_aws_pool_sizes_and_roles.py)."""
    spec = every_mode_spec()
    sliced = spec.pool("sliced")
    assert sliced.instance_type == "p5e.48xlarge" and sliced.gpus_per_node == 8
    plan = {p.pool: p for p in plan_node_groups(spec)}["sliced"]
    assert plan.instance_types == ("p5e.48xlarge", "p5en.48xlarge")
    mixed = {"name": "m", "instanceTypes": ["g5.2xlarge", "g6e.xlarge"], "capacityType": "SPOT", "maxSize": 1}
    assert "gpufleet:nodePools[0].instanceTypes[1]: g6e.xlarge has 1 x L40S" in _problems(_config(mixed))
    both = {"name": "b", "instanceType": "g6e.xlarge", "instanceTypes": ["g5.2xlarge"], "maxSize": 1}
    assert "gpufleet:nodePools[0].instanceTypes[0]: g5.2xlarge has 1 x A10G" in _problems(_config(both))
    block = {
        "name": "k",
        "instanceTypes": ["p5.48xlarge"],
        "capacityType": "CAPACITY_BLOCK",
        "maxSize": 1,
        "capacityReservationId": "cr-0123456789abcdef0",
        "availabilityZone": "us-east-1a",
    }
    assert "a capacity block reserves one instance type" in _problems(_config(block))
    assert "gpufleet:nodePools[0].instanceTypes: only for platform aws" in _problems(
        {
            **yaml.safe_load((ROOT / "Pulumi.metal.yaml").read_text())["config"],
            "gpufleet:nodePools": [
                {
                    "name": "x",
                    "hosts": ["h1"],
                    "gpuModel": "L40S",
                    "gpusPerNode": 1,
                    "instanceTypes": ["g6e.xlarge"],
                }
            ],
        }
    )


def test_pools_choose_their_zones_within_the_clusters() -> None:
    """EC2 DescribeInstanceTypeOfferings: p5 and g6e are not offered in every zone, so a pool may narrow its
    zones; its nodes use the cluster's subnets, so the zones must be among the cluster's (and in the region)."""
    spec = parse_config(
        _config(
            {"name": "g", "instanceType": "g6e.xlarge", "maxSize": 1, "availabilityZones": ["us-east-1b"]}
        ),
        "t",
    )
    (_, plan) = plan_node_groups(spec)
    assert plan.availability_zones == ("us-east-1b",)
    problems = _problems(
        _config(
            {
                "name": "g",
                "instanceType": "g6e.xlarge",
                "maxSize": 1,
                "availabilityZones": ["us-east-1d", "eu-west-1a"],
            }
        )
    )
    assert (
        "gpufleet:nodePools[0].availabilityZones[0]: 'us-east-1d' is not one of the cluster's zones"
        in problems
    )
    assert "gpufleet:nodePools[0].availabilityZones[1]: 'eu-west-1a' is not in region us-east-1" in problems


def test_bottlerocket_pools_get_no_gpu_operator_operand() -> None:
    """Bottlerocket NVIDIA variants ship the driver, toolkit and their own device plugin (Bottlerocket docs,
    "NVIDIA GPUs"); the GPU operator's toolkit, validator and MIG manager do not support it. Every operand
    is switched off by `nvidia.com/gpu.deploy.operands=false` (GPU operator docs, disabling operands on a
    node); sharing, which needs the operator's device plugin, is refused on Bottlerocket."""
    plans = {p.pool: p for p in plan_node_groups(load_example("example-prod"))}
    assert plans["l40s-infer"].labels["nvidia.com/gpu.deploy.operands"] == "false"
    assert plans["l40s-infer"].user_data is None  # its toolkit is configured by the OS
    assert "sharing: timeSlicing needs the GPU operator's device plugin" in _problems(
        _config(
            {
                "name": "b",
                "instanceType": "g6e.xlarge",
                "maxSize": 1,
                "amiFamily": "BOTTLEROCKET_NVIDIA",
                "sharing": {"timeSlicing": {"replicas": 2}},
            }
        )
    )


@pytest.mark.parametrize(
    ("region", "registry"),
    [
        ("us-east-1", "602401143452.dkr.ecr.us-east-1.amazonaws.com"),
        ("af-south-1", "877085696533.dkr.ecr.af-south-1.amazonaws.com"),
        ("cn-north-1", "918309763551.dkr.ecr.cn-north-1.amazonaws.com.cn"),
    ],
)
def test_the_efa_plugin_image_comes_from_the_stacks_region(region: str, registry: str) -> None:
    """EKS User Guide, "View Amazon container image registries for Amazon EKS add-ons": each region has its
    own registry (own accounts in opt-in regions, the .com.cn domain in China). The chart's default image is
    us-west-2's, which China and GovCloud nodes cannot pull."""
    efa = {
        "name": "e",
        "instanceType": "p5.48xlarge",
        "maxSize": 1,
        "efa": True,
        "availabilityZone": f"{region}a",
        "topologyLabels": [],
    }
    config = {
        **_config(efa),
        "aws:region": region,
        "gpufleet:cluster": {"name": "c", "availabilityZones": [f"{region}a", f"{region}b"]},
    }
    values = efa_values(parse_config(config, "t"))
    assert values["image"] == {"repository": f"{registry}/eks/aws-efa-k8s-device-plugin"}
    # a real region (botocore knows it, so the region rule passes) whose EKS registry gpufleet does not list
    from infra.aws.addons.registries import eks_addon_registry
    from infra.aws.rules import aws_regions

    other = next(r for r in sorted(aws_regions()) if eks_addon_registry(r) is None)
    unknown = {
        **config,
        "aws:region": other,
        "gpufleet:cluster": {"name": "c", "availabilityZones": [f"{other}a"]},
    }
    unknown["gpufleet:nodePools"] = [{**efa, "availabilityZone": f"{other}a"}]
    assert f"aws:region: the EFA device plugin's image registry for {other!r}" in _problems(unknown)


# ---- 11. no GPU through NVIDIA_VISIBLE_DEVICES ------------------------------------------------------------


def test_al2023_gpu_nodes_refuse_nvidia_visible_devices_from_unprivileged_containers() -> None:
    """nvidia-container-toolkit v1.20.0 api/config/v1/config.go: `accept-nvidia-visible-devices-envvar-when-
    unprivileged` (top-level key of /etc/nvidia-container-runtime/config.toml) defaults to true, letting any
    container that sets NVIDIA_VISIBLE_DEVICES=all see every GPU; `nvidia-ctk config --in-place --set
    key=value` (cmd/nvidia-ctk/config) edits that file. EKS User Guide, "Customize managed nodes with launch
    templates": AL2023 user data is MIME multi-part and EKS merges its own NodeConfig part with it."""
    raw = node_user_data("AL2023_NVIDIA")
    assert raw is not None
    message = email.message_from_bytes(base64.b64decode(raw))
    assert message.is_multipart()
    (part,) = message.get_payload()
    assert part.get_content_type() == "text/x-shellscript"
    script = part.get_payload()
    assert script.startswith("#!/bin/bash\n")
    assert f"nvidia-ctk config --in-place --config {TOOLKIT_CONFIG} --set {ENVVAR_SETTING}=false" in script
    assert ENVVAR_SETTING == "accept-nvidia-visible-devices-envvar-when-unprivileged"
    assert node_user_data("BOTTLEROCKET_NVIDIA") is None and node_user_data("AL2023") is None
    # every AL2023 GPU group's launch template carries it; the system group's does not
    for plan in plan_node_groups(load_example("example-prod")):
        data = plan.launch_template({}, "sg", None)
        assert (data.get("user_data") == raw) == (plan.ami_family == "AL2023_NVIDIA"), plan.pool


def test_the_user_data_script_is_valid_bash() -> None:
    """The script runs under cloud-init with `set -euo pipefail`; a syntax error would leave the default on."""
    raw = node_user_data("AL2023_NVIDIA") or ""
    (part,) = email.message_from_bytes(base64.b64decode(raw)).get_payload()
    result = subprocess.run(["bash", "-n"], input=part.get_payload(), text=True, capture_output=True)
    assert result.returncode == 0, result.stderr


# ---- 13. structure --------------------------------------------------------------------------------------


def test_the_spec_models_load_without_their_rules() -> None:
    """The spec models are a leaf: importing them must not import the rules, the scheduler bridge, the loader
    or the scheduler (which would close a circle spec -> rules -> scheduling -> spec). Checked in a fresh
    interpreter, so it holds whatever this test run imported before."""
    code = (
        "import sys, infra.spec; "
        "bad = [m for m in ('infra.rules', 'infra.scheduling', 'infra.stackfile', 'scheduler') if m in sys.modules]; "
        "print(','.join(bad))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_the_stack_kubeconfig_carries_the_aws_providers_profile_and_role() -> pulumi.Output[Any]:
    """Pulumi AWS provider configuration `aws:profile` and `aws:assumeRoles` (pulumi-aws installation &
    configuration docs): the identity the program created the cluster with is the one `aws eks get-token`
    must use."""
    role = "arn:aws:iam::123456789012:role/deployer"
    pulumi.runtime.set_config("aws:profile", "ml-admin")
    pulumi.runtime.set_config("aws:assumeRoles", json.dumps([{"roleArn": role}]))
    try:
        outputs = build(load_example("dev"))
    finally:
        config = pulumi.runtime.config.CONFIG.get()
        config.pop("aws:profile", None)
        config.pop("aws:assumeRoles", None)

    def check(text: str) -> None:
        exec_ = json.loads(text)["users"][0]["user"]["exec"]
        assert exec_["env"] == [{"name": "AWS_PROFILE", "value": "ml-admin"}]
        assert exec_["args"][-2:] == ["--role-arn", role]

    return outputs["kubeconfig"].apply(check)
