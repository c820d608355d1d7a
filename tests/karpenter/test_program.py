"""The Karpenter side of `build(spec)` under Pulumi's mocks: controller, IAM, interruption queue and rules,
node role and access entry, discovery tags, NodePools/EC2NodeClasses and their destroy order."""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pytest
import yaml

from infra import build
from infra.aws.karpenter import iam as kiam
from infra.aws.karpenter.values import karpenter_values
from infra.deploy import destroy_phases
from infra.stackfile import parse_config
from tests.conftest import load_example
from tests.infra.conftest import ACCOUNT, Mocks, Recorded, after_registration
from tests.karpenter.conftest import as_karpenter, example_config

RELEASE = "kubernetes:helm.sh/v3:Release"
NODEPOOL = "kubernetes:karpenter.sh/v1:NodePool"
NODECLASS = "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"
CLUSTER = "gpufleet-karpenter"
QUEUE_ARN = f"arn:aws:sqs:us-east-1:{ACCOUNT}:{CLUSTER}"


def _run(m: Mocks, spec: Any, check: Any) -> pulumi.Output[Any]:
    outputs = build(spec)
    return pulumi.Output.all(after_registration(lambda: check(m)), outputs)


def _named(m: Mocks, typ: str, suffix: str) -> Recorded:
    (found,) = [r for r in m.of_type(typ) if r.name.endswith(suffix)]
    return found


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_controller_release_on_the_system_pool_with_irsa(mocks: Mocks) -> pulumi.Output[Any]:
    """Chart and image pinned from the versions recipe; IRSA: the trust policy admits only
    system:serviceaccount:kube-system:karpenter, the role the chart's service account is annotated with."""
    spec = load_example("example-karpenter")

    def check(m: Mocks) -> None:
        (release,) = [r for r in m.of_type(RELEASE) if r.inputs["name"] == "karpenter"]
        inputs = release.inputs
        assert inputs["chart"] == "oci://public.ecr.aws/karpenter/karpenter"
        assert inputs["version"] == spec.versions.karpenter_chart == "1.14.1"
        values = inputs["values"]
        assert values["nodeSelector"]["gpufleet.io/role"] == "system"
        assert values["controller"]["image"]["tag"] == "1.14.1"
        assert values["controller"]["image"]["digest"].startswith("sha256:")
        assert values["settings"]["clusterName"] == CLUSTER
        assert values["settings"]["interruptionQueue"] == CLUSTER
        role = _named(m, "aws:iam/role:Role", "karpenter-controller")
        assert (
            values["serviceAccount"]["annotations"]["eks.amazonaws.com/role-arn"]
            == f"arn:aws:iam::{ACCOUNT}:role/{role.name}"
        )
        trust = json.loads(role.inputs["assumeRolePolicy"])["Statement"][0]
        (sub,) = [v for k, v in trust["Condition"]["StringEquals"].items() if k.endswith(":sub")]
        assert sub == "system:serviceaccount:kube-system:karpenter"
        system = _named(m, "aws:eks/nodeGroup:NodeGroup", "nodes-system")
        policy = _named(m, "aws:iam/rolePolicy:RolePolicy", "karpenter-controller")
        # CRDs from the karpenter-crd chart (Helm never upgrades a chart's crds/; upgrade guide v1.14.1).
        (crds,) = [r for r in m.of_type(RELEASE) if r.inputs["name"] == "karpenter-crd"]
        assert crds.inputs["chart"] == "oci://public.ecr.aws/karpenter/karpenter-crd"
        assert crds.inputs["version"] == inputs["version"] and inputs["skipCrds"] is True
        assert {system.urn, policy.urn, crds.urn} <= set(release.dependencies)

    return _run(mocks, spec, check)


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_controller_policy_is_scoped_to_the_cluster_queue_and_node_role(
    mocks: Mocks,
) -> pulumi.Output[Any]:
    """As the upstream CloudFormation template at v1.14.1: writes only on resources tagged as this cluster's
    (kubernetes.io/cluster/<name>: owned) and a NodePool's / EC2NodeClass's, PassRole only for the node role,
    SQS only on the queue, reads only in the cluster's region."""
    spec = load_example("example-karpenter")

    def check(m: Mocks) -> None:
        doc = json.loads(_named(m, "aws:iam/rolePolicy:RolePolicy", "karpenter-controller").inputs["policy"])
        by_sid = {s["Sid"]: s for s in doc["Statement"]}
        node_role = _named(m, "aws:iam/role:Role", "karpenter-node")
        assert node_role.inputs["name"] == f"{CLUSTER}-karpenter-node"
        assert (
            by_sid["AllowPassingInstanceRole"]["Resource"] == f"arn:aws:iam::{ACCOUNT}:role/{node_role.name}"
        )
        assert by_sid["AllowInterruptionQueueActions"]["Resource"] == QUEUE_ARN
        for sid in (
            "AllowScopedDeletion",
            "AllowScopedResourceTagging",
            "AllowScopedEC2LaunchTemplateAccessActions",
        ):
            assert (
                by_sid[sid]["Condition"]["StringEquals"][f"aws:ResourceTag/kubernetes.io/cluster/{CLUSTER}"]
                == "owned"
            )
        for sid in ("AllowScopedEC2InstanceActionsWithTags", "AllowScopedResourceCreationTagging"):
            assert (
                by_sid[sid]["Condition"]["StringEquals"][f"aws:RequestTag/kubernetes.io/cluster/{CLUSTER}"]
                == "owned"
            )
        assert (
            by_sid["AllowRegionalReadActions"]["Condition"]["StringEquals"]["aws:RequestedRegion"]
            == "us-east-1"
        )
        for statement in doc["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            assert all(a != "*" and not a.endswith(":*") for a in actions), statement["Sid"]
            if statement["Resource"] == "*":  # unscoped resources only for reads (and the regional condition)
                assert all(a.split(":")[1].startswith(("Describe", "Get", "List")) for a in actions), (
                    statement["Sid"]
                )
        assert (
            by_sid["AllowAPIServerEndpointDiscovery"]["Resource"]
            == f"arn:aws:eks:us-east-1:{ACCOUNT}:cluster/{CLUSTER}"
        )

    return _run(mocks, spec, check)


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_interruption_queue_and_rules(mocks: Mocks) -> pulumi.Output[Any]:
    """The queue and the five EventBridge rules of Karpenter's getting-started template (v1.14.1): Spot
    interruption, rebalance, AWS Health scheduled change, instance state change, capacity-reservation
    interruption, each targeting the queue; SSE on, 300 s retention, plain HTTP denied."""
    spec = load_example("example-karpenter")

    def check(m: Mocks) -> None:
        (queue,) = m.of_type("aws:sqs/queue:Queue")
        assert queue.inputs["name"] == CLUSTER
        assert queue.inputs["sqsManagedSseEnabled"] is True and queue.inputs["messageRetentionSeconds"] == 300
        (qp,) = m.of_type("aws:sqs/queuePolicy:QueuePolicy")
        statements = {s["Sid"]: s for s in json.loads(qp.inputs["policy"])["Statement"]}
        assert statements["EventBridgeSend"]["Resource"] == QUEUE_ARN
        assert "events.amazonaws.com" in statements["EventBridgeSend"]["Principal"]["Service"]
        assert statements["DenyHTTP"]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        rules = {r.name: r for r in m.of_type("aws:cloudwatch/eventRule:EventRule")}
        patterns = {tuple(json.loads(r.inputs["eventPattern"])["detail-type"]) for r in rules.values()}
        assert patterns == {
            ("EC2 Spot Instance Interruption Warning",),
            ("EC2 Instance Rebalance Recommendation",),
            ("AWS Health Event",),
            ("EC2 Instance State-change Notification",),
            ("EC2 Capacity Reservation Instance Interruption Warning",),
        }
        targets = m.of_type("aws:cloudwatch/eventTarget:EventTarget")
        assert len(targets) == len(kiam.INTERRUPTION_EVENTS) == 5
        assert {t.inputs["rule"] for t in targets} == {f"{name}-rule" for name in rules}
        assert all(t.inputs["arn"] == QUEUE_ARN for t in targets)

    return _run(mocks, spec, check)


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_node_role_access_entry_and_discovery_tags(mocks: Mocks) -> pulumi.Output[Any]:
    """Karpenter's nodes join through an EC2_LINUX access entry for their role (EKS access entries;
    Karpenter getting-started "grant access"); every EC2NodeClass selects subnets and security groups by
    `karpenter.sh/discovery: <cluster>`, so the private subnets and the cluster security group carry it."""
    spec = load_example("example-karpenter")

    def check(m: Mocks) -> None:
        node_role = _named(m, "aws:iam/role:Role", "karpenter-node")
        (entry,) = [
            r for r in m.of_type("aws:eks/accessEntry:AccessEntry") if r.inputs["type"] == "EC2_LINUX"
        ]
        assert entry.inputs["principalArn"] == f"arn:aws:iam::{ACCOUNT}:role/{node_role.name}"
        policies = {
            r.inputs["policyArn"].rsplit("/", 1)[1]
            for r in m.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
            if r.name.startswith(node_role.name)
        }
        assert {
            "AmazonEKSWorkerNodePolicy",
            "AmazonEKS_CNI_Policy",
            "AmazonEC2ContainerRegistryPullOnly",
        } <= policies
        tags = [r.inputs for r in m.of_type("aws:ec2/tag:Tag")]
        assert all(t["key"] == "karpenter.sh/discovery" and t["value"] == CLUSTER for t in tags)
        private = [s for s in m.of_type("aws:ec2/subnet:Subnet") if "-private-" in s.name]
        assert len(private) == 3
        assert all(s.inputs["tags"]["karpenter.sh/discovery"] == CLUSTER for s in private)
        assert f"sg-{CLUSTER}" in {t["resourceId"] for t in tags}

    return _run(mocks, spec, check)


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_the_discovery_tag_survives_a_refresh_of_the_stacks_own_subnets(
    mocks: Mocks,
) -> pulumi.Output[Any]:
    """pulumi-aws `aws.ec2.Tag` (https://www.pulumi.com/registry/packages/aws/api-docs/ec2/tag/): "should not
    be combined with the providers resource for managing the parent resource ... will cause a perpetual
    difference". Subnets the stack creates carry the tag in their own `tags`, so a refresh keeps it; only
    what the stack does not manage gets an `aws.ec2.Tag` (the EKS-created security group)."""
    spec = load_example("example-karpenter")

    def check(m: Mocks) -> None:
        subnet_ids = {s.name + "-id" for s in m.of_type("aws:ec2/subnet:Subnet")}
        tagged = {t.inputs["resourceId"] for t in m.of_type("aws:ec2/tag:Tag")}
        assert not subnet_ids & tagged
        assert tagged == {f"sg-{CLUSTER}"}
        public = [s for s in m.of_type("aws:ec2/subnet:Subnet") if "-public-" in s.name]
        assert public and all("karpenter.sh/discovery" not in s.inputs["tags"] for s in public)

    return _run(mocks, spec, check)


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_a_brought_vpcs_subnets_get_the_discovery_tag_as_tags(mocks: Mocks) -> pulumi.Output[Any]:
    """A brought VPC's subnets are not managed here: an `aws.ec2.Tag` each is the only way to add the tag."""
    config = as_karpenter(example_config("example-karpenter"))
    config["gpufleet:cluster"]["network"] = {
        "vpcId": "vpc-1",
        "privateSubnetIds": ["subnet-0a", "subnet-0b", "subnet-0c"],
    }
    spec = parse_config(config, "byo")

    def check(m: Mocks) -> None:
        assert m.of_type("aws:ec2/subnet:Subnet") == []
        tagged = {t.inputs["resourceId"] for t in m.of_type("aws:ec2/tag:Tag")}
        assert tagged == {"subnet-0a", "subnet-0b", "subnet-0c", f"sg-{CLUSTER}"}

    return _run(mocks, spec, check)


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_nodepools_and_the_destroy_order(mocks: Mocks) -> pulumi.Output[Any]:
    """Pulumi deletes dependents first: a NodePool before its EC2NodeClass, the EC2NodeClass (whose
    termination finalizer waits until no NodeClaim uses it, karpenter-provider-aws v1.14.1
    pkg/controllers/nodeclass/controller.go) before the controller release, the node role's access entry
    and the discovery tags; the class's delete timeout covers draining and terminating GPU instances."""
    spec = load_example("example-karpenter")

    def check(m: Mocks) -> None:
        pools = {r.inputs["metadata"]["name"]: r for r in m.of_type(NODEPOOL)}
        classes = {r.inputs["metadata"]["name"]: r for r in m.of_type(NODECLASS)}
        assert set(pools) == set(classes) == {"h100-train", "l40s-infer", "a10g-spot"}
        (release,) = [r for r in m.of_type(RELEASE) if r.inputs["name"] == "karpenter"]
        (entry,) = [
            r for r in m.of_type("aws:eks/accessEntry:AccessEntry") if r.inputs["type"] == "EC2_LINUX"
        ]
        tag_urns = {t.urn for t in m.of_type("aws:ec2/tag:Tag")}
        for name, pool in pools.items():
            assert classes[name].urn in pool.dependencies
            assert {release.urn, entry.urn} | tag_urns <= set(classes[name].dependencies)
            assert pool.inputs["spec"]["template"]["spec"]["nodeClassRef"]["name"] == name
            request = m._requests[(NODECLASS, classes[name].name)]
            assert request.customTimeouts.delete == "45m"
        assert release.provider == pools["h100-train"].provider
        # The team policies' own MutatingAdmissionPolicies (1.36) are there too, applied generically
        # (scheduler.component.apply_object); the Karpenter one is the one that names its pools.
        policies = m.of_type("kubernetes:admissionregistration.k8s.io/v1:MutatingAdmissionPolicy")
        karpenter = [
            p for p in policies if "h100-train" in json.dumps(p.inputs["spec"].get("matchConditions", []))
        ]
        assert len(karpenter) == 1

    return _run(mocks, spec, check)


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_invoke_destroy_removes_nodepools_before_the_controller(mocks: Mocks) -> pulumi.Output[Any]:
    """`invoke destroy` runs targeted phases (infra.deploy.destroy_phases, on `pulumi stack export`): the
    program's NodePools and EC2NodeClasses form the first phase, so the Karpenter release (next phase) still
    runs while their finalizers terminate the instances."""
    spec = load_example("example-karpenter")

    def check(m: Mocks) -> None:
        export = [
            {"urn": r.urn, "type": r.typ, "custom": not r.typ.startswith(("gpufleet:", "pulumi:pulumi:"))}
            for r in m.resources
        ]
        phases = destroy_phases(export)
        karpenter = {r.urn for r in m.of_type(NODEPOOL) + m.of_type(NODECLASS)}
        assert len(karpenter) == 6 and set(phases[0]) == karpenter
        (release,) = [r for r in m.of_type(RELEASE) if r.inputs["name"] == "karpenter"]
        assert release.urn in phases[1]

    return _run(mocks, spec, check)


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_shared_gpu_pools_stay_node_groups_with_the_cluster_autoscaler(
    mocks: Mocks,
) -> pulumi.Output[Any]:
    spec = load_example("example-karpenter")

    def check(m: Mocks) -> None:
        groups = {r.inputs["nodeGroupName"] for r in m.of_type("aws:eks/nodeGroup:NodeGroup")}
        assert groups == {f"{CLUSTER}-system", f"{CLUSTER}-a10g-shared"}
        charts = {r.inputs["chart"].rsplit("/", 1)[-1] for r in m.of_type(RELEASE)}
        assert {"karpenter", "cluster-autoscaler", "gpu-operator"} <= charts

    return _run(mocks, spec, check)


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_only_karpenter_when_every_pool_uses_whole_gpus(mocks: Mocks) -> pulumi.Output[Any]:
    spec = parse_config(as_karpenter(example_config("dev")), "dev")

    def check(m: Mocks) -> None:
        groups = {r.inputs["nodeGroupName"] for r in m.of_type("aws:eks/nodeGroup:NodeGroup")}
        assert groups == {"gpufleet-dev-system"}
        charts = {r.inputs["chart"].rsplit("/", 1)[-1] for r in m.of_type(RELEASE)}
        assert "cluster-autoscaler" not in charts and "karpenter" in charts
        assert not [r for r in m.of_type("aws:iam/role:Role") if r.name.endswith("cluster-autoscaler")]
        for component in [r for r in m.resources if r.typ == "gpufleet:aws:Karpenter"]:
            assert all(c.name.startswith(component.name) for c in m.children(component))

    return _run(mocks, spec, check)


def _paths(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        path = f"{prefix}.{key}" if prefix else key
        out[path] = value
        if isinstance(value, dict):
            out |= _paths(value, path)
    return out


MAPS = ("nodeSelector",)  # Kubernetes maps: any key is accepted


def test_every_value_key_exists_in_the_charts_values(shared_dir: Any) -> None:
    """No guessed keys: each key we set is in the chart's values.yaml (aws/karpenter-provider-aws
    charts/karpenter/values.yaml at v1.14.1), or under a map the chart leaves open (`{}`)."""
    chart = _paths(yaml.safe_load((shared_dir / "crds" / "karpenter" / "chart" / "values.yaml").read_text()))

    def known(path: str) -> bool:
        parts = path.split(".")
        prefixes = [".".join(parts[:i]) for i in range(1, len(parts))]
        return path in chart or any(p in MAPS or chart.get(p, None) == {} for p in prefixes)

    ours = _paths(karpenter_values(load_example("example-karpenter"), "arn", "queue"))
    leaves = [k for k, v in ours.items() if not isinstance(v, dict)]
    assert [k for k in leaves if not known(k)] == []
    assert not known("settings.clusterNmae") and not known("controller.imag.tag")  # the check can fail
    assert chart["settings.featureGates.reservedCapacity"] is True  # ODCRs and capacity blocks


def test_karpenter_repairs_its_gpu_nodes(shared_dir: Any) -> None:
    """EKS node auto-repair (`node_repair_config`) applies to managed node groups only; Karpenter repairs its
    own nodes (an `AcceleratedHardwareReady=False` condition from the node monitoring agent, after 10 minutes)
    only with `settings.featureGates.nodeRepair`, ALPHA and off in the chart (charts/karpenter/values.yaml
    and website/content/en/docs/concepts/disruption.md "Node Auto Repair", both @v1.14.1)."""
    chart = yaml.safe_load((shared_dir / "crds" / "karpenter" / "chart" / "values.yaml").read_text())
    assert chart["settings"]["featureGates"]["nodeRepair"] is False
    ours = karpenter_values(load_example("example-karpenter"), "arn", "queue")
    assert ours["settings"]["featureGates"]["nodeRepair"] is True


def test_controller_replicas_fit_the_system_pool() -> None:
    """The chart's default pod anti-affinity is required on kubernetes.io/hostname (values.yaml at v1.14.1),
    so a second replica needs a second system node or the release never becomes ready."""
    spec = load_example("example-karpenter")
    assert ours_replicas(spec) == 2
    one = spec.model_copy(update={"system_pool": spec.system_pool.model_copy(update={"min_size": 1})})
    assert ours_replicas(one) == 1


def ours_replicas(spec: Any) -> int:
    return int(karpenter_values(spec, "arn", "queue")["replicas"])


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_an_on_demand_efa_pool_gets_its_cluster_placement_group(mocks: Mocks) -> pulumi.Output[Any]:
    """The placement group the EC2NodeClass selects by name exists before the class (strategy `cluster`, EC2
    User Guide "Placement groups"); the controller policy already allows `DescribePlacementGroups`."""
    config = as_karpenter(example_config("example-karpenter"))
    config["gpufleet:nodePools"].append(
        {
            "name": "p5-od",
            "instanceType": "p5.48xlarge",
            "efa": True,
            "availabilityZone": "us-east-1a",
            "maxSize": 2,
        }
    )
    config["gpufleet:teams"][0]["quotas"]["p5-od"] = 8
    spec = parse_config(config, "efa")

    def check(m: Mocks) -> None:
        (group,) = m.of_type("aws:ec2/placementGroup:PlacementGroup")
        assert group.inputs["strategy"] == "cluster" and group.inputs["name"] == f"{CLUSTER}-p5-od"
        (nc,) = [c for c in m.of_type(NODECLASS) if c.inputs["metadata"]["name"] == "p5-od"]
        assert group.urn in nc.dependencies
        assert nc.inputs["spec"]["placementGroupSelector"] == {"name": f"{CLUSTER}-p5-od"}

    return _run(mocks, spec, check)
