"""The EKS add-ons on GPU nodes: the EFA plugin only on EFA pools, no arm64 GPU pools, the exporter paired
with the host engine's DCGM, and the DCGM host engine left alone by the GPU operator and reachable from its
node only.

Each docstring names the upstream source the rule is taken from; nothing here reaches AWS or a GPU node.
"""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from infra import catalog
from infra.aws.addons.efa import efa_values
from infra.aws.addons.eks_addons import (
    DCGM_INSTANCE_TYPES,
    DCGM_SERVER_LABELS,
    DEPLOY_CLIENT_LABEL,
    monitoring_agent_configuration,
    monitoring_agent_values,
)
from infra.errors import ConfigError
from infra.gpu_stack.gpu_operator import (
    EKS_DCGM_EXPORTER_VERSION,
    NODE_MONITORING_DCGM,
    arm64_gpu_pool_problems,
    gpu_operator_values,
)
from infra.stackfile import parse_config
from infra.versions import Versions
from scheduler.labels import POOL_LABEL
from tests.conftest import load_example


def _config(*pools: dict[str, Any]) -> dict[str, Any]:
    return {
        "aws:region": "us-east-1",
        "gpufleet:platform": "aws",
        "gpufleet:cluster": {"name": "c", "availabilityZones": ["us-east-1a", "us-east-1b", "us-east-1c"]},
        "gpufleet:nodePools": list(pools),
    }


def _matches(term: dict[str, Any], labels: dict[str, str]) -> bool:
    """One nodeSelectorTerm against a node's labels (the In / NotIn / DoesNotExist operators used here)."""
    for expr in term["matchExpressions"]:
        value = labels.get(expr["key"])
        op = expr["operator"]
        if op == "In" and value not in expr["values"]:
            return False
        if op == "NotIn" and value in expr.get("values", []):
            return False
        if op == "DoesNotExist" and value is not None:
            return False
    return True


def _schedulable(affinity: dict[str, Any], labels: dict[str, str]) -> bool:
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    return any(_matches(t, labels) for t in terms)


def test_efa_plugin_only_on_efa_pools() -> None:
    """aws/eks-charts stable/aws-efa-k8s-device-plugin/templates/daemonset.yaml turns
    `supportedInstanceLabels` into the DaemonSet's required node affinity, one `<key> In <values>` term per key.
    Selected by instance type, the plugin also lands on example-prod's `h100-mig` (p5.48xlarge, `efa: false`,
    no EFA interfaces) and crash-loops there: "No valid EFA devices found" (aws/sagemaker-hyperpod-cli#367;
    zalando-incubator/kubernetes-on-aws#8881 selects by an EFA label for this reason)."""
    prod = load_example("example-prod")
    by_name = {p.name: p for p in prod.node_pools}
    assert by_name["h100-mig"].instance_type == by_name["h100-train"].instance_type == "p5.48xlarge"
    assert not by_name["h100-mig"].efa
    selector = efa_values(prod)["supportedInstanceLabels"]
    assert selector == {"keys": [POOL_LABEL], "values": ["h100-train"]}
    terms = [
        {"matchExpressions": [{"key": k, "operator": "In", "values": selector["values"]}]}
        for k in selector["keys"]
    ]
    node = {"node.kubernetes.io/instance-type": "p5.48xlarge"}
    assert any(_matches(t, {**node, POOL_LABEL: "h100-train"}) for t in terms)
    assert not any(_matches(t, {**node, POOL_LABEL: "h100-mig"}) for t in terms)


