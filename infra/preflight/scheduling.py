"""Preflight checks the scheduling layer relies on: things the cluster or a chart must provide before deploy.

- aws, `scheduling.provisioningRequests`: Kueue's ProvisioningRequest admission check only works if the
  cluster-autoscaler may read and update ProvisioningRequests and the PodTemplates they point at. The chart's
  ClusterRole grants both from chart 9.57.0 on (kubernetes/autoscaler, tag cluster-autoscaler-chart-9.57.0,
  charts/cluster-autoscaler/templates/clusterrole.yaml); with an older chart no GPU job would ever be admitted.
- existing: every host of a GPU pool carries the GPU taint (gpufleet does not taint nodes it did not create,
  and an untainted GPU node takes any pod, bypassing the queues' placement), at least two other nodes take the
  platform's pods, which tolerate no taints, and the CNI enforces NetworkPolicies (otherwise the team
  namespaces' policies are accepted and do nothing).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from infra.preflight.findings import Finding, error, ok, warning
from infra.preflight.kube import KubernetesReader
from infra.spec import ClusterSpec
from scheduler.labels import GPU_TAINT

PROVISIONING_RBAC_SINCE = (9, 57, 0)

# DaemonSets of CNIs that enforce NetworkPolicies, by name (their upstream manifests and charts): Calico
# (`calico-node`, kube-system or calico-system), Cilium (`cilium`), Antrea (`antrea-agent`), kube-router,
# Canal (flannel + Calico policy), Weave Net. The AWS VPC CNI (`aws-node`) enforces them only when its
# network policy agent runs with --enable-network-policy=true.
ENFORCING_DAEMONSETS = ("calico-node", "cilium", "antrea-agent", "kube-router", "canal", "weave-net")
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
PLATFORM_NODES = 2  # Kueue and gpu-binpack run two replicas each
VPC_CNI = "aws-node"
VPC_CNI_AGENT = "aws-network-policy-agent"


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.lstrip("v").split("-")[0].split("."))


def check_provisioning_rbac(spec: ClusterSpec) -> list[Finding]:
    """The pinned (or overridden) cluster-autoscaler chart grants what Kueue's ProvisioningRequests need."""
    if not spec.scheduling.provisioning_requests or spec.cluster.autoscaler != "cluster-autoscaler":
        return []
    subject = "gpufleet:versions.clusterAutoscalerChart"
    chart = spec.versions.cluster_autoscaler_chart
    if _version(chart) >= PROVISIONING_RBAC_SINCE:
        return [
            ok(subject, f"chart {chart} lets the autoscaler serve ProvisioningRequests (and PodTemplates)")
        ]
    since = ".".join(map(str, PROVISIONING_RBAC_SINCE))
    return [
        error(
            subject,
            f"chart {chart} has no RBAC for provisioningrequests/podtemplates: with "
            "scheduling.provisioningRequests no GPU job would ever be admitted",
            f"set gpufleet:versions.clusterAutoscalerChart to {since} or later",
        )
    ]


class ClusterReader(Protocol):
    """What the existing-cluster checks read (kubernetes.client's CoreV1Api + AppsV1Api, as plain dicts)."""

    def node(self, name: str) -> dict[str, Any] | None: ...
    def nodes(self) -> Iterable[dict[str, Any]]: ...
    def daemonsets(self) -> Iterable[dict[str, Any]]: ...
    def deployments(self, label_selector: str) -> Iterable[dict[str, Any]]: ...


def check_gpu_taints(spec: ClusterSpec, cluster: ClusterReader) -> list[Finding]:
    want = f"{GPU_TAINT['key']}={GPU_TAINT['value']}:{GPU_TAINT['effect']}"
    out: list[Finding] = []
    for i, pool in enumerate(spec.node_pools):
        for host in pool.hosts or []:
            subject = f"gpufleet:nodePools[{i}].hosts ({host})"
            node = cluster.node(host)
            if node is None:
                out.append(
                    error(subject, f"node {host} is not in the cluster", "join it, or fix the host name")
                )
                continue
            taints = node.get("spec", {}).get("taints") or []
            if any({k: t.get(k, "") for k in ("key", "value", "effect")} == GPU_TAINT for t in taints):
                out.append(ok(subject, f"node {host} has the GPU taint {want}"))
            else:
                out.append(
                    error(
                        subject,
                        f"node {host} lacks the GPU taint {want}: any pod could land on its GPUs",
                        f"kubectl taint node {host} {want} (or register the kubelet with it)",
                    )
                )
    return out


def takes_platform_pods(node: dict[str, Any]) -> bool:
    """A pod with no tolerations can be scheduled there: not cordoned, no NoSchedule or NoExecute taint (the
    scheduler's TaintToleration filter; PreferNoSchedule only scores). Not-ready and unreachable nodes carry
    such taints from the node lifecycle controller, so they do not count either."""
    spec = node.get("spec") or {}
    taints = spec.get("taints") or []
    return not spec.get("unschedulable") and not any(t.get("effect") in BLOCKING_EFFECTS for t in taints)


