"""`build(spec)` for the AWS example stacks under Pulumi's mocks: the resource inputs the program sends."""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pytest

from infra import build
from infra.errors import ConfigError
from infra.stackfile import parse_config
from tests.conftest import load_example
from tests.infra.conftest import Mocks, Recorded, after_registration, assert_scheduling_after

NG = "aws:eks/nodeGroup:NodeGroup"
LT = "aws:ec2/launchTemplate:LaunchTemplate"
RELEASE = "kubernetes:helm.sh/v3:Release"
EKS = "aws:eks/cluster:Cluster"
SECRET_SIG, SECRET_VALUE = (
    "4dabf18193072939515e22adb298388d",
    "1b47061264138c4ac30d75fd1eb44270",
)  # Pulumi's secret marker


def _run(mocks: Mocks, stack: str, check: Any) -> pulumi.Output[Any]:
    outputs = build(load_example(stack))
    return pulumi.Output.all(after_registration(lambda: check(mocks)), outputs)


def _group(mocks: Mocks, stack_cluster: str, pool: str) -> Recorded:
    return mocks.one(NG, f"{stack_cluster}-nodes-{pool}")


def _template(mocks: Mocks, group: Recorded) -> dict[str, Any]:
    (lt,) = [r for r in mocks.of_type(LT) if f"{r.name}-id" == group.inputs["launchTemplate"]["id"]]
    return lt.inputs


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_dev_control_plane(mocks: Mocks) -> pulumi.Output[Any]:
    def check(m: Mocks) -> None:
        eks = m.one(EKS, "gpufleet-dev").inputs
        assert eks["name"] == "gpufleet-dev" and eks["version"] == "1.35"
        assert eks["vpcConfig"]["endpointPrivateAccess"] is True
        # dev deploys from a laptop: public, behind the address its stack file says to replace
        assert eks["vpcConfig"]["endpointPublicAccess"] is True
        assert eks["vpcConfig"]["publicAccessCidrs"] == ["198.51.100.10/32"]
        assert all("-private-" in s for s in eks["vpcConfig"]["subnetIds"])
        key = m.of_type("aws:kms/key:Key")[0]
        assert key.inputs["enableKeyRotation"] is True
        assert eks["encryptionConfig"]["resources"] == ["secrets"]
        key_arn = eks["encryptionConfig"]["provider"]["keyArn"]
        assert key_arn.startswith("arn:aws:kms:") and key_arn.endswith(key.name)
        (key_policy,) = [
            r for r in m.of_type("aws:iam/rolePolicy:RolePolicy") if r.name.endswith("secrets-key")
        ]
        statement = json.loads(key_policy.inputs["policy"])["Statement"][0]
        assert statement["Resource"] == key_arn and "kms:Decrypt" in statement["Action"]
        assert key_policy.urn in m.one(EKS, "gpufleet-dev").dependencies
        assert eks["accessConfig"]["authenticationMode"] == "API"
        assert set(eks["enabledClusterLogTypes"]) == {
            "api",
            "audit",
            "authenticator",
            "controllerManager",
            "scheduler",
        }
        strategy = eks["kubeSchedulerConfig"]["nodeResourcesFit"]["scoringStrategy"]
        assert strategy["type"] == "MostAllocated"
        assert {"name": "nvidia.com/gpu", "weight": 10} in strategy["resources"]
        assert m.of_type("aws:eks/accessEntry:AccessEntry") == []  # dev lists no admin roles
        oidc = m.of_type("aws:iam/openIdConnectProvider:OpenIdConnectProvider")[0].inputs
        assert oidc["url"].startswith("https://oidc.eks.") and oidc["clientIdLists"] == ["sts.amazonaws.com"]

    return _run(mocks, "dev", check)


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_prod_public_endpoint_only_for_the_allow_list_and_admin_access(mocks: Mocks) -> pulumi.Output[Any]:
    def check(m: Mocks) -> None:
        vpc = m.one(EKS, "gpufleet-prod").inputs["vpcConfig"]
        assert vpc["endpointPublicAccess"] is True and vpc["publicAccessCidrs"] == ["203.0.113.0/24"]
        (entry,) = [
            e
            for e in m.of_type("aws:eks/accessEntry:AccessEntry")
            if e.name.startswith("gpufleet-prod-admin")
        ]
        assert entry.inputs["principalArn"] == "arn:aws:iam::123456789012:role/platform-admins"
        (assoc,) = m.of_type("aws:eks/accessPolicyAssociation:AccessPolicyAssociation")
        assert (
            assoc.inputs["policyArn"] == "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
        )
        assert assoc.inputs["accessScope"] == {"type": "cluster"}

    return _run(mocks, "example-prod", check)


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_prod_network_spans_three_zones_with_nat_per_zone(mocks: Mocks) -> pulumi.Output[Any]:
    def check(m: Mocks) -> None:
        subnets = m.of_type("aws:ec2/subnet:Subnet")
        private = [s for s in subnets if "-private-" in s.name]
        public = [s for s in subnets if "-public-" in s.name]
        assert sorted(s.inputs["availabilityZone"] for s in private) == [
            "us-east-1a",
            "us-east-1b",
            "us-east-1c",
        ]
        assert all(s.inputs["tags"]["kubernetes.io/role/internal-elb"] == "1" for s in private)
        assert all(s.inputs["tags"]["kubernetes.io/role/elb"] == "1" for s in public)
        assert all(s.inputs["tags"]["kubernetes.io/cluster/gpufleet-prod"] == "shared" for s in subnets)
        assert len(m.of_type("aws:ec2/natGateway:NatGateway")) == 3
        assert all(s.parent == m.of_type("gpufleet:aws:Network")[0].urn for s in subnets)

    return _run(mocks, "example-prod", check)


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_dev_single_nat(mocks: Mocks) -> pulumi.Output[Any]:
    return _run(mocks, "dev", lambda m: _assert_len(m.of_type("aws:ec2/natGateway:NatGateway"), 1))


