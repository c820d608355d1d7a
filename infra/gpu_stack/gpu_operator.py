"""Helm values of the NVIDIA GPU operator, derived from the spec.

The values are cluster-wide but a cluster's pools may mix node images, so they are chosen for the whole mix:

- the driver and the container toolkit are already on EKS NVIDIA nodes (AL2023 and Bottlerocket ship both),
  and on bare metal Ansible installs them unless the spec asks the operator to (`driverManagedBy: operator`,
  with the precompiled driver of the pinned branch);
- the device plugin runs everywhere except on Bottlerocket nodes, which run their own: their node groups carry
  `nvidia.com/gpu.deploy.device-plugin=false` (see infra.aws.nodepools), so one values document serves both;
- CDI is on (the chart's default, set explicitly because GPU isolation depends on it): the device plugin passes
  its allocations to the runtime as CDI devices, not through `NVIDIA_VISIBLE_DEVICES`, so a container cannot
  ask for every GPU with an environment variable (see scheduler.sharing);
- its configuration is the scheduler's ConfigMap (one entry per sharing pool, picked by node label), default
  entry "default"; MIG pools switch the strategy to `mixed` and turn on mig-manager;
- every operand tolerates the GPU taint (and each pool's extra taints) so it reaches the GPU nodes;
- dcgm-exporter always runs (node health and metrics) with gpufleet's counter list and the pod mapping its
  release gets right on that platform (infra.monitoring.exporter: per-process values, with the token and host
  PIDs they need, only where time-sliced pools need them and the release has them; one pod per GPU
  otherwise); its ServiceMonitor only when monitoring is enabled, because without the Prometheus operator CRDs
  the object cannot be created (infra.monitoring.stack.dcgm_exporter_values);
- with self-healing on an existing cluster, DCGM runs standalone so NVSentinel can read its health checks;
- on EKS the node monitoring agent already runs a DCGM host engine on every GPU node (host port 5555, see
  infra.aws.addons.eks_addons); two host engines on one node contend for the GPUs' DCGM state, so dcgm-exporter runs
  on the host network and reads that engine (`DCGM_REMOTE_HOSTENGINE_INFO`, dcgm-exporter's
  `--remote-hostengine-info`) instead of starting its embedded one. It runs the dcgm-exporter release built on
  that engine's DCGM (the add-on v1.6.6's dcgm-server image is `4.5.2-4.8.1-ubuntu22.04`, so the exporter is
  `4.5.2-4.8.1-distroless`, not the operator's default `4.6.0-4.8.3`): NVIDIA ships exporter and DCGM as tested
  pairs. That release has no per-process values and, with `KUBERNETES_VIRTUAL_GPUS`, drops the series of
  every free GPU of a node with one GPU held (infra.versions.DCGM_EXPORTER_RELEASES), so on aws the exporter
  maps one pod per GPU. That engine runs only on amd64 nodes (the add-on's dcgmAgent affinity), and the
  ClusterPolicy has one dcgm-exporter DaemonSet for every node, so an arm64 GPU pool on EKS would have an
  exporter with no engine to read: `arm64_gpu_pool_problems` refuses such pools;
- on EKS, mig-manager may reboot a node (`WITH_REBOOT=true`): enabling MIG mode on a cloud instance's GPUs
  needs a reset the driver cannot do while the node runs (GPU operator docs, "GPU Operator with MIG": "in a
  CSP environment ... WITH_REBOOT ... to ensure that the node reboots and can apply the MIG configuration").
"""

from __future__ import annotations

from typing import Any

from infra import catalog
from infra.monitoring.health import gpu_operator_dcgm_values
from infra.monitoring.stack import dcgm_exporter_values as monitored_dcgm_exporter_values
from infra.spec import ClusterSpec
from infra.versions import Versions
from scheduler.labels import DEVICE_PLUGIN_CONFIGMAP, DEVICE_PLUGIN_DEFAULT_CONFIG

MIG_DEFAULT = "all-disabled"  # the only non-empty default the ClusterPolicy accepts
CONTROL_PLANE = {
    "key": "node-role.kubernetes.io/control-plane",
    "operator": "Equal",
    "value": "",
    "effect": "NoSchedule",
}


def tolerations(spec: ClusterSpec) -> list[dict[str, str]]:
    """The GPU taint, plus every extra taint a pool sets, each tolerated once."""
    out = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    for pool in spec.node_pools:
        for taint in pool.taints:
            tol = {"key": taint.key, "operator": "Exists", "effect": taint.effect}
            if tol not in out:
                out.append(tol)
    return out


def operator_manages_driver(spec: ClusterSpec) -> bool:
    return spec.platform == "existing" and spec.cluster.driver_managed_by == "operator"


EKS_DCGM_HOSTENGINE = "localhost:5555"  # the node monitoring agent's dcgm-server (hostPort 5555)
# The DCGM of the node monitoring add-on's dcgm-server, per add-on release: its `dcgmAgent.image.tag`
# (aws/eks-node-monitoring-agent charts/eks-node-monitoring-agent/values.yaml:106 @v1.6.6). A test keeps the
# pinned add-on (Versions.node_monitoring_agent_addon) in this table.
NODE_MONITORING_DCGM = {"v1.6.6": "4.5.2-4.8.1-ubuntu22.04"}
# dcgm-exporter built on that DCGM: tag 4.5.2-4.8.1 of NVIDIA/dcgm-exporter (hack/VERSION NEW_DCGM_VERSION=4.5.2,
# NEW_EXPORTER_VERSION=4.8.1; its Makefile tags the image `<dcgm>-<exporter>-distroless`, the variant the GPU
# operator's default uses). That nvcr.io serves this tag was not checked from here (docs/aws.md, Known limits).
EKS_DCGM_EXPORTER_VERSION = Versions().eks_dcgm_exporter
# The node monitoring add-on's dcgm-server is scheduled only on these (values.yaml:143-147 @v1.6.6).
EKS_DCGM_ARCHES = ("amd64",)
_ARCH = {"x86_64": "amd64", "arm64": "arm64"}  # catalog arch -> kubernetes.io/arch


