"""The AWS platform: a VPC, an EKS cluster, GPU managed node groups and the add-ons, as Pulumi components.

Each `*.py` beside a component holds the pure data it applies (tags, IAM policies, launch-template data), so
the facts are testable without Pulumi and the components stay thin.
"""
