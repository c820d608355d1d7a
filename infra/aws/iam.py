"""IAM documents as data: trust policies, the node role's managed policies and the cluster-autoscaler policy.

Every function returns a JSON string ready for `aws.iam.*`; they take plain values (an issuer URL, an ARN) so
the components apply them inside `Output.apply` and tests read them without Pulumi.
"""

from __future__ import annotations

import json
from typing import Any

CLUSTER_POLICIES = ("AmazonEKSClusterPolicy",)
NODE_POLICIES = (
    "AmazonEKSWorkerNodePolicy",
    "AmazonEKS_CNI_Policy",
    "AmazonEC2ContainerRegistryPullOnly",
    "AmazonSSMManagedInstanceCore",  # Session Manager instead of SSH keys: no inbound port on GPU nodes
)
CLUSTER_ADMIN_POLICY = "AmazonEKSClusterAdminPolicy"


def _doc(*statements: dict[str, Any]) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)}, sort_keys=True)


def managed_policy_arn(partition: str, name: str) -> str:
    return f"arn:{partition}:iam::aws:policy/{name}"


def access_policy_arn(partition: str, name: str = CLUSTER_ADMIN_POLICY) -> str:
    return f"arn:{partition}:eks::aws:cluster-access-policy/{name}"


def service_trust_policy(service: str) -> str:
    """Lets an AWS service (eks.amazonaws.com, ec2.amazonaws.com) assume the role."""
    return _doc({"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"})


def irsa_trust_policy(provider_arn: str, issuer_url: str, namespace: str, service_account: str) -> str:
    """Lets exactly one Kubernetes service account assume the role through the cluster's OIDC provider."""
    issuer = issuer_url.removeprefix("https://")
    return _doc(
        {
            "Effect": "Allow",
            "Principal": {"Federated": provider_arn},
            "Action": "sts:AssumeRoleWithWebIdentity",
            "Condition": {
                "StringEquals": {
                    f"{issuer}:sub": f"system:serviceaccount:{namespace}:{service_account}",
                    f"{issuer}:aud": "sts.amazonaws.com",
                }
            },
        }
    )


def secrets_key_policy(key_arn: str) -> str:
    """What the EKS cluster role needs on its secrets key (the key policy delegates to IAM)."""
    return _doc(
        {
            "Effect": "Allow",
            "Action": ["kms:Encrypt", "kms:Decrypt", "kms:ListGrants", "kms:DescribeKey", "kms:CreateGrant"],
            "Resource": key_arn,
        }
    )


def autoscaler_policy(cluster: str) -> str:
    """The cluster-autoscaler's permissions: read anything it must inspect, change only this cluster's groups.

    The write actions carry a condition on the `k8s.io/cluster-autoscaler/<cluster>: owned` tag, which EKS puts
    on the Auto Scaling group of every managed node group of the cluster, so the role cannot resize another
    cluster's groups. `eks:DescribeNodegroup` lets it read a managed group's labels and taints when scaling
    from zero.
    """
    return _doc(
        {
            "Sid": "Inspect",
            "Effect": "Allow",
            "Action": [
                "autoscaling:DescribeAutoScalingGroups",
                "autoscaling:DescribeAutoScalingInstances",
                "autoscaling:DescribeLaunchConfigurations",
                "autoscaling:DescribeScalingActivities",
                "autoscaling:DescribeTags",
                "ec2:DescribeImages",
                "ec2:DescribeInstanceTypes",
                "ec2:DescribeLaunchTemplateVersions",
                "ec2:GetInstanceTypesFromInstanceRequirements",
                "eks:DescribeNodegroup",
            ],
            "Resource": "*",
        },
        {
            "Sid": "ScaleOwnGroups",
            "Effect": "Allow",
            "Action": ["autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"],
            "Resource": "*",
            "Condition": {"StringEquals": {f"aws:ResourceTag/k8s.io/cluster-autoscaler/{cluster}": "owned"}},
        },
    )
