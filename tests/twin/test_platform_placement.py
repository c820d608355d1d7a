"""The gpu-binpack Deployment and its PodDisruptionBudget, as the metal stack renders them, on the twin of a cluster
whose GPU hosts are all tainted and two CPU nodes are not (the real default kube-scheduler places the pods, the
real controller-manager runs the Deployment, the disruption budget and the node lifecycle, kwok plays kubelet).

- Two untainted nodes: one replica on each, and a rolling update completes: the surge pod may join a node that
  has a replica (maxSkew 1), which required host anti-affinity forbids, so with two nodes its rollout never
  started (Deployment defaults maxSurge 1, maxUnavailable 0 for 2 replicas; kubernetes.io "Deployments").
- One untainted node (the other cordoned: the node lifecycle controller taints it
  `node.kubernetes.io/unschedulable:NoSchedule`, kubernetes v1.35.8 pkg/controller/nodelifecycle
  `doNoScheduleTaintingPass`): draining the cordoned node evicts its replica, whose replacement starts beside
  the other one, because the tainted GPU hosts and the cordoned node are no topology domains
  (`nodeTaintsPolicy: Honor`, pkg/scheduler/framework/plugins/podtopologyspread/common.go).
- Draining that last node evicts one replica and is refused the other ("Cannot evict pod as it would violate the
  pod's disruption budget", pkg/registry/core/pod/storage/eviction.go): `maxUnavailable: 1` of 2.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from infra.scheduling import scheduler_inputs
from infra.stackfile import load_stack
from scheduler.labels import SCHEDULER_NAMESPACE, SECONDARY_SCHEDULER_NAME
from scheduler.placement import secondary_scheduler
from tests.conftest import ROOT
from tests.support import eventually
from tests.twin.conftest import start_twin
from tests.twin.kube import Kube

SELECTOR = f"app.kubernetes.io/name={SECONDARY_SCHEDULER_NAME}"
CPU_NODES = ("twin-cpu-1", "twin-cpu-2")  # twin.nodes: the existing platform's untainted nodes


def replicas(kube: Kube) -> list[dict[str, Any]]:
    return kube.items("pods", SCHEDULER_NAMESPACE, SELECTOR)


def ready(pod: dict[str, Any]) -> bool:
    conditions = pod["status"].get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def running_on(kube: Kube) -> list[str]:
    """The nodes of the Ready replicas that are not being deleted, sorted."""
    pods = [p for p in replicas(kube) if ready(p) and not p["metadata"].get("deletionTimestamp")]
    return sorted(p["spec"]["nodeName"] for p in pods)


def budget_allows(kube: Kube, count: int) -> bool:
    pdb = kube.get("pdb", SECONDARY_SCHEDULER_NAME, SCHEDULER_NAMESPACE)
    status = pdb.get("status") or {}
    current = status.get("observedGeneration") == pdb["metadata"]["generation"]
    return current and status.get("disruptionsAllowed") == count


def rolled_out(kube: Kube) -> bool:
    d = kube.get("deployment", SECONDARY_SCHEDULER_NAME, SCHEDULER_NAMESPACE)
    s = d.get("status") or {}
    done = s.get("observedGeneration") == d["metadata"]["generation"]
    return done and s.get("updatedReplicas") == s.get("availableReplicas") == s.get("replicas") == 2


def drain(kube: Kube, node: str, timeout: str) -> Any:
    return kube.attempt(
        "drain", node, f"--pod-selector={SELECTOR}", "--ignore-daemonsets", f"--timeout={timeout}"
    )


def test_the_scheduler_spreads_over_two_nodes_shares_one_and_never_loses_both(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    spec = load_stack(ROOT / "Pulumi.metal.yaml")
    objects = secondary_scheduler(*scheduler_inputs(spec))
    twin = start_twin(tmp_path_factory, "metal", bare=True)
    try:
        kube = Kube.of(twin)
        kube.ok("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
        assert eventually(lambda: running_on(kube) == list(CPU_NODES), "a replica on each CPU node", 90)

        kube.ok("patch", "deployment", SECONDARY_SCHEDULER_NAME, "-n", SCHEDULER_NAMESPACE, "--type=merge", "-p",
                json.dumps({"spec": {"template": {"metadata": {"annotations": {"rollout": "1"}}}}}))  # fmt: skip
        eventually(lambda: rolled_out(kube), "the rolling update to complete on two nodes", 90)
        assert eventually(lambda: running_on(kube) == list(CPU_NODES), "one new replica per node", 60)

        eventually(lambda: budget_allows(kube, 1), "the budget to allow one eviction", 60)
        first = drain(kube, CPU_NODES[0], "60s")
        assert first.ok, first.err
        both = [CPU_NODES[1], CPU_NODES[1]]
        assert eventually(lambda: running_on(kube) == both, "the evicted replica beside the other", 90)

        eventually(lambda: budget_allows(kube, 1), "the budget to allow one eviction", 60)
        last = drain(kube, CPU_NODES[1], "15s")
        assert not last.ok
        assert "violate the pod's disruption budget" in last.out + last.err
        assert running_on(kube) == [CPU_NODES[1]]
        pending = [p for p in replicas(kube) if not p["spec"].get("nodeName")]
        assert len(pending) == 1  # the replacement: no node can take it
    finally:
        twin.stop()