def arm64_gpu_pool_problems(spec: ClusterSpec) -> list[str]:
    """On aws, GPU pools whose instance types the node monitoring agent's DCGM host engine does not run on.

    dcgm-exporter is pointed at that engine on every node (one ClusterPolicy, one DaemonSet, one env), and the
    engine runs only on amd64 (eks-node-monitoring-agent v1.6.6 values.yaml:143-147, `kubernetes.io/arch In
    [amd64]`), so on an arm64 GPU node (g5g) the exporter has nothing to read and the agent has no DCGM
    health either. Refused rather than half-monitored."""
    if spec.platform != "aws":
        return []
    problems = []
    for i, pool in enumerate(spec.node_pools):
        key = "instanceTypes" if pool.instance_types else "instanceType"
        names = list(
            dict.fromkeys(
                [*([pool.instance_type] if pool.instance_type else []), *(pool.instance_types or [])]
            )
        )
        types = [t for t in map(catalog.lookup, names) if t is not None and t.gpus]
        arches = {_ARCH.get(t.arch, t.arch) for t in types}
        if len(arches) != 1 or arches <= set(EKS_DCGM_ARCHES):
            continue  # several architectures in one pool are refused by the pool's own rule, with the type
        shown = ", ".join(t.name for t in types)
        problems.append(
            f"gpufleet:nodePools[{i}].{key}: {shown} {'is' if len(types) == 1 else 'are'} {types[0].arch}; on aws dcgm-exporter reads the EKS node "
            "monitoring agent's DCGM host engine, which runs only on amd64 nodes, so this pool would have no GPU "
            "metrics or DCGM health; use an amd64 (x86_64) GPU instance type"
        )
    return problems


def dcgm_exporter_values(spec: ClusterSpec) -> dict[str, Any]:
    """Monitoring's dcgm-exporter section; on EKS, read the node monitoring agent's host engine."""
    values = monitored_dcgm_exporter_values(spec)
    if spec.platform == "aws":
        values = values | {
            "version": spec.versions.eks_dcgm_exporter,
            "hostNetwork": True,
            "env": [
                *values.get("env", []),
                {"name": "DCGM_REMOTE_HOSTENGINE_INFO", "value": EKS_DCGM_HOSTENGINE},
            ],
        }
    return values


def mig_manager_values(spec: ClusterSpec, any_mig: bool) -> dict[str, Any]:
    values: dict[str, Any] = {
        "enabled": any_mig,
        "config": {"create": False, "name": "", "default": MIG_DEFAULT},
    }
    if any_mig and spec.platform == "aws":
        values["env"] = [{"name": "WITH_REBOOT", "value": "true"}]
    return values


# Kueue sets this label on the pod template of every job it starts (kueue v0.19.2
# pkg/controller/constants/constants.go, PodSetLabel), so every admitted job's pods carry it.
ADMITTED_POD_SELECTOR = "kueue.x-k8s.io/podset"


def driver_upgrade_policy() -> dict[str, Any]:
    """The operator's driver upgrade waits for the node's admitted jobs to end before it deletes GPU pods.

    Its default (`values.yaml:167-198` at v26.7.0) waits for no pod (`waitForCompletion.podSelector: ""`) and
    deletes each node's GPU pods after 300 s, so a driver bump kills running jobs node by node. With the
    selector and `timeoutSeconds: 0` ("zero means infinite", the ClusterPolicy CRD) it waits for them; holding
    the pools' queues first (`invoke drain`) lets the nodes empty."""
    return {"waitForCompletion": {"podSelector": ADMITTED_POD_SELECTOR, "timeoutSeconds": 0}}


def gpu_operator_values(spec: ClusterSpec) -> dict[str, Any]:
    any_mig = any(p.sharing.mode == "mig" for p in spec.node_pools)
    manage = operator_manages_driver(spec)
    driver: dict[str, Any] = {"enabled": manage}
    if manage:
        driver |= {
            "usePrecompiled": True,
            "version": spec.versions.nvidia_driver_branch,
            "upgradePolicy": driver_upgrade_policy(),
        }
    return {
        "driver": driver,
        "toolkit": {"enabled": manage},
        "cdi": {"enabled": True},
        "devicePlugin": {
            "enabled": True,
            "config": {
                "create": False,
                "name": DEVICE_PLUGIN_CONFIGMAP,
                "default": DEVICE_PLUGIN_DEFAULT_CONFIG,
            },
        },
        "mig": {"strategy": "mixed" if any_mig else "single"},
        "migManager": mig_manager_values(spec, any_mig),
        "dcgmExporter": dcgm_exporter_values(spec),
        **({"dcgm": dcgm} if (dcgm := gpu_operator_dcgm_values(spec)) else {}),
        "daemonsets": {"tolerations": tolerations(spec)},
        # NFD labels the GPU nodes the operator then targets; the chart's list is replaced, so keep its entry.
        "node-feature-discovery": {"worker": {"tolerations": [CONTROL_PLANE, *tolerations(spec)]}},
    }
