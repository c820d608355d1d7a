"""Names shared by the scheduler and the infrastructure: node labels, taints, namespaces, resource names.

They exist once, here: `infra` imports them to label and taint node groups, the compiler uses them to build
flavors, device-plugin configs and quotas, so a node group and the objects that target it cannot drift apart.
"""

from __future__ import annotations

from typing import Any, Protocol

POOL_LABEL = "gpufleet.io/pool"
GPU_TAINT_KEY = "nvidia.com/gpu"
GPU_TAINT_VALUE = "true"
GPU_TAINT_EFFECT = "NoSchedule"
GPU_TAINT: dict[str, str] = {"key": GPU_TAINT_KEY, "value": GPU_TAINT_VALUE, "effect": GPU_TAINT_EFFECT}

# GPU operator: the device plugin picks its config (a key of DEVICE_PLUGIN_CONFIGMAP) from this node label,
# and mig-manager partitions a node's GPUs according to the mig.config label.
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
# GPU operator: `false` keeps every operand (dcgm-exporter among them) off the node (GPU Operator docs,
# "Disabling operands on a node"); gpufleet sets it on Bottlerocket nodes, and the alerts read it to know which
# GPU nodes run no exporter by design.
GPU_OPERANDS_LABEL = "nvidia.com/gpu.deploy.operands"
DEVICE_PLUGIN_CONFIGMAP = "gpufleet-device-plugin-config"
DEVICE_PLUGIN_DEFAULT_CONFIG = "default"  # the key used by pools that do not share their GPUs

GPU_OPERATOR_NAMESPACE = "gpu-operator"
KUEUE_NAMESPACE = "kueue-system"
SCHEDULER_NAMESPACE = "gpufleet-scheduler"  # the secondary scheduler (existing platform)
AUTOSCALER_NAMESPACE = "kube-system"
SECONDARY_SCHEDULER_NAME = "gpu-binpack"

GPU_RESOURCE = "nvidia.com/gpu"
SHARED_GPU_RESOURCE = "nvidia.com/gpu.shared"  # time-sliced replicas (renameByDefault)
# DRA-shared GPUs (scheduler.dra): the name Kueue counts their shares under (its deviceClassMappings), never a
# node's resource; pods ask for shares through ResourceClaimTemplates.
SHARE_RESOURCE = "gpufleet.io/gpu-shares"
# GPU operator: `false` keeps its device plugin off a node (the DRA driver hands out that node's GPUs).
DEVICE_PLUGIN_DEPLOY_LABEL = "nvidia.com/gpu.deploy.device-plugin"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"  # + profile, e.g. nvidia.com/mig-1g.10gb (mixed strategy)
HOSTNAME_LABEL = "kubernetes.io/hostname"
# EKS puts a node's place in the AWS network on these labels (EKS user guide, "Place distributed AI/ML workloads
# with network topology labels"), layer 1 the broadest; layer 4 exists only on some instance types.
AWS_NETWORK_LAYERS = tuple(f"topology.k8s.aws/network-node-layer-{n}" for n in (1, 2, 3))
EFA_RESOURCE = "vpc.amazonaws.com/efa"  # EFA interfaces, advertised by the AWS EFA device plugin


class SharedPool(Protocol):
    """What `pool_node_labels` reads (a scheduler.model.PoolView, or anything shaped like it)."""

    @property
    def name(self) -> str: ...
    @property
    def sharing(self) -> str: ...
    @property
    def mig_profile(self) -> str | None: ...


def mig_resource(profile: str) -> str:
    return f"{MIG_RESOURCE_PREFIX}{profile}"


def mig_config_name(profile: str) -> str:
    """The GPU operator's default mig-parted config that puts every GPU into this profile."""
    return f"all-{profile}"


def pool_node_labels(pool: SharedPool) -> dict[str, str]:
    """The labels every node of `pool` must carry: its pool label, plus the sharing selectors when it shares.

        A sharing pool's device-plugin config is the key named after the pool in DEVICE_PLUGIN_CONFIGMAP; a MIG
        pool also asks mig-manager for the all-<profile> layout. Exclusive pools use the default config. A DRA-shared
    pool keeps the device plugin off its nodes: the NVIDIA DRA driver publishes their GPUs instead.
    """
    labels = {POOL_LABEL: pool.name}
    if pool.sharing in ("timeSlicing", "mig"):
        labels[DEVICE_PLUGIN_CONFIG_LABEL] = pool.name
    if pool.sharing == "mig" and pool.mig_profile:
        labels[MIG_CONFIG_LABEL] = mig_config_name(pool.mig_profile)
    if pool.sharing == "draShares":
        labels[DEVICE_PLUGIN_DEPLOY_LABEL] = "false"
    return labels


MANAGED_BY = {"app.kubernetes.io/managed-by": "gpufleet"}


def metadata(name: str, namespace: str | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """ObjectMeta for a generated object: name, namespace (if any), and the managed-by label."""
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    meta["labels"] = {**MANAGED_BY, **(labels or {})}
    return meta


def restricted_security_context() -> dict[str, Any]:
    """A container security context that passes Pod Security `restricted` (non-root, no privilege escalation,
    all capabilities dropped, RuntimeDefault seccomp), for the platform's own scheduler pods."""
    return {
        "allowPrivilegeEscalation": False,
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
