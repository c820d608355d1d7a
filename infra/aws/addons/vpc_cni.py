"""Configuration of the Amazon VPC CNI EKS add-on: its network policy agent enforces NetworkPolicies.

EKS installs the VPC CNI with every cluster, but its policy agent is off by default, and then the team
namespaces' NetworkPolicies (scheduler.namespaces) are accepted by the API server and silently not enforced.
`enableNetworkPolicy: "true"` is the add-on's configuration key (a string, as in the EKS user guide, "Restrict
Pod network traffic with Kubernetes network policies"); the add-on keeps the version EKS installed for the
cluster's Kubernetes minor, only its configuration is taken over.
"""

from __future__ import annotations

import json

ADDON = "vpc-cni"
CONFIGURATION = {"enableNetworkPolicy": "true"}


def configuration_values() -> str:
    return json.dumps(CONFIGURATION, sort_keys=True)
