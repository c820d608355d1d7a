"""The pure AWS builders: subnet layout, tags, IAM documents, launch-template data, node group plans."""

from __future__ import annotations

import ipaddress
import json

import pytest

from infra.aws import iam
from infra.aws.cluster import endpoint_config, placement_config
from infra.aws.kubeconfig import kubeconfig
from infra.aws.launch_template import launch_template_data
from infra.aws.network import subnet_cidrs
from infra.aws.nodepools import plan_node_groups, plan_system_pool
from infra.aws.tags import autoscaler_tags, partition
from infra.errors import ConfigError
from infra.stackfile import parse_config
from tests.conftest import load_example


@pytest.mark.parametrize("zones", [1, 2, 3, 4, 6])
def test_subnets_are_disjoint_inside_the_vpc(zones: int) -> None:
    private, public = subnet_cidrs("10.40.0.0/16", zones)
    nets = [ipaddress.ip_network(c) for c in private + public]
    assert len(private) == len(public) == zones
    vpc = ipaddress.ip_network("10.40.0.0/16")
    assert all(n.subnet_of(vpc) for n in nets)
    assert not any(a.overlaps(b) for i, a in enumerate(nets) for b in nets[i + 1 :])
    # Nodes and pods take their IPs from the private subnets: they get the larger blocks.
    assert min(n.num_addresses for n in nets[:zones]) > max(n.num_addresses for n in nets[zones:])


