"""Configuration of the EKS-managed add-ons (`aws.eks.Addon.configuration_values`), as plain data.

The EKS node monitoring agent runs two DaemonSets: the agent itself (which tolerates every taint by default)
and `dcgm-server`, an NVIDIA DCGM host engine on every NVIDIA instance type that the agent reads GPU health
from. The chart's `dcgmAgent.tolerations` default is empty (aws/eks-node-monitoring-agent v1.6.6,
charts/eks-node-monitoring-agent/values.yaml), so on GPU nodes tainted `nvidia.com/gpu` it never runs and
`AcceleratedHardwareReady` has no DCGM signal. The add-on's configuration schema accepts
`dcgmAgent.tolerations` (charts/configuration.schema.json), so the GPU taint and every pool taint go there.

Its host engine listens on host port 5555 (templates/dcgm-daemonset.yaml: `nv-hostengine -n -b ALL`,
`hostPort: 5555`); the GPU operator's dcgm-exporter is pointed at it (infra.addons.gpu_operator) so each node
runs one host engine, not two.
"""

from __future__ import annotations

import json
from typing import Any

from infra.addons.gpu_operator import tolerations
from infra.spec import ClusterSpec

MONITORING_ADDON = "eks-node-monitoring-agent"
DCGM_HOSTENGINE_PORT = 5555


def monitoring_agent_values(spec: ClusterSpec) -> dict[str, Any]:
    """The node monitoring agent's configuration: its DCGM server tolerates the GPU and pool taints."""
    return {"dcgmAgent": {"tolerations": tolerations(spec)}}


def monitoring_agent_configuration(spec: ClusterSpec) -> str:
    """`configuration_values` (a JSON string) for the `eks-node-monitoring-agent` add-on."""
    return json.dumps(monitoring_agent_values(spec), sort_keys=True)
