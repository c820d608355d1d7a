"""The real Karpenter (the core's kwok provider at the stacks' release, `twin.karpenter`) on a Karpenter stack's
twin, deciding what gpufleet's docs and rollout facts say it decides: which node a pending GPU job gets, that
`karpenter.sh/do-not-disrupt` holds off graceful disruption, and what an AMI change does to a busy Spot
training node under the stack's drift budget.

One twin of example-karpenter whose `a10g-spot` pool (Spot first, On-Demand fallback, training) keeps gpufleet's
default training budgets (`Drifted: 0`, `Empty: 20%`; the example's working-hours Empty budget would make the
tests depend on the clock) and is consolidated 20 s after it empties instead of 10 minutes. Each test deploys
the pool's NodePool as a variant of the stack would render it (the twin's own `twin_node_pool`), and an AMI
change is a new `al2023NvidiaAmiRelease`, as a stack bumps it: on the twin it reaches Karpenter as a template
change (`twin.karpenter_objects`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.errors import ConfigError
from infra.rollout import plan_rollout, rollout_facts
from infra.spec import ClusterSpec
from infra.stackfile import load_stack
from tests.conftest import ROOT
from tests.support import eventually
from tests.twin.conftest import start_twin
from tests.twin.kube import Kube, job, name
from tests.twin.test_team_rules import pods_of
from twin.karpenter_objects import twin_node_pool

POOL = "a10g-spot"
NAMESPACE = "team-research"
GPU = "nvidia.com/gpu"
NEW_AMI = "1.36.4-20991231"
POD_GRACE_S = 30  # a pod's default terminationGracePeriodSeconds
BASE = {"capacityTypes": ["spot", "on-demand"], "consolidateAfter": "20s"}


def variant_file(folder: Path, label: str, **karpenter: Any) -> Path:
    """example-karpenter with a10g-spot's `karpenter` settings replaced (loading it runs the spec rules)."""
    doc = yaml.safe_load((ROOT / "Pulumi.example-karpenter.yaml").read_text())
    for pool in doc["config"]["gpufleet:nodePools"]:
        if pool["name"] == POOL:
            pool["karpenter"] = {**BASE, **karpenter}
    path = folder / f"Pulumi.karpenter-{label}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def variant(folder: Path, label: str, ami: str = "", **karpenter: Any) -> ClusterSpec:
    spec = load_stack(variant_file(folder, label, **karpenter))
    if ami:
        versions = spec.versions.model_copy(update={"al2023_nvidia_ami_release": ami})
        spec = spec.model_copy(update={"versions": versions})
    return spec


def deploy_pool(kube: Kube, spec: ClusterSpec) -> None:
    pool = next(p for p in spec.node_pools if p.name == POOL)
    body = json.dumps(twin_node_pool(spec, pool))
    kube.ok(
        "apply", "--server-side", "--force-conflicts", "--field-manager=gpufleet-twin", "-f", "-", stdin=body
    )


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    folder = tmp_path_factory.mktemp("karpenter-stacks")
    running = start_twin(tmp_path_factory, variant_file(folder, "twin"))
    yield Kube.of(running)
    running.stop()


@pytest.fixture
def folder(tmp_path: Path, twin: Kube) -> Path:
    """A test starts on the twin's own NodePool with none of the pool's nodes left from an earlier test."""
    deploy_pool(twin, variant(tmp_path, "base"))
    eventually(lambda: not claims(twin), f"no {POOL} NodeClaims left", 120)
    return tmp_path


def claims(kube: Kube) -> list[dict[str, Any]]:
    return kube.items("nodeclaims.karpenter.sh", selector=f"karpenter.sh/nodepool={POOL}")


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind), None)