def test_arm64_gpu_pools_are_refused_on_aws() -> None:
    """aws/eks-node-monitoring-agent charts/eks-node-monitoring-agent/values.yaml:143-147 @v1.6.6: the
    dcgm-server affinity is `kubernetes.io/arch In [amd64]`. On aws dcgm-exporter is pointed at that engine on
    every node (one ClusterPolicy, one DaemonSet: GPU operator v26.7.0 has no per-arch exporter env), so a g5g
    (arm64) pool would have no host engine to read. Refused, naming the pool's key."""
    with pytest.raises(ConfigError) as refused:
        parse_config(_config({"name": "g", "instanceType": "g5g.xlarge", "maxSize": 1}), "t")
    (problem,) = refused.value.problems
    assert problem.startswith("gpufleet:nodePools[0].instanceType: g5g.xlarge is arm64")
    assert "amd64" in problem
    mixed = {
        "name": "g",
        "instanceType": "g5.xlarge",
        "instanceTypes": ["g5.2xlarge", "g5g.2xlarge"],
        "maxSize": 1,
    }
    with pytest.raises(ConfigError) as refused:
        parse_config(_config(mixed), "t")
    # the mixed architectures are the pool's own problem, named at the arm64 type and not a second time here
    keys = [p.split(":")[1] for p in refused.value.problems]
    assert keys[0] == "nodePools[0].instanceTypes[1]" and "arm64" in refused.value.problems[0]
    assert not [p for p in refused.value.problems if "DCGM host engine" in p], refused.value.problems
    arm_only = {"name": "g", "instanceTypes": ["g5g.xlarge", "g5g.2xlarge"], "maxSize": 1}
    with pytest.raises(ConfigError) as refused:
        parse_config(_config(arm_only), "t")
    assert [p for p in refused.value.problems if "DCGM host engine" in p] == [
        "gpufleet:nodePools[0].instanceTypes: g5g.xlarge, g5g.2xlarge are arm64; on aws dcgm-exporter reads the EKS "
        "node monitoring agent's DCGM host engine, which runs only on amd64 nodes, so this pool would have no GPU "
        "metrics or DCGM health; use an amd64 (x86_64) GPU instance type"
    ], refused.value.problems
    for stack in ("dev", "example-prod", "metal"):
        assert arm64_gpu_pool_problems(load_example(stack)) == []


def test_exporter_dcgm_matches_the_host_engine() -> None:
    """NVIDIA DCGM "Installation": exporter releases pair a tested DCGM version with an exporter version; keep
    them paired. The host engine dcgm-exporter talks to on EKS is the node monitoring add-on's dcgm-server,
    image `4.5.2-4.8.1-ubuntu22.04` (charts/eks-node-monitoring-agent/values.yaml:106 @v1.6.6); the GPU
    operator v26.7.0 default exporter is `4.6.0-4.8.3-distroless` (deployments/gpu-operator/values.yaml), a
    newer DCGM client. NVIDIA/dcgm-exporter tag 4.5.2-4.8.1 (hack/VERSION) is built on DCGM 4.5.2. Where both
    are pinned, the exporter's DCGM major.minor must equal the host engine's."""
    addon = Versions().node_monitoring_agent_addon.split("-eksbuild")[0]
    assert addon in NODE_MONITORING_DCGM, f"pair dcgm-exporter with the DCGM of add-on {addon}"
    engine = NODE_MONITORING_DCGM[addon].split("-")[0]
    exporter = gpu_operator_values(load_example("example-prod"))["dcgmExporter"]["version"]
    assert exporter == EKS_DCGM_EXPORTER_VERSION
    assert exporter.split("-")[0].split(".")[:2] == engine.split(".")[:2]
    assert exporter.endswith("-distroless")  # the variant the operator's default uses
    assert "version" not in gpu_operator_values(load_example("metal"))["dcgmExporter"]  # its own engine