def check_platform_nodes(spec: ClusterSpec, cluster: ClusterReader) -> list[Finding]:
    """At least two nodes besides the GPU hosts take pods without tolerations: the platform's controllers
    (Kueue's two replicas, the gpu-binpack scheduler's two) tolerate no taints, so with none they stay Pending
    and no GPU job is ever admitted or bound; with one, both replicas of each share it, and draining it stops
    GPU admission and scheduling (their PodDisruptionBudgets then hold the drain on the last replica)."""
    hosts = {h for pool in spec.node_pools for h in pool.hosts or []}
    names = sorted(
        n["metadata"]["name"]
        for n in cluster.nodes()
        if n["metadata"]["name"] not in hosts and takes_platform_pods(n)
    )
    subject = "platform nodes (schedulable, untainted, not a nodePools host)"
    if len(names) >= PLATFORM_NODES:
        shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        return [ok(subject, f"{len(names)} nodes take the platform's pods ({shown})")]
    fix = (
        f"join {PLATFORM_NODES - len(names)} more node(s) without NoSchedule/NoExecute taints (CPU nodes), "
        "or uncordon / untaint nodes that are not GPU hosts"
    )
    if names:
        return [
            warning(
                subject,
                f"only {names[0]} takes pods without tolerations: Kueue's and gpu-binpack's replicas all run "
                "there, and draining it stops GPU admission and scheduling",
                fix,
            )
        ]
    return [
        error(
            subject,
            "no node takes pods without tolerations (all are GPU hosts, cordoned or tainted NoSchedule/"
            "NoExecute): Kueue and the gpu-binpack scheduler would stay Pending, so no GPU job would run",
            fix,
        )
    ]


def _enforcing(daemonset: dict[str, Any]) -> bool:
    name = daemonset["metadata"]["name"]
    if name in ENFORCING_DAEMONSETS:
        return True
    if name != VPC_CNI:
        return False
    containers = daemonset["spec"]["template"]["spec"].get("containers", [])
    agent = next((c for c in containers if c["name"] == VPC_CNI_AGENT), None)
    return agent is not None and "--enable-network-policy=true" in agent.get("args", [])


def check_network_policy_enforcement(cluster: ClusterReader) -> list[Finding]:
    subject = "network policies"
    found = sorted(
        f"{d['metadata']['namespace']}/{d['metadata']['name']}" for d in cluster.daemonsets() if _enforcing(d)
    )
    if found:
        return [ok(subject, f"the CNI enforces NetworkPolicies ({', '.join(found)})")]
    return [
        warning(
            subject,
            "no CNI that enforces NetworkPolicies was found: team namespaces are not isolated on the network",
            "install a policy-enforcing CNI or policy agent (Calico, Cilium, Antrea), or enable the VPC CNI's",
        )
    ]


# An adopted add-on is found by the labels its chart puts on its Deployment: Kueue's chart (kueue v0.19.2
# charts/kueue/templates/manager/manager.yaml, `kueue.labels` + component controller) and the GPU operator's
# (NVIDIA/gpu-operator v26.7.0 deployments/gpu-operator/templates/operator.yaml); both carry the release's
# `app.kubernetes.io/version` (Kueue "v0.19.2", the operator "v26.7.0").
ADOPTED = {
    "kueue": ("app.kubernetes.io/name=kueue,app.kubernetes.io/component=controller", "Kueue"),
    "gpuOperator": ("app.kubernetes.io/component=gpu-operator", "the NVIDIA GPU operator"),
}


def _running_version(deployment: dict[str, Any]) -> str:
    labels = deployment.get("metadata", {}).get("labels") or {}
    if labels.get("app.kubernetes.io/version"):
        return str(labels["app.kubernetes.io/version"])
    containers = deployment.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or [{}]
    image = str(containers[0].get("image", ""))
    return image.rsplit(":", 1)[-1] if ":" in image.rsplit("/", 1)[-1] else ""


def check_adopted_addons(spec: ClusterSpec, cluster: ClusterReader) -> list[Finding]:
    """`cluster.addons.<x>: existing`: the add-on runs, at the version gpufleet's objects are written for."""
    addons = spec.cluster.addons
    pinned = {"kueue": f"v{spec.versions.kueue_chart}", "gpuOperator": spec.versions.gpu_operator_chart}
    out: list[Finding] = []
    for key, value in (("kueue", addons.kueue), ("gpuOperator", addons.gpu_operator)):
        if value != "existing":
            continue
        selector, what = ADOPTED[key]
        subject = f"gpufleet:cluster.addons.{key}"
        found = list(cluster.deployments(selector))
        if not found:
            out.append(
                error(
                    subject,
                    f"existing, but {what} does not run (no Deployment labelled {selector})",
                    f"install it, or set {key}: install and let gpufleet install it",
                )
            )
            continue
        deployment = found[0]
        where = f"{deployment['metadata'].get('namespace', '')}/{deployment['metadata']['name']}"
        version = _running_version(deployment)
        if version != pinned[key]:
            versions_key = "kueueChart" if key == "kueue" else "gpuOperatorChart"
            out.append(
                error(
                    subject,
                    f"{what} runs {version or 'an unknown version'} ({where}); gpufleet's objects are "
                    f"written for {pinned[key]}",
                    f"upgrade it to {pinned[key]}, or set gpufleet:versions.{versions_key} to the version that runs",
                )
            )
        else:
            out.append(ok(subject, f"{what} {version} runs ({where}); adopted"))
    return out


def check_existing_cluster(spec: ClusterSpec, cluster: ClusterReader | None = None) -> list[Finding]:
    """The in-cluster checks; an error when the cluster cannot be read: a preflight that checked nothing of
    the cluster it deploys to must not pass, and deploy stops on errors only."""
    try:
        path = str(Path(spec.cluster.kubeconfig or "").expanduser())
        reader = cluster or KubernetesReader(path, spec.cluster.kubeconfig_context)
        return (
            check_gpu_taints(spec, reader)
            + check_platform_nodes(spec, reader)
            + check_network_policy_enforcement(reader)
            + check_adopted_addons(spec, reader)
        )
    except Exception as exc:  # any client or connection failure: report it, do not crash
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return [
            error(
                "gpufleet:cluster.kubeconfig",
                f"could not read the cluster ({reason}); GPU taints, platform nodes and NetworkPolicy enforcement "
                "not checked",
                "check that the kubeconfig and context reach the cluster, then run preflight again",
            )
        ]
