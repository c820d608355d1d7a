"""Configuration of the EKS-managed add-ons (`aws.eks.Addon.configuration_values`), as plain data.

The EKS node monitoring agent runs two DaemonSets: the agent itself (which tolerates every taint by default)
and `dcgm-server`, an NVIDIA DCGM host engine on every NVIDIA instance type that the agent reads GPU health
from. The chart's `dcgmAgent.tolerations` default is empty (aws/eks-node-monitoring-agent v1.6.6,
charts/eks-node-monitoring-agent/values.yaml), so on GPU nodes tainted `nvidia.com/gpu` it never runs and
`AcceleratedHardwareReady` has no DCGM signal. The add-on's configuration schema accepts
`dcgmAgent.tolerations` (charts/configuration.schema.json), so the GPU taint and every pool taint go there.

Its host engine listens on host port 5555 (templates/dcgm-daemonset.yaml: `nv-hostengine -n -b ALL`,
`hostPort: 5555`); the GPU operator's dcgm-exporter is pointed at it (infra.gpu_stack.gpu_operator) so each node
runs one host engine, not two.

dcgm-server holds the GPUs (an NVML/DCGM client) but is no GPU operator operand, so mig-manager and the driver
upgrade controller cannot pause it; GPU operator v26.7.0 sets `nvidia.com/gpu.deploy.client=false` on a node
while they work so that third-party GPU clients leave it (controllers/state_manager.go:108, commit 45fb0db6e).
`dcgmAgent.affinity` (accepted by the add-on schema, configuration.schema.json:98 @v1.6.6) is therefore the
chart's default affinity (values.yaml:122-147 @v1.6.6) with that label added: `In [true]` or `DoesNotExist`
(a node the operator has not labelled yet), as NVIDIA's NVSentinel charts do.

The engine is bound to every address (`-b ALL`) and takes commands (diagnostics, configuration) from any
client, on GPUs that teams share. Its only legitimate clients are on its own node, on the host network: the
agent and dcgm-exporter, both at localhost:5555. A NetworkPolicy with no ingress rule (added through the
chart's `extraObjects`, in the add-on schema @v1.6.6) isolates the dcgm-server pods: Kubernetes still admits
traffic from the pod's own node ("Traffic is allowed to a pod if ... the traffic source is the pod's local
node", NetworkPolicySpec API reference; the VPC CNI's policy agent allows the node IP,
aws/aws-network-policy-agent#65), and drops what pods send to its pod IP or, through the host port, to
node-IP:5555. It only bites where the CNI enforces NetworkPolicies (docs/aws.md, Known
limits).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from infra.gpu_stack.gpu_operator import tolerations
from infra.spec import ClusterSpec

MONITORING_ADDON = "eks-node-monitoring-agent"
MONITORING_NAMESPACE = "kube-system"  # where EKS installs the add-on's DaemonSets
DCGM_HOSTENGINE_PORT = 5555
DCGM_SERVER_LABELS = {"k8s-app": "dcgm-server", "version": "v1"}  # templates/dcgm-daemonset.yaml @v1.6.6
DCGM_SERVER_POLICY = "dcgm-server-node-local-only"
DEPLOY_CLIENT_LABEL = "nvidia.com/gpu.deploy.client"  # GPU operator v26.7.0 controllers/state_manager.go:108

# charts/eks-node-monitoring-agent/values.yaml:122-147 @v1.6.6, the chart's `dcgmAgent.affinity` (a value set
# through the add-on replaces it whole): NVIDIA instance types, no Fargate/Auto/hybrid/HyperPod, amd64 only.
DCGM_INSTANCE_TYPES = [
    "g3.16xlarge",
    "g3.4xlarge",
    "g3.8xlarge",
    "g3s.xlarge",
    "g4dn.12xlarge",
    "g4dn.16xlarge",
    "g4dn.2xlarge",
    "g4dn.4xlarge",
    "g4dn.8xlarge",
    "g4dn.metal",
    "g4dn.xlarge",
    "g5.12xlarge",
    "g5.16xlarge",
    "g5.24xlarge",
    "g5.2xlarge",
    "g5.48xlarge",
    "g5.4xlarge",
    "g5.8xlarge",
    "g5.xlarge",
    "g5g.16xlarge",
    "g5g.2xlarge",
    "g5g.4xlarge",
    "g5g.8xlarge",
    "g5g.metal",
    "g5g.xlarge",
    "g6.12xlarge",
    "g6.16xlarge",
    "g6.24xlarge",
    "g6.2xlarge",
    "g6.48xlarge",
    "g6.4xlarge",
    "g6.8xlarge",
    "g6.xlarge",
    "g6e.12xlarge",
    "g6e.16xlarge",
    "g6e.24xlarge",
    "g6e.2xlarge",
    "g6e.48xlarge",
    "g6e.4xlarge",
    "g6e.8xlarge",
    "g6e.xlarge",
    "g6f.2xlarge",
    "g6f.4xlarge",
    "g6f.large",
    "g6f.xlarge",
    "g7e.12xlarge",
    "g7e.24xlarge",
    "g7e.2xlarge",
    "g7e.48xlarge",
    "g7e.4xlarge",
    "g7e.8xlarge",
    "gr6.4xlarge",
    "gr6.8xlarge",
    "gr6f.4xlarge",
    "p2.16xlarge",
    "p2.8xlarge",
    "p2.xlarge",
    "p3.16xlarge",
    "p3.2xlarge",
    "p3.8xlarge",
    "p3dn.24xlarge",
    "p4d.24xlarge",
    "p4de.24xlarge",
    "p5.48xlarge",
    "p5.4xlarge",
    "p5e.48xlarge",
    "p5en.48xlarge",
    "p6-b200.48xlarge",
    "p6-b300.48xlarge",
    "p6e-gb200.36xlarge",
    "p6e-gb300.36xlarge",
]
DCGM_DEFAULT_EXPRESSIONS: list[dict[str, Any]] = [
    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": DCGM_INSTANCE_TYPES},
    {"key": "eks.amazonaws.com/compute-type", "operator": "NotIn", "values": ["fargate", "auto", "hybrid"]},
    {"key": "sagemaker.amazonaws.com/compute-type", "operator": "NotIn", "values": ["hyperpod"]},
    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
]


def dcgm_agent_affinity() -> dict[str, Any]:
    """The chart's default dcgm-server affinity, in two terms (ORed): deploy.client `true`, or not set yet."""
    terms = [
        {"matchExpressions": [*copy.deepcopy(DCGM_DEFAULT_EXPRESSIONS), client]}
        for client in (
            {"key": DEPLOY_CLIENT_LABEL, "operator": "In", "values": ["true"]},
            {"key": DEPLOY_CLIENT_LABEL, "operator": "DoesNotExist"},
        )
    ]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


def dcgm_server_network_policy() -> dict[str, Any]:
    """Isolate the dcgm-server pods for ingress; only their own node (host-network clients) still reaches them."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": DCGM_SERVER_POLICY,
            "namespace": MONITORING_NAMESPACE,
            "labels": {"app.kubernetes.io/managed-by": "gpufleet"},
        },
        "spec": {
            "podSelector": {"matchLabels": dict(DCGM_SERVER_LABELS)},
            "policyTypes": ["Ingress"],
            "ingress": [],
        },
    }


def monitoring_agent_values(spec: ClusterSpec) -> dict[str, Any]:
    """The node monitoring agent's configuration: its DCGM server tolerates the GPU and pool taints, leaves a
    node while the GPU operator reconfigures its GPUs, and takes connections only from its own node."""
    return {
        "dcgmAgent": {"tolerations": tolerations(spec), "affinity": dcgm_agent_affinity()},
        "extraObjects": [dcgm_server_network_policy()],
    }


def monitoring_agent_configuration(spec: ClusterSpec) -> str:
    """`configuration_values` (a JSON string) for the `eks-node-monitoring-agent` add-on."""
    return json.dumps(monitoring_agent_values(spec), sort_keys=True)
