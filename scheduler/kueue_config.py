"""The Kueue controller's configuration (config.kueue.x-k8s.io/v1beta2, what chart 0.19 ships) and chart values.

Two settings carry the design:
- `waitForPodsReady` makes admission all-or-nothing in effect: a gang whose pods are not all ready within the
  timeout is evicted and requeued, freeing its GPUs. The timeout must outlast cold GPU node provisioning.
- `manageJobsWithoutQueueName` with a namespace selector on team namespaces: a job or bare pod there that does
  not name a queue is still suspended/gated by Kueue (and lands in the namespace's `default` LocalQueue), so
  nothing in a team namespace takes GPUs without passing quota.
"""

from __future__ import annotations

from typing import Any

import yaml

from scheduler.model import SchedulingPolicy

CONFIG_API = "config.kueue.x-k8s.io/v1beta2"
IMAGE_REPOSITORY = "registry.k8s.io/kueue/kueue"
RELEASE_NAME = "kueue"  # the chart names its ClusterRoles "<release>-…", e.g. kueue-batch-user-role
QUEUE_MANAGED_LABEL = "gpufleet.io/queue-managed"
FRAMEWORKS = (
    "batch/job",
    "jobset.x-k8s.io/jobset",
    "kubeflow.org/mpijob",
    "kubeflow.org/pytorchjob",
    "trainer.kubeflow.org/trainjob",
    "ray.io/rayjob",
    "ray.io/raycluster",
    "leaderworkerset.x-k8s.io/leaderworkerset",
    "pod",
    "deployment",
    "statefulset",
)


def manager_config(policy: SchedulingPolicy) -> dict[str, Any]:
    config: dict[str, Any] = {
        "apiVersion": CONFIG_API,
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443", "enableClusterQueueResources": True},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "clientConnection": {"qps": 50, "burst": 100},
        "manageJobsWithoutQueueName": True,
        "managedJobsNamespaceSelector": {"matchLabels": {QUEUE_MANAGED_LABEL: "true"}},
        "waitForPodsReady": {
            "timeout": policy.wait_for_pods_ready_timeout,
            "blockAdmission": False,
            "requeuingStrategy": {
                "timestamp": "Eviction",
                "backoffBaseSeconds": 60,
                "backoffMaxSeconds": 3600,
            },
        },
        "integrations": {"frameworks": list(FRAMEWORKS)},
    }
    if policy.fair_sharing:
        config["fairSharing"] = {
            "preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]
        }
    return config


def kueue_values(policy: SchedulingPolicy) -> dict[str, Any]:
    """Helm values for the pinned Kueue chart: the pinned image and the manager configuration above."""
    return {
        "controllerManager": {
            "manager": {
                "image": {
                    "repository": IMAGE_REPOSITORY,
                    "tag": f"v{policy.kueue_version}",
                    "pullPolicy": "IfNotPresent",
                }
            }
        },
        "managerConfig": {
            "controllerManagerConfigYaml": yaml.safe_dump(manager_config(policy), sort_keys=False)
        },
    }
