"""Karpenter on EKS, as plain data built from the cluster spec (no pulumi here).

- `pools`: which GPU pools Karpenter provisions, and their NodePools and EC2NodeClasses;
- `disruption`: the policy that marks running training pods `karpenter.sh/do-not-disrupt`;
- `iam`: the controller's least-privilege policy, the interruption queue's policy and its EventBridge rules;
- `values`: the Helm values of the pinned Karpenter chart.

`infra.aws.karpenter.component` applies them; `invoke render` writes the manifests for GitOps.
"""
