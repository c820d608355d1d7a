"""Where GPU shares through DRA (`sharing: dra-shares`) can run, checked before anything is built.

- Kubernetes 1.36 or later: consumable capacity (DRAConsumableCapacity, KEP-5075), which lets many claims share
  one device, is beta and on from 1.36 (k8s.io/kubernetes pkg/features/kube_features.go at v1.36.4); on 1.35 it
  is alpha and off, so the scheduler would give each claim a whole GPU.
- On EKS, static capacity only, as EKS recommends for DRA: no autoscaler counts GPU shares
  (kubernetes-sigs/karpenter#729), and Karpenter cannot provision nodes for pods whose only GPU request is a
  claim (aws/karpenter-provider-aws#9519), so a pool's minSize must equal its maxSize.
- Kubernetes with Kueue: Slurm's GRES has no DRA.
One mode per pool (`Sharing` refuses `{draShares, mig}` together); the GPU operator's device plugin is kept off
the pool's nodes (scheduler.labels.pool_node_labels), so the driver alone hands out their GPUs.
"""

from __future__ import annotations

from infra.problems import NP
from infra.spec import ClusterSpec

MINOR = (1, 36)


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def share_problems(spec: ClusterSpec, problems: list[str]) -> None:
    for i, pool in enumerate(spec.node_pools):
        if not pool.sharing.dra_shares:
            continue
        at = f"{NP}[{i}].sharing"
        version = spec.cluster.kubernetes_version
        if _minor(version) < MINOR:
            problems.append(
                f"{at}: dra-shares needs Kubernetes 1.36 or later (consumable capacity is beta and on from 1.36); "
                f"cluster.kubernetesVersion is {version!r}"
            )
        if spec.platform == "aws" and spec.cluster.autoscaler == "karpenter":
            problems.append(
                f"{at}: dra-shares needs static capacity on EKS; Karpenter cannot provision nodes for pods that "
                "ask for GPUs only through a ResourceClaim (aws/karpenter-provider-aws#9519); accepted: "
                "cluster.autoscaler: cluster-autoscaler with minSize equal to maxSize"
            )
        elif spec.platform == "aws" and pool.min_size != pool.max_size:
            problems.append(
                f"{at}: dra-shares needs static capacity on EKS (no autoscaler counts GPU shares); set minSize "
                f"equal to maxSize (now {pool.min_size} and {pool.max_size})"
            )
        if spec.cluster.orchestrator == "slurm":
            problems.append(
                f"{at}: dra-shares is a Kubernetes feature; accepted under Slurm: exclusive, timeSlicing, mig"
            )