def test_autoscaler_tags_describe_the_node_template() -> None:
    tags = autoscaler_tags(
        "c1",
        {"gpufleet.io/pool": "h100"},
        [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
        {"nvidia.com/gpu": 8},
    )
    assert tags["k8s.io/cluster-autoscaler/c1"] == "owned"
    assert tags["k8s.io/cluster-autoscaler/enabled"] == "true"
    assert tags["k8s.io/cluster-autoscaler/node-template/resources/nvidia.com/gpu"] == "8"
    assert tags["k8s.io/cluster-autoscaler/node-template/label/gpufleet.io/pool"] == "h100"
    assert tags["k8s.io/cluster-autoscaler/node-template/taint/nvidia.com/gpu"] == "true:NoSchedule"
    assert "k8s.io/cluster-autoscaler/node-template/resources/nvidia.com/gpu" not in autoscaler_tags(
        "c1", {}, [], {}
    )


def test_autoscaler_policy_writes_only_to_this_clusters_groups() -> None:
    doc = json.loads(iam.autoscaler_policy("gpufleet-prod"))
    writes = [s for s in doc["Statement"] if "autoscaling:SetDesiredCapacity" in s["Action"]]
    assert len(writes) == 1
    assert writes[0]["Condition"] == {
        "StringEquals": {"aws:ResourceTag/k8s.io/cluster-autoscaler/gpufleet-prod": "owned"}
    }
    reads = [s for s in doc["Statement"] if "Condition" not in s]
    assert all(a.split(":")[1].startswith(("Describe", "Get")) for s in reads for a in s["Action"])
    assert "eks:DescribeNodegroup" in reads[0]["Action"]


def test_irsa_trust_is_limited_to_one_service_account() -> None:
    doc = json.loads(
        iam.irsa_trust_policy(
            "arn:aws:iam::1:oidc-provider/oidc.eks.x/id/AB", "https://oidc.eks.x/id/AB", "kube-system", "ca"
        )
    )
    cond = doc["Statement"][0]["Condition"]["StringEquals"]
    assert cond == {
        "oidc.eks.x/id/AB:sub": "system:serviceaccount:kube-system:ca",
        "oidc.eks.x/id/AB:aud": "sts.amazonaws.com",
    }


def test_partitions() -> None:
    assert [partition(r) for r in ("us-east-1", "cn-north-1", "us-gov-west-1")] == [
        "aws",
        "aws-cn",
        "aws-us-gov",
    ]


def test_launch_template_requires_imdsv2_and_encrypts_the_data_volume() -> None:
    al2023 = launch_template_data(ami_family="AL2023_NVIDIA", volume_gib=500, tags={})
    assert al2023["metadata_options"]["http_tokens"] == "required"
    assert al2023["metadata_options"]["http_put_response_hop_limit"] == 1
    (disk,) = al2023["block_device_mappings"]
    assert disk["device_name"] == "/dev/xvda"
    assert disk["ebs"] == {
        "volume_size": 500,
        "volume_type": "gp3",
        "encrypted": "true",
        "delete_on_termination": "true",
    }
    bottlerocket = launch_template_data(ami_family="BOTTLEROCKET_NVIDIA", volume_gib=200, tags={})
    assert bottlerocket["block_device_mappings"][0]["device_name"] == "/dev/xvdb"
    # EKS rejects a template that names what the node group sets (subnets, AMI, instance profile).
    for forbidden in (
        "image_id",
        "iam_instance_profile",
        "vpc_security_group_ids",
        "instance_type",
    ):
        assert forbidden not in al2023


def test_launch_template_never_combines_a_reservation_with_a_placement_group() -> None:
    with pytest.raises(ValueError, match="placement"):
        launch_template_data(
            ami_family="AL2023_NVIDIA",
            volume_gib=100,
            tags={},
            placement_group="pg",
            capacity_reservation_id="cr-1",
        )


def test_prod_plans() -> None:
    spec = load_example("example-prod")
    plans = {p.pool: p for p in plan_node_groups(spec)}
    assert list(plans) == ["system", "h100-train", "l40s-infer", "a10g-batch", "h100-mig"]
    train, infer, batch, mig = (
        plans["h100-train"],
        plans["l40s-infer"],
        plans["a10g-batch"],
        plans["h100-mig"],
    )
    assert train.capacity_type == "CAPACITY_BLOCK" and train.availability_zones == ("us-east-1a",)
    assert train.efa_interfaces == 32 and not train.placement_group  # the reservation places the instances
    lt = train.launch_template({}, "sg-1", None)
    assert lt["instance_market_options"] == {"market_type": "capacity-block"}
    assert lt["capacity_reservation_specification"]["capacity_reservation_target"] == {
        "capacity_reservation_id": "cr-0123456789abcdef0"
    }
    assert lt["instance_type"] == "p5.48xlarge" and train.instance_type_in_template
    nics = lt["network_interfaces"]
    assert len(nics) == 32 and [n["interface_type"] for n in nics[:2]] == ["efa", "efa-only"]
    assert {n["device_index"] for n in nics} == {0} and nics[31]["network_card_index"] == 31
    assert infer.ami_type == "BOTTLEROCKET_x86_64_NVIDIA"
    assert infer.release_version == spec.versions.bottlerocket_nvidia_release
    assert infer.labels["nvidia.com/gpu.deploy.operands"] == "false"
    assert "nvidia.com/gpu.deploy.device-plugin" not in batch.labels
    assert (
        batch.ami_type == "AL2023_x86_64_NVIDIA"
        and batch.release_version == spec.versions.al2023_nvidia_ami_release
    )
    assert batch.capacity_type == "SPOT" and batch.availability_zones is None
    assert mig.labels["nvidia.com/mig.config"] == "all-1g.10gb"
    for plan in (train, infer, batch, mig):
        assert plan.taints[0] == {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
        assert plan.eks_taints[0]["effect"] == "NO_SCHEDULE"
        assert plan.labels["gpufleet.io/pool"] == plan.pool
        assert plan.labels["nvidia.com/gpu.present"] == "true"
        assert plan.repair["max_parallel_nodes_repaired_count"] == 1
    assert plans["system"].ami_type == "AL2023_x86_64_STANDARD" and not plans["system"].taints


def _efa_spec(capacity: str) -> dict:
    pool = {
        "name": "h",
        "instanceType": "p5.48xlarge",
        "capacityType": capacity,
        "maxSize": 2,
        "efa": True,
        "availabilityZone": "us-east-1a",
        "topologyLabels": [],  # from zero without ProvisioningRequests (infra.rules)
    }
    return {
        "aws:region": "us-east-1",
        "gpufleet:platform": "aws",
        "gpufleet:cluster": {"name": "c"},
        "gpufleet:nodePools": [pool],
    }


@pytest.mark.parametrize("capacity", ["ON_DEMAND", "SPOT"])
def test_efa_on_demand_and_spot_pools_get_a_placement_group(capacity: str) -> None:
    (_, plan) = plan_node_groups(parse_config(_efa_spec(capacity), "t"))
    assert plan.placement_group and plan.efa_interfaces == 32
    assert plan.launch_template({}, "sg", "pg-name")["placement"] == {"group_name": "pg-name"}


def test_an_arm_system_pool_uses_the_arm_ami() -> None:
    """EKS API Nodegroup `amiType`: the AMI follows the instance's architecture (AL2023_ARM_64_STANDARD for
    Graviton). GPU pools are amd64 only on aws (tests/infra/test_eks_addons_on_gpu_nodes.py)."""
    config = _efa_spec("ON_DEMAND")
    config["gpufleet:systemPool"] = {"instanceType": "m7g.xlarge"}
    system = plan_system_pool(parse_config(config, "t"))
    assert system.ami_type == "AL2023_ARM_64_STANDARD"


def test_a_pool_named_system_is_refused() -> None:
    config = _efa_spec("ON_DEMAND")
    config["gpufleet:nodePools"] = [{"name": "system", "instanceType": "g5.xlarge", "maxSize": 1}]
    with pytest.raises(ConfigError, match=r"nodePools\[0\]\.name"):
        parse_config(config, "t")


def test_byo_network_needs_private_subnets() -> None:
    config = _efa_spec("ON_DEMAND")
    config["gpufleet:cluster"] = {"name": "c", "network": {"vpcId": "vpc-1"}}
    with pytest.raises(ConfigError, match="privateSubnetIds"):
        parse_config(config, "t")


def test_endpoint_is_private_unless_an_allow_list_is_given() -> None:
    config = _efa_spec("ON_DEMAND")
    config["gpufleet:nodePools"] = [{"name": "g", "instanceType": "g5.xlarge", "maxSize": 1}]
    assert endpoint_config(parse_config(config, "t")) == {
        "endpoint_private_access": True,
        "endpoint_public_access": False,
    }
    prod = endpoint_config(load_example("example-prod"))
    assert prod["endpoint_public_access"] and prod["public_access_cidrs"] == ["203.0.113.0/24"]
    # dev deploys from a laptop: public, behind the one address its stack file says to replace
    assert endpoint_config(load_example("dev"))["public_access_cidrs"] == ["198.51.100.10/32"]


def test_scheduler_config_packs_gpus() -> None:
    config = placement_config(load_example("example-prod"))
    strategy = config["node_resources_fit"]["scoring_strategy"]
    assert strategy["type"] == "MostAllocated"
    weights = {r["name"]: r["weight"] for r in strategy["resources"]}
    assert weights["nvidia.com/gpu"] > weights["cpu"] and weights["nvidia.com/gpu"] > weights["memory"]
    assert all(1 <= w <= 100 for w in weights.values())  # EKS accepts weights 1..100


def test_kubeconfig_uses_the_aws_cli_token() -> None:
    doc = json.loads(kubeconfig("c1", "https://x", "Q0E=", "us-west-2"))
    assert doc["clusters"][0]["cluster"] == {"server": "https://x", "certificate-authority-data": "Q0E="}
    exec_ = doc["users"][0]["user"]["exec"]
    assert exec_["command"] == "aws" and exec_["args"][:4] == ["eks", "get-token", "--cluster-name", "c1"]
    assert "token" not in json.dumps(doc["users"][0]["user"]).replace("get-token", "")


def test_bottlerocket_pools_cannot_share_gpus() -> None:
    config = _efa_spec("ON_DEMAND")
    config["gpufleet:nodePools"] = [
        {
            "name": "g",
            "instanceType": "g5.xlarge",
            "maxSize": 1,
            "amiFamily": "BOTTLEROCKET_NVIDIA",
            "sharing": {"timeSlicing": {"replicas": 4}},
        }
    ]
    with pytest.raises(ConfigError, match=r"nodePools\[0\]\.sharing: timeSlicing"):
        parse_config(config, "t")


def test_a_topology_pool_from_zero_needs_the_check_on_that_pool() -> None:
    """A topology-aware EFA pool at minSize 0 starts gangs only if its own jobs wait for the autoscaler:
    listing that pool in `provisioningRequests` is enough, listing another is not."""
    doc = _efa_spec("ON_DEMAND")
    del doc["gpufleet:nodePools"][0]["topologyLabels"]  # the EKS network layers: topology-aware
    other = {"name": "l", "instanceType": "g6e.12xlarge", "maxSize": 2}
    doc["gpufleet:nodePools"].append(other)
    doc["gpufleet:scheduling"] = {"provisioningRequests": ["l"]}
    with pytest.raises(ConfigError, match=r"nodePools\[0\]: topology-aware .* list the pool there"):
        parse_config(doc, "t")
    doc["gpufleet:scheduling"] = {"provisioningRequests": ["h"]}
    spec = parse_config(doc, "t")
    assert spec.scheduling.provisions("h") and not spec.scheduling.provisions("l")