def _assert_len(items: list[Any], n: int) -> None:
    assert len(items) == n


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_prod_gpu_node_groups(mocks: Mocks) -> pulumi.Output[Any]:
    spec = load_example("example-prod")

    def check(m: Mocks) -> None:
        groups = {
            p: _group(m, "gpufleet-prod", p).inputs
            for p in ("h100-train", "l40s-infer", "a10g-batch", "h100-mig")
        }
        assert groups["l40s-infer"]["amiType"] == "BOTTLEROCKET_x86_64_NVIDIA"
        assert groups["l40s-infer"]["releaseVersion"] == spec.versions.bottlerocket_nvidia_release
        for pool in ("h100-train", "a10g-batch", "h100-mig"):
            assert groups[pool]["amiType"] == "AL2023_x86_64_NVIDIA"
            assert groups[pool]["releaseVersion"] == spec.versions.al2023_nvidia_ami_release
        assert groups["a10g-batch"]["capacityType"] == "SPOT"
        for pool, g in groups.items():
            assert g["nodeGroupName"] == f"gpufleet-prod-{pool}"
            assert {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"} in g["taints"]
            assert g["labels"]["gpufleet.io/pool"] == pool
            assert g["labels"]["nvidia.com/gpu.present"] == "true"
            if pool in ("h100-train", "l40s-infer"):  # whole-GPU pools only (kubernetes/autoscaler#8095)
                assert g["labels"]["k8s.amazonaws.com/accelerator"].startswith("nvidia-")
            assert (
                g["tags"]["k8s.io/cluster-autoscaler/node-template/taint/nvidia.com/gpu"] == "true:NoSchedule"
            )
            assert g["nodeRepairConfig"]["enabled"] is True
            assert g["nodeRepairConfig"]["maxParallelNodesRepairedCount"] == 1
            assert all("-private-" in s for s in g["subnetIds"])
            lt = _template(m, _group(m, "gpufleet-prod", pool))
            assert lt["metadataOptions"]["httpTokens"] == "required"
            (disk,) = lt["blockDeviceMappings"]
            assert disk["ebs"]["encrypted"] == "true" and disk["ebs"]["volumeType"] == "gp3"
        assert groups["h100-train"]["labels"]["workload"] == "training"
        assert groups["h100-mig"]["labels"]["nvidia.com/mig.config"] == "all-1g.10gb"
        template = "k8s.io/cluster-autoscaler/node-template/resources/"
        # time-sliced: 1 GPU x 4 replicas of nvidia.com/gpu.shared, and no whole GPU a pod could ask for
        assert groups["a10g-batch"]["tags"][f"{template}nvidia.com/gpu.shared"] == "4"
        assert f"{template}nvidia.com/gpu" not in groups["a10g-batch"]["tags"]
        assert (
            _template(m, _group(m, "gpufleet-prod", "h100-train"))["blockDeviceMappings"][0]["ebs"][
                "volumeSize"
            ]
            == 500
        )

    return _run(mocks, "example-prod", check)


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_prod_capacity_block_wiring(mocks: Mocks) -> pulumi.Output[Any]:
    def check(m: Mocks) -> None:
        group = _group(m, "gpufleet-prod", "h100-train")
        assert group.inputs["capacityType"] == "CAPACITY_BLOCK"
        assert group.inputs["subnetIds"] == [
            "gpufleet-prod-net-private-us-east-1a-id"
        ]  # the reservation's zone
        assert "instanceTypes" not in group.inputs  # named by the launch template instead
        lt = _template(m, group)
        assert lt["instanceMarketOptions"] == {"marketType": "capacity-block"}
        target = lt["capacityReservationSpecification"]["capacityReservationTarget"]
        assert target == {"capacityReservationId": "cr-0123456789abcdef0"}
        assert lt["instanceType"] == "p5.48xlarge"
        assert "placement" not in lt and m.of_type("aws:ec2/placementGroup:PlacementGroup") == []
        nics = lt["networkInterfaces"]
        assert len(nics) == 32 and nics[0]["interfaceType"] == "efa"
        assert all(n["interfaceType"] == "efa-only" for n in nics[1:])
        assert nics[0]["securityGroups"] == ["sg-gpufleet-prod"]  # the cluster security group
        others = [_group(m, "gpufleet-prod", p).inputs for p in ("l40s-infer", "a10g-batch")]
        assert all(len(g["subnetIds"]) == 3 and g["instanceTypes"] for g in others)

    return _run(mocks, "example-prod", check)


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_prod_autoscaler_tags_reach_the_auto_scaling_groups(mocks: Mocks) -> pulumi.Output[Any]:
    def check(m: Mocks) -> None:
        tags = [r.inputs for r in m.of_type("aws:autoscaling/tag:Tag")]
        train = {
            t["tag"]["key"]: t["tag"]
            for t in tags
            if t["autoscalingGroupName"] == "eks-gpufleet-prod-h100-train-uuid"
        }
        gpu = train["k8s.io/cluster-autoscaler/node-template/resources/nvidia.com/gpu"]
        assert gpu["value"] == "8" and gpu["propagateAtLaunch"] is False
        assert (
            train["k8s.io/cluster-autoscaler/node-template/label/gpufleet.io/pool"]["value"] == "h100-train"
        )
        assert "k8s.io/cluster-autoscaler/node-template/taint/nvidia.com/gpu" in train

    return _run(mocks, "example-prod", check)


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_prod_addons_after_node_groups_on_the_clusters_provider(mocks: Mocks) -> pulumi.Output[Any]:
    spec = load_example("example-prod")

    def check(m: Mocks) -> None:
        releases = {r.inputs["chart"]: r for r in m.of_type(RELEASE) if "kueue" not in r.inputs["chart"]}
        assert set(releases) == {
            "gpu-operator",
            "cluster-autoscaler",
            "aws-efa-k8s-device-plugin",
            "kube-prometheus-stack",  # prometheus: install (the stack creates the cluster)
        }
        group_urns = {g.urn for g in m.of_type(NG)}
        (provider,) = m.of_type("pulumi:providers:kubernetes")
        kubeconfig = provider.inputs["kubeconfig"]
        assert kubeconfig[SECRET_SIG] == SECRET_VALUE  # the provider's kubeconfig stays a secret in the state
        assert json.loads(kubeconfig["value"])["clusters"][0]["cluster"]["server"].startswith("https://")
        for release in releases.values():
            assert group_urns <= set(release.dependencies), release.name
            assert release.provider and release.provider.startswith(provider.urn)
        op = releases["gpu-operator"].inputs
        assert op["version"] == spec.versions.gpu_operator_chart and op["repositoryOpts"]["repo"].startswith(
            "https://"
        )
        assert op["values"]["driver"]["enabled"] is False and op["values"]["mig"]["strategy"] == "mixed"
        ca = releases["cluster-autoscaler"].inputs
        assert ca["version"] == spec.versions.cluster_autoscaler_chart
        role_arn = ca["values"]["rbac"]["serviceAccount"]["annotations"]["eks.amazonaws.com/role-arn"]
        (role,) = [r for r in m.of_type("aws:iam/role:Role") if r.name.endswith("cluster-autoscaler")]
        assert role_arn == f"arn:aws:iam::123456789012:role/{role.name}"
        trust = json.loads(role.inputs["assumeRolePolicy"])["Statement"][0]
        assert trust["Principal"]["Federated"].startswith("arn:aws:iam::123456789012:oidc-provider/")
        (policy,) = [
            r for r in m.of_type("aws:iam/rolePolicy:RolePolicy") if r.name.endswith("cluster-autoscaler")
        ]
        assert "aws:ResourceTag/k8s.io/cluster-autoscaler/gpufleet-prod" in policy.inputs["policy"]
        assert (
            releases["aws-efa-k8s-device-plugin"].inputs["version"] == spec.versions.efa_device_plugin_chart
        )
        addons = {a.inputs["addonName"]: a for a in m.of_type("aws:eks/addon:Addon")}
        assert set(addons) == {"eks-node-monitoring-agent", "vpc-cni", "aws-ebs-csi-driver"}
        addon = addons["eks-node-monitoring-agent"]
        assert addon.inputs["addonVersion"] == spec.versions.node_monitoring_agent_addon
        # The EKS user guide's key for the VPC CNI's network policy agent ("Restrict Pod network traffic
        # with Kubernetes network policies"): without it, the team namespaces' NetworkPolicies do nothing.
        cni = addons["vpc-cni"]
        assert json.loads(cni.inputs["configurationValues"]) == {"enableNetworkPolicy": "true"}
        assert cni.inputs["clusterName"] == addon.inputs["clusterName"]
        assert_scheduling_after(m, releases["gpu-operator"])

    return _run(mocks, "example-prod", check)


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_prometheus_volume_has_a_provisioner_and_a_default_class_before_the_metrics_stack(
    mocks: Mocks,
) -> pulumi.Output[Any]:
    """EBS volumes on EKS need the EBS CSI driver (EKS User Guide, "Store Kubernetes volumes with Amazon EBS")
    and Prometheus' claim names no class: the add-on (with an IRSA role for its controller's ServiceAccount and
    AWS's driver policy) and a default StorageClass exist before the kube-prometheus-stack release starts."""
    spec = load_example("example-prod")

    def check(m: Mocks) -> None:
        (addon,) = [
            a for a in m.of_type("aws:eks/addon:Addon") if a.inputs["addonName"] == "aws-ebs-csi-driver"
        ]
        assert addon.inputs["addonVersion"] == spec.versions.ebs_csi_driver_addon
        (role,) = [r for r in m.of_type("aws:iam/role:Role") if r.name.endswith("aws-ebs-csi-driver")]
        assert addon.inputs["serviceAccountRoleArn"] == f"arn:aws:iam::123456789012:role/{role.name}"
        condition = json.loads(role.inputs["assumeRolePolicy"])["Statement"][0]["Condition"]["StringEquals"]
        assert "system:serviceaccount:kube-system:ebs-csi-controller-sa" in condition.values()
        (attached,) = [
            r
            for r in m.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
            if r.name.endswith("aws-ebs-csi-driver")
        ]
        assert (
            attached.inputs["policyArn"] == "arn:aws:iam::aws:policy/service-role/AmazonEBSCSIDriverPolicyV2"
        )
        assert attached.urn in addon.dependencies  # the controller starts with its permissions
        system = _group(m, "gpufleet-prod", "system")
        assert system.urn in addon.dependencies  # EKS waits for the add-on's pods to run
        (group,) = [
            g
            for g in m.of_type("kubernetes:yaml/v2:ConfigGroup")
            if g.inputs["objs"][0].get("kind") == "StorageClass"
        ]
        (sc,) = group.inputs["objs"]
        assert sc["metadata"]["annotations"] == {"storageclass.kubernetes.io/is-default-class": "true"}
        assert sc["provisioner"] == "ebs.csi.aws.com"
        assert sc["parameters"] == {"type": "gp3", "encrypted": "true"}
        assert sc["reclaimPolicy"] == "Delete"  # the volume goes with its claim: nothing left billed
        assert addon.urn in group.dependencies
        (kps,) = [r for r in m.of_type(RELEASE) if r.inputs["chart"] == "kube-prometheus-stack"]
        assert {addon.urn, group.urn} <= set(kps.dependencies)
        assert "storageClassName" not in str(kps.inputs["values"]["prometheus"])  # the default class binds it

    return _run(mocks, "example-prod", check)


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_in_cluster_resources_wait_for_the_admin_access_entries(mocks: Mocks) -> pulumi.Output[Any]:
    """A role in adminRoleArns that deploys (the CI role after a laptop created the cluster) authenticates
    through its own access entry, so the Kubernetes provider is created only once every entry has its policy."""

    def check(m: Mocks) -> None:
        (provider,) = m.of_type("pulumi:providers:kubernetes")
        associations = m.of_type("aws:eks/accessPolicyAssociation:AccessPolicyAssociation")
        assert [a.inputs["principalArn"] for a in associations] == load_example(
            "example-prod"
        ).cluster.admin_role_arns
        assert {a.urn for a in associations} <= set(provider.dependencies)

    return _run(mocks, "example-prod", check)


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_no_ebs_driver_without_prometheus(mocks: Mocks) -> pulumi.Output[Any]:
    """`dev` installs no Prometheus, so it makes no claim and gets no EBS add-on, role or class."""
    assert load_example("dev").cluster.monitoring.prometheus != "install"

    def check(m: Mocks) -> None:
        assert "aws-ebs-csi-driver" not in {a.inputs["addonName"] for a in m.of_type("aws:eks/addon:Addon")}
        assert not [r for r in m.of_type("aws:iam/role:Role") if "ebs" in r.name]
        assert not [g for g in m.of_type("kubernetes:yaml/v2:ConfigGroup") if "StorageClass" in str(g.inputs)]

    return _run(mocks, "dev", check)


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_dev_has_no_efa_plugin(mocks: Mocks) -> pulumi.Output[Any]:
    def check(m: Mocks) -> None:
        charts = {r.inputs["chart"] for r in m.of_type(RELEASE) if "kueue" not in r.inputs["chart"]}
        assert charts == {"gpu-operator", "cluster-autoscaler"}

    return _run(mocks, "dev", check)


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_outputs(mocks: Mocks) -> pulumi.Output[Any]:
    outputs = build(load_example("example-prod"))
    assert set(outputs) == {
        "cluster_name",
        "endpoint",
        "kubeconfig",
        "node_group_names",
        "oidc_provider_arn",
        "rolloutFacts",
    }

    def check(values: list[Any]) -> None:
        got = dict(zip(outputs, values, strict=True))
        assert got["cluster_name"] == "gpufleet-prod"
        assert got["node_group_names"]["h100-train"] == "gpufleet-prod-h100-train"
        assert got["oidc_provider_arn"].startswith("arn:aws:iam::")
        assert json.loads(got["kubeconfig"])["current-context"] == "gpufleet-prod"

    secret = pulumi.Output.is_secret(outputs["kubeconfig"])
    return pulumi.Output.all(secret, *outputs.values()).apply(lambda v: (check(v[1:]), _assert_true(v[0])))


def _assert_true(value: bool) -> None:
    assert value is True


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_component_children_are_parented_and_named_after_it(mocks: Mocks) -> pulumi.Output[Any]:
    def check(m: Mocks) -> None:
        for component in [r for r in m.resources if r.typ.startswith("gpufleet:aws:")]:
            children = m.children(component)
            assert children, component.typ
            assert all(c.name.startswith(component.name) for c in children), component.typ

    return _run(mocks, "example-prod", check)


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_a_bad_spec_never_reaches_pulumi(mocks: Mocks) -> pulumi.Output[Any]:
    # A spec that skipped load_stack's validation: build() runs the rules itself before any resource.
    spec = load_example("dev")
    network = spec.cluster.network.model_copy(update={"vpc_id": "vpc-1"})
    spec = spec.model_copy(update={"cluster": spec.cluster.model_copy(update={"network": network})})
    with pytest.raises(ConfigError, match="privateSubnetIds"):
        build(spec)
    return after_registration(lambda: _assert_len(mocks.resources, 0))


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_bring_your_own_vpc_creates_no_network_and_pins_capacity_blocks(mocks: Mocks) -> pulumi.Output[Any]:
    config = {
        "aws:region": "us-east-1",
        "gpufleet:platform": "aws",
        "gpufleet:cluster": {
            "name": "byo",
            "network": {"vpcId": "vpc-1", "privateSubnetIds": ["subnet-0a", "subnet-0b", "subnet-0c"]},
        },
        "gpufleet:nodePools": [
            {
                "name": "cb",
                "instanceType": "p5.48xlarge",
                "capacityType": "CAPACITY_BLOCK",
                "capacityReservationId": "cr-0123456789abcdef0",
                "availabilityZone": "us-east-1b",
                "maxSize": 2,
            }
        ],
    }
    outputs = build(parse_config(config, "t"))

    def check(m: Mocks) -> None:
        created = {r.typ for r in m.resources}
        assert not {"aws:ec2/vpc:Vpc", "aws:ec2/subnet:Subnet", "aws:ec2/natGateway:NatGateway"} & created
        assert m.one(EKS, "byo").inputs["vpcConfig"]["subnetIds"] == ["subnet-0a", "subnet-0b", "subnet-0c"]
        assert m.one(NG, "byo-nodes-cb").inputs["subnetIds"] == ["subnet-0b"]
        assert m.one(NG, "byo-nodes-system").inputs["subnetIds"] == ["subnet-0a", "subnet-0b", "subnet-0c"]

    return pulumi.Output.all(after_registration(lambda: check(mocks)), outputs)
