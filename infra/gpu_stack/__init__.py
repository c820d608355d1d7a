"""The in-cluster GPU stack every platform installs: the NVIDIA GPU operator, the metrics and health stack
(`operations`) and the scheduling policy, as Helm releases through one helper (`helm`).

`infra.aws` and `infra.existing` each build their platform and then this stack on it; the twin deploys it too.
"""
