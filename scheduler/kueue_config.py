"""The Kueue controller's configuration (config.kueue.x-k8s.io/v1beta2, what chart 0.19 ships) and chart values.

Two settings carry the design:
- `waitForPodsReady` makes admission all-or-nothing in effect: a gang whose pods are not all ready within the
  timeout is evicted and requeued, freeing its GPUs. The timeout must outlast cold GPU node provisioning.
- `manageJobsWithoutQueueName` with a namespace selector on team namespaces: a job or bare pod there that does
  not name a queue is still suspended/gated by Kueue (and lands in the namespace's `default` LocalQueue), so
  nothing in a team namespace takes GPUs without passing quota.

Kueue 0.19 blocks a workload that requests a resource no ClusterQueue declares (quotaCheckStrategy
`BlockUndeclared`, the default). gpufleet declares every resource a team pod may need on a GPU pool (cpu,
memory, the GPU names, EFA interfaces) and excludes the node-local ones it does not meter, `ephemeral-storage`
and `hugepages-*`, with `excludeResourcePrefixes` (the two options cannot be combined). Any other extended
resource is refused by Kueue until a queue declares it: a new device is an explicit decision, not a leak.
GPU shares allocated through DRA are declared the same way, under the logical name Kueue's
`deviceClassMappings` gives them (scheduler.dra).
"""

from __future__ import annotations

from typing import Any

from scheduler.dra import KUEUE_GATE, device_class_mappings
from scheduler.model import SchedulingPolicy
from scheduler.yamltext import dump_text

CONFIG_API = "config.kueue.x-k8s.io/v1beta2"
IMAGE_REPOSITORY = "registry.k8s.io/kueue/kueue"
EXCLUDED_RESOURCE_PREFIXES = ("ephemeral-storage", "hugepages-")
CLIENT_QPS = {"qps": 300, "burst": 500}  # chart 0.19.2's managerConfig default
REPLICAS = 2  # one leader, one standby that also serves the webhooks
PRIORITY_CLASS = "system-cluster-critical"  # evicted last: no Kueue, no admission and no webhook
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
        "clientConnection": dict(CLIENT_QPS),
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
        "resources": {"excludeResourcePrefixes": list(EXCLUDED_RESOURCE_PREFIXES)},
    }
    if policy.dra_shares:
        # DRA-shared pools: shares counted in quota (scheduler.dra), behind Kueue 0.19's alpha gate. Set in the
        # file, not as the chart's --feature-gates (empty by default), since Kueue refuses both at once.
        config["featureGates"] = {KUEUE_GATE: True}
        config["resources"]["deviceClassMappings"] = device_class_mappings()
    if policy.fair_sharing:
        config["fairSharing"] = {"preemptionStrategies": list(policy.fair_preemption_strategies)}
    return config


def kueue_values(policy: SchedulingPolicy) -> dict[str, Any]:
    """Helm values for the pinned Kueue chart (keys of its values.yaml at v0.19.2): the pinned image, two
    replicas behind a PodDisruptionBudget at system-cluster-critical priority, Prometheus metrics when a
    Prometheus operator runs (the chart's ServiceMonitor needs its CRD), and the manager configuration above."""
    return {
        "enablePrometheus": policy.metrics,
        "controllerManager": {
            "replicas": REPLICAS,
            "podDisruptionBudget": {"enabled": True, "minAvailable": 1},
            "manager": {
                "priorityClassName": PRIORITY_CLASS,
                "image": {
                    "repository": IMAGE_REPOSITORY,
                    "tag": f"v{policy.kueue_version}",
                    "pullPolicy": "IfNotPresent",
                },
            },
        },
        "managerConfig": {"controllerManagerConfigYaml": dump_text(manager_config(policy))},
    }