def test_dcgm_server_leaves_nodes_the_gpu_operator_reconfigures() -> None:
    """GPU operator v26.7.0 controllers/state_manager.go:108 (commit 45fb0db6e, "add new deploy label to manage
    third-party gpu client pods"): mig-manager and driver upgrades set `nvidia.com/gpu.deploy.client=false` so
    GPU clients that are not operator operands leave the node. dcgm-server's affinity (`dcgmAgent.affinity`,
    charts/configuration.schema.json:98 @v1.6.6) keeps the chart's default (values.yaml:122-147 @v1.6.6) and
    adds `In [true]` OR `DoesNotExist`, as NVIDIA's NVSentinel charts do."""
    spec = load_example("example-prod")
    affinity = monitoring_agent_values(spec)["dcgmAgent"]["affinity"]
    gpu = {"node.kubernetes.io/instance-type": "p5.48xlarge", "kubernetes.io/arch": "amd64"}
    assert _schedulable(affinity, gpu)  # not labelled by the operator yet
    assert _schedulable(affinity, {**gpu, DEPLOY_CLIENT_LABEL: "true"})
    assert not _schedulable(affinity, {**gpu, DEPLOY_CLIENT_LABEL: "false"})  # mig-manager at work
    # The chart's own restrictions stay: amd64 NVIDIA instance types, no Fargate/Auto/hybrid/HyperPod.
    assert not _schedulable(affinity, {**gpu, "kubernetes.io/arch": "arm64"})
    assert not _schedulable(affinity, {**gpu, "node.kubernetes.io/instance-type": "m7i.xlarge"})
    assert not _schedulable(affinity, {**gpu, "eks.amazonaws.com/compute-type": "hybrid"})
    assert not _schedulable(affinity, {**gpu, "sagemaker.amazonaws.com/compute-type": "hyperpod"})
    # Keys of the add-on configuration schema's DCGMAgent @v1.6.6 (additionalProperties: false).
    schema_keys = {"affinity", "podAnnotations", "podLabels", "resources", "resizePolicy", "tolerations"}
    assert set(monitoring_agent_values(spec)["dcgmAgent"]) <= schema_keys


def test_dcgm_server_runs_on_every_gpu_type_aws_pools_may_use() -> None:
    """`DCGM_INSTANCE_TYPES` is a copy of the chart's list; the host engine must run on every amd64 GPU type of
    the catalog (arm64 GPU pools are refused on aws), or dcgm-exporter on that node reads nothing."""
    affinity = monitoring_agent_values(load_example("example-prod"))["dcgmAgent"]["affinity"]
    amd64 = [t.name for t in catalog.CATALOG.values() if t.gpus and t.arch == "x86_64"]
    assert len(amd64) > 10
    assert [name for name in amd64 if name not in DCGM_INSTANCE_TYPES] == []
    for name in amd64:
        assert _schedulable(
            affinity, {"node.kubernetes.io/instance-type": name, "kubernetes.io/arch": "amd64"}
        )


def test_dcgm_server_admits_only_its_own_node() -> None:
    """aws/eks-node-monitoring-agent templates/dcgm-daemonset.yaml:48,58-59 @v1.6.6: `nv-hostengine -n -b ALL`,
    `hostPort: 5555`, pod labels `k8s-app: dcgm-server, version: v1`. Any pod could reach it at its pod IP or
    node-IP:5555 and drive DCGM on shared GPUs. A NetworkPolicy with no ingress rule isolates those pods; the
    pod's own node is still admitted (NetworkPolicySpec API reference: "Traffic is allowed to a pod if ... the
    traffic source is the pod's local node"; the VPC CNI policy agent allows the node IP,
    aws/aws-network-policy-agent#65), which is where its clients run (agent and dcgm-exporter, host network,
    localhost:5555). Shipped through the chart's `extraObjects` (configuration.schema.json @v1.6.6)."""
    import json

    spec = load_example("example-prod")
    config = json.loads(monitoring_agent_configuration(spec))
    assert set(config) <= {"global", "nodeAgent", "dcgmAgent", "extraObjects"}  # schema top level @v1.6.6
    (policy,) = config["extraObjects"]
    kubernetes_validate.validate(policy, spec.cluster.kubernetes_version, strict=True)
    assert policy["kind"] == "NetworkPolicy"
    assert policy["metadata"]["namespace"] == "kube-system"
    assert policy["spec"]["podSelector"] == {"matchLabels": DCGM_SERVER_LABELS}
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == []  # nothing but the node itself
    assert "{{" not in json.dumps(policy)  # extraObjects entries go through `tpl`