def when(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def events(kube: Kube, kind: str, obj: str, reason: str) -> list[dict[str, Any]]:
    return [
        e
        for e in kube.items("events", "default")
        if e["involvedObject"].get("kind") == kind
        and e["involvedObject"].get("name") == obj
        and e["reason"] == reason
    ]


def do_not_disrupt_blocks(kube: Kube, node: str) -> list[dict[str, Any]]:
    """The node's DisruptionBlocked Events that name a pod's do-not-disrupt annotation. Karpenter may first block
    a new node for another reason (not yet initialized, still nominated); its recorder then drops every further
    DisruptionBlocked on that node for two minutes, since the dedupe key is the reason and the node's UID, not
    the message (kubernetes-sigs/karpenter@v1.14.1 pkg/events/recorder.go defaultDedupeTimeout,
    disruption/events/events.go Blocked). A wait for one spans that window and a disruption pass (10 s)."""
    return [
        e
        for e in events(kube, "Node", node, "DisruptionBlocked")
        if '"karpenter.sh/do-not-disrupt" annotation' in e["message"]
    ]


def submit(kube: Kube, seconds: int) -> str:
    """A one-GPU research job that runs `seconds` on its node (the twin's kwok convention)."""
    member = kube.as_member(("researchers",))
    train = name("train")
    body = job(
        train,
        NAMESPACE,
        {"cpu": "2", "memory": "8Gi", GPU: 1},
        annotations={"gpufleet.io/twin-duration": str(seconds)},
    )
    assert member.create(body).ok
    return train


def running_pod(kube: Kube, train: str) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        pods = [p for p in pods_of(kube, NAMESPACE, train) if p["status"].get("phase") == "Running"]
        return pods[0] if pods else None

    return dict(eventually(found, f"{train}'s pod Running on a Karpenter node", 180))


def claim_of(kube: Kube, node: str) -> dict[str, Any]:
    found = [c for c in claims(kube) if c.get("status", {}).get("nodeName") == node]
    assert len(found) == 1, [c["metadata"]["name"] for c in claims(kube)]
    return found[0]


def drifted(kube: Kube, node: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        cond = condition(claim_of(kube, node), "Drifted")
        return cond if cond and cond["status"] == "True" else None

    return dict(eventually(check, f"{node}'s NodeClaim Drifted", 90))


def test_a_pending_gpu_job_gets_a_spot_node_of_its_pool_which_goes_once_empty(
    twin: Kube, folder: Path
) -> None:
    """Kueue admits the job to a10g-spot's flavor; Karpenter launches the cheapest allowed type that fits (one
    GPU: g5.2xlarge) as Spot in one of the pool's zones, with the pool's labels and GPU taint; kwok makes it
    Ready and runs the pod, which carries do-not-disrupt (gpufleet's admission policy). Once the job is gone
    the empty node is consolidated (`WhenEmpty`)."""
    train = submit(twin, 600)
    try:
        pod = running_pod(twin, train)
        node = twin.get("node", pod["spec"]["nodeName"])
        labels = node["metadata"]["labels"]
        assert labels["karpenter.sh/nodepool"] == POOL and labels["gpufleet.io/pool"] == POOL
        assert labels["node.kubernetes.io/instance-type"] == "g5.2xlarge"
        assert labels["karpenter.sh/capacity-type"] == "spot"
        assert labels["topology.kubernetes.io/zone"] in ("us-east-1b", "us-east-1c")
        assert {"key": GPU, "value": "true", "effect": "NoSchedule"} in node["spec"].get("taints", [])
        assert condition(node, "Ready")["status"] == "True"  # type: ignore[index]
        assert pod["metadata"]["annotations"].get("karpenter.sh/do-not-disrupt") == "true"
        claim = claim_of(twin, node["metadata"]["name"])
        # Graceful disruption (emptiness, consolidation) is held off by the pod, and Karpenter says so.
        eventually(
            lambda: do_not_disrupt_blocks(twin, node["metadata"]["name"]),
            "a DisruptionBlocked naming the pod's do-not-disrupt annotation",
            150,
        )
    finally:
        twin.delete("job", train, NAMESPACE)
    eventually(
        lambda: claim["metadata"]["name"] not in {c["metadata"]["name"] for c in claims(twin)},
        "the empty node consolidated",
        120,
    )


def test_an_ami_change_leaves_a_busy_spot_training_node_to_finish_its_job(twin: Kube, folder: Path) -> None:
    """gpufleet's answer (docs/deploy.md upgrades, infra.rollout): a training pool whose Drifted budget is 0
    keeps busy nodes until their jobs end. Karpenter marks the node Drifted, refuses to disrupt it ("No allowed
    disruptions ... due to blocking budget"), the job runs to its end on it, and the node goes once empty."""
    bumped = variant(folder, "bumped", ami=NEW_AMI)
    assert rollout_facts(bumped)["pools"][POOL]["waitsForJobs"] is True
    train = submit(twin, 45)
    try:
        pod = running_pod(twin, train)
        node = pod["spec"]["nodeName"]
        deploy_pool(twin, bumped)
        since = when(drifted(twin, node)["lastTransitionTime"])

        # Karpenter's event on the NodePool (client-go's recorder passes 25 events per object, then one per five
        # minutes: this test runs early in the module, while the pool's object has had few).
        def budget_blocked() -> bool:
            said = events(twin, "NodePool", POOL, "DisruptionBlocked")
            return any(
                "Drifted due to blocking budget" in e["message"] and when(e["lastTimestamp"]) >= since
                for e in said
            )

        eventually(budget_blocked, "Karpenter holding the drifted node to the budget", 90)

        def finished() -> dict[str, Any] | None:
            now = [
                p for p in pods_of(twin, NAMESPACE, train) if p["metadata"]["uid"] == pod["metadata"]["uid"]
            ]
            return now[0] if now and now[0]["status"].get("phase") == "Succeeded" else None

        done = eventually(finished, "the job's pod to finish on the drifted node", 120)
        assert done["spec"]["nodeName"] == node
        assert len(pods_of(twin, NAMESPACE, train)) == 1  # never deleted and re-created
        name_ = claim_of(twin, node)["metadata"]["name"]  # still there when the job ended
    finally:
        twin.delete("job", train, NAMESPACE)
    eventually(lambda: name_ not in {c["metadata"]["name"] for c in claims(twin)}, "the empty node gone", 120)


def test_a_drift_budget_that_drains_busy_nodes_deletes_the_job_when_the_grace_period_ends(
    twin: Kube, folder: Path
) -> None:
    """With a Drifted budget above 0 and the pool's grace period (Spot: 90 s), Karpenter drains a busy
    drifted node despite do-not-disrupt and deletes the pod at the grace period's end less the pod's own
    (kubernetes-sigs/karpenter@v1.14.1 disruption/types.go:189-196). gpufleet refuses that budget on a training
    pool unless `drainBusyNodesOnDrift` says so, and then says drift does not wait for jobs."""
    budget = [{"nodes": "1", "reasons": ["Drifted"]}]
    with pytest.raises(ConfigError, match=r"budgets\[0\]"):
        variant(folder, "refused", budgets=budget)
    opted = variant(folder, "opted", budgets=budget, drainBusyNodesOnDrift=True)
    bumped = variant(folder, "opted-bumped", ami=NEW_AMI, budgets=budget, drainBusyNodesOnDrift=True)
    assert rollout_facts(bumped)["pools"][POOL]["waitsForJobs"] is False
    deploy_pool(twin, opted)
    train = submit(twin, 3600)
    try:
        pod = running_pod(twin, train)
        node = pod["spec"]["nodeName"]
        deploy_pool(twin, bumped)
        drifted(twin, node)
        expiring = eventually(
            lambda: events(twin, "Node", node, "TerminationGracePeriodExpiring"),
            "the drain with a deadline",
            90,
        )
        deadline = when(expiring[0]["message"].rsplit(" ", 1)[-1])
        started = when(events(twin, "Node", node, "DisruptionTerminating")[0]["lastTimestamp"])
        assert 85 <= deadline - started <= 95  # the pool's grace period, 90 s

        def gone() -> bool:
            return all(
                p["metadata"]["uid"] != pod["metadata"]["uid"] for p in pods_of(twin, NAMESPACE, train)
            )

        eventually(gone, "the running pod deleted", 150)
        deleted_at = time.time()
        # Not before the grace period less the pod's own 30 s: the job ran on through the drain.
        assert deleted_at >= deadline - POD_GRACE_S - 2, (deleted_at, deadline)
        assert deleted_at <= deadline + 15, (deleted_at, deadline)
        # The Job starts the run again, on a node of the new template.
        again = running_pod(twin, train)
        assert again["spec"]["nodeName"] != node
    finally:
        twin.delete("job", train, NAMESPACE)


def test_without_a_grace_period_a_drift_budget_waits_for_do_not_disrupt(twin: Kube, folder: Path) -> None:
    """`terminationGracePeriod: Never` (accepted with a Drifted budget): drift is then blocked by the job's
    do-not-disrupt pod, and the node drifts away only once the job has ended."""
    budget = [{"nodes": "1", "reasons": ["Drifted"]}]
    never = variant(folder, "never", budgets=budget, terminationGracePeriod="Never")
    bumped = variant(folder, "never-bumped", ami=NEW_AMI, budgets=budget, terminationGracePeriod="Never")
    assert rollout_facts(bumped)["pools"][POOL]["waitsForJobs"] is True
    deploy_pool(twin, never)
    # The job outlives Karpenter's two-minute dedupe of DisruptionBlocked per node (do_not_disrupt_blocks), so
    # the do-not-disrupt block is said even when the new node was first blocked for another reason.
    train = submit(twin, 150)
    try:
        pod = running_pod(twin, train)
        node = pod["spec"]["nodeName"]
        deploy_pool(twin, bumped)
        drifted(twin, node)
        eventually(
            lambda: do_not_disrupt_blocks(twin, node),
            "a DisruptionBlocked naming the pod's do-not-disrupt annotation",
            150,
        )
        # With a budget of one node and a grace period the node would be drained within a disruption pass
        # (10 s); here the job runs on to its end on the drifted node.
        done = eventually(
            lambda: [p for p in pods_of(twin, NAMESPACE, train) if p["status"].get("phase") == "Succeeded"],
            "the job to finish on the drifted node",
            240,
        )
        assert done[0]["metadata"]["uid"] == pod["metadata"]["uid"] and done[0]["spec"]["nodeName"] == node
    finally:
        twin.delete("job", train, NAMESPACE)
    eventually(
        lambda: not [c for c in claims(twin) if c["status"].get("nodeName") == node], "the node gone", 120
    )


def test_a_new_grace_period_drifts_the_pools_nodes(twin: Kube, folder: Path) -> None:
    """`terminationGracePeriod` is part of the NodePool template, so changing it (or adding it, as the first
    deploy of the grace periods did) drifts every NodeClaim of the pool, and `invoke preview` says the pool
    rolls (its template fact changes)."""
    longer = variant(folder, "longer", terminationGracePeriod="5m")
    assert (
        rollout_facts(longer)["pools"][POOL]["template"]
        != rollout_facts(variant(folder, "same"))["pools"][POOL]["template"]
    )
    train = submit(twin, 600)
    try:
        node = running_pod(twin, train)["spec"]["nodeName"]
        deploy_pool(twin, longer)
        assert drifted(twin, node)["reason"] == "NodePoolDrifted"
    finally:
        twin.delete("job", train, NAMESPACE)


def test_a_pool_never_consolidated_keeps_its_drifted_nodes_even_empty(twin: Kube, folder: Path) -> None:
    """What a capacity-block pool gets (`consolidateAfter: Never`, so its paid-for nodes stay) with the training
    default `Drifted: 0`: an AMI change never reaches its nodes, busy or empty. Karpenter says the pool's
    consolidation is disabled (so emptiness never removes the node) and drift is held to the budget; the
    emptied drifted node goes the moment a Drifted budget allows it, so the budget is what keeps it (played
    here on the Spot pool with the same two settings)."""
    never = variant(folder, "kept", consolidateAfter="Never")
    bumped = variant(folder, "kept-bumped", ami=NEW_AMI, consolidateAfter="Never")
    released = variant(
        folder,
        "released",
        ami=NEW_AMI,
        consolidateAfter="Never",
        budgets=[{"nodes": "1", "reasons": ["Drifted"]}],
        drainBusyNodesOnDrift=True,
    )
    rolls = {r.pool: r for r in plan_rollout(rollout_facts(never), rollout_facts(bumped)).rolls}
    assert "no node replaced, busy or empty" in rolls[POOL].how
    deploy_pool(twin, never)
    train = submit(twin, 20)
    try:
        pod = running_pod(twin, train)
        node = pod["spec"]["nodeName"]
        deploy_pool(twin, bumped)
        drifted(twin, node)
        done = eventually(
            lambda: [p for p in pods_of(twin, NAMESPACE, train) if p["status"].get("phase") == "Succeeded"],
            "the job to finish",
            120,
        )
        assert done[0]["spec"]["nodeName"] == node
        disabled = eventually(
            lambda: events(twin, "Node", node, "Unconsolidatable"), "Karpenter's word on consolidation", 60
        )
        assert any("has consolidation disabled" in e["message"] for e in disabled), disabled
        assert claim_of(twin, node)["metadata"].get("deletionTimestamp") is None
        deploy_pool(twin, released)
        gone = eventually(
            lambda: events(twin, "Node", node, "DisruptionTerminating"), "the empty node drifted away", 90
        )
        assert "Drifted" in gone[0]["message"], gone
    finally:
        twin.delete("job", train, NAMESPACE)
