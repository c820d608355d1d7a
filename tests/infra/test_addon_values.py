"""cluster-autoscaler and EFA device plugin values."""

from __future__ import annotations

from infra.aws.addons.cluster_autoscaler import cluster_autoscaler_values
from infra.aws.addons.efa import efa_pools, efa_values
from tests.conftest import load_example


def test_autoscaler_discovers_this_cluster_with_irsa_and_pinned_image() -> None:
    spec = load_example("example-prod")
    values = cluster_autoscaler_values(spec, "arn:aws:iam::1:role/ca")
    assert values["autoDiscovery"] == {"clusterName": "gpufleet-prod"}
    assert values["awsRegion"] == "us-east-1"
    assert values["image"]["tag"] == spec.versions.cluster_autoscaler_image
    # The autoscaler image must match the control plane's minor version.
    assert values["image"]["tag"].lstrip("v").startswith(spec.cluster.kubernetes_version + ".")
    sa = values["rbac"]["serviceAccount"]
    assert sa["annotations"] == {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/ca"}


def test_autoscaler_flags_for_gpu_groups() -> None:
    args = cluster_autoscaler_values(load_example("dev"), "arn")["extraArgs"]
    assert args["balance-similar-node-groups"] is True
    assert args["expander"] == "priority,least-waste"
    minutes = int(args["max-node-provision-time"].removesuffix("m"))
    assert minutes >= 20  # a cold GPU node takes 10-15 minutes to join
    assert args["skip-nodes-with-local-storage"] is False
    assert 0 < float(args["scale-down-utilization-threshold"]) < 1


def test_efa_plugin_targets_only_the_efa_pools() -> None:
    """Selected by pool label, not instance type (tests/infra/test_eks_addons_on_gpu_nodes.py)."""
    prod = load_example("example-prod")
    assert efa_pools(prod) == ["h100-train"]
    values = efa_values(prod)
    assert values["supportedInstanceLabels"]["values"] == ["h100-train"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in values["tolerations"]
    assert efa_pools(load_example("dev")) == []


def test_autoscaler_serves_provisioning_requests_only_when_kueue_asks_for_them() -> None:
    spec = load_example("example-prod")
    scheduling = spec.scheduling.model_copy(update={"provisioning_requests": False})
    off = cluster_autoscaler_values(spec.model_copy(update={"scheduling": scheduling}), "arn")["extraArgs"]
    assert "enable-provisioning-requests" not in off
    scheduling = spec.scheduling.model_copy(update={"provisioning_requests": True})
    args = cluster_autoscaler_values(spec.model_copy(update={"scheduling": scheduling}), "arn")["extraArgs"]
    assert args["enable-provisioning-requests"] is True
