"""What a change of a deployed stack rolls (`infra.rollout`), and `invoke preview --deployed` saying so: each
kind of change on the example stacks, against the same stack as deployed before it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from infra.errors import ConfigError
from infra.rollout import (
    NODE_GROUP,
    NODEPOOL,
    disruption_problem,
    plan_rollout,
    rollout_facts,
    rollout_lines,
    running_by_pool,
)
from infra.spec import ClusterSpec
from infra.stackfile import parse_config
from tests.preflight.helpers import invoke, stack_doc, write_stack

Config = dict[str, Any]


def spec_of(name: str, change: Any = None) -> ClusterSpec:
    config = copy.deepcopy(stack_doc(name)["config"])
    if change:
        change(config)
    return parse_config(config, name)


def rolls(before: ClusterSpec, after: ClusterSpec) -> dict[str, Any]:
    return {r.pool: r for r in plan_rollout(rollout_facts(before), rollout_facts(after)).rolls}


def minor(version: str) -> Any:
    return lambda c: c["gpufleet:cluster"].update(kubernetesVersion=version)


def test_a_minor_bump_rolls_every_node_group_after_the_control_plane() -> None:
    before, after = spec_of("example-prod"), spec_of("example-prod", minor("1.36"))
    rollout = plan_rollout(rollout_facts(before), rollout_facts(after))
    assert rollout.steps[0] == "control plane 1.35 -> 1.36"
    assert rollout.steps[1] == "node groups and NodePools (below), after the control plane"
    assert rollout.steps[2].startswith("by hand, right after the deploy: vpc-cni, kube-proxy and CoreDNS")
    by_pool = {r.pool: r for r in rollout.rolls}
    assert set(by_pool) == {"system", *(p.name for p in after.node_pools)}
    for pool in after.node_pools:
        roll = by_pool[pool.name]
        assert roll.kind == NODE_GROUP and roll.disrupts_running and "Kubernetes 1.35 -> 1.36" in roll.reasons
    # AL2023's release names the Kubernetes patch; Bottlerocket's OS release is one for every minor.
    assert "AMI release 1.35.8-20260930 -> 1.36.4-20260930" in by_pool["h100-train"].reasons
    assert by_pool["l40s-infer"].reasons == ("Kubernetes 1.35 -> 1.36",)
    assert not by_pool["system"].disrupts_running


@pytest.mark.parametrize(
    ("deployed", "wanted", "words"),
    [("1.34", "1.36", "deploy 1.35 first"), ("1.36", "1.35", "cannot downgrade")],
)
def test_a_skipped_or_backward_minor_is_refused_in_one_line(deployed: str, wanted: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        plan_rollout(
            rollout_facts(spec_of("example-prod", minor(deployed))),
            rollout_facts(spec_of("example-prod", minor(wanted))),
        )
    (problem,) = info.value.problems
    assert problem.startswith("gpufleet:cluster.kubernetesVersion: ") and words in problem


def test_an_unchanged_stack_rolls_nothing() -> None:
    spec = spec_of("example-karpenter")
    rollout = plan_rollout(rollout_facts(spec), rollout_facts(spec))
    assert rollout.rolls == () and rollout_lines(rollout) == ["no node group or NodePool rolls"]


def test_an_ami_bump_drifts_busy_training_nodes_only_once_empty() -> None:
    release = "1.36.4-20261023"
    before = spec_of("example-karpenter")
    after = spec_of(
        "example-karpenter", lambda c: c.update({"gpufleet:versions": {"al2023NvidiaAmiRelease": release}})
    )
    by_pool = rolls(before, after)
    for training in ("h100-train", "a10g-spot"):
        assert by_pool[training].kind == NODEPOOL and not by_pool[training].disrupts_running
    assert "busy nodes kept until their jobs end, empty ones replaced" in by_pool["a10g-spot"].how
    # The capacity block is never consolidated and has no Drifted budget: Karpenter replaces none of its nodes.
    assert "no node replaced, busy or empty" in by_pool["h100-train"].how
    assert by_pool["l40s-infer"].disrupts_running and "one node at a time" in by_pool["l40s-infer"].how
    assert by_pool["a10g-shared"].kind == NODE_GROUP and by_pool["a10g-shared"].disrupts_running


def test_opting_into_drift_of_busy_nodes_shows_as_disruption() -> None:
    def opt_in(c: Config) -> None:
        pool = next(p for p in c["gpufleet:nodePools"] if p["name"] == "a10g-spot")
        pool["karpenter"].update(drainBusyNodesOnDrift=True)

    def bump(c: Config) -> None:
        opt_in(c)
        c["gpufleet:versions"] = {"al2023NvidiaAmiRelease": "1.36.4-20261023"}

    before, after = spec_of("example-karpenter", opt_in), spec_of("example-karpenter", bump)
    spot = rolls(before, after)["a10g-spot"]
    assert spot.disrupts_running and "running pods deleted when the grace period ends" in spot.how


def tagged(tag_nodes: bool) -> Any:
    return lambda c: c["gpufleet:cluster"].update(
        tagNodes=tag_nodes, tags={**c["gpufleet:cluster"]["tags"], "team": "x"}
    )


def test_a_tag_edit_rolls_no_node_group() -> None:
    """The cluster's tags stay out of the launch templates by default: editing them makes no template version."""
    assert rolls(spec_of("example-prod"), spec_of("example-prod", tagged(False))) == {}


def test_with_tag_nodes_a_tag_edit_rolls_every_launch_template() -> None:
    before = spec_of("example-prod", lambda c: c["gpufleet:cluster"].update(tagNodes=True))
    by_pool = rolls(before, spec_of("example-prod", tagged(True)))
    assert set(by_pool) == {"system", *(p.name for p in before.node_pools)}
    assert all(r.reasons == ("launch template content",) for r in by_pool.values()), by_pool


def test_chart_bumps_are_stated_with_what_they_restart() -> None:
    before = spec_of("metal")
    after = spec_of(
        "metal",
        lambda c: c.update(
            {
                "gpufleet:versions": {
                    "gpuOperatorChart": "v26.8.0",
                    "kueueChart": "0.20.0",
                    "kueueChartOverride": True,
                }
            }
        ),
    )
    rollout = plan_rollout(rollout_facts(before), rollout_facts(after))
    assert rollout.rolls == ()  # an existing cluster's hosts are not rolled by gpufleet
    gpu, kueue = rollout.notes
    assert gpu.startswith("GPU operator v26.7.0 -> v26.8.0") and "running pods keep running" in gpu
    assert kueue.startswith("Kueue 0.19.2 -> 0.20.0") and "admitted workloads keep running" in kueue


def test_invoke_preview_of_a_minor_bump_lists_what_would_roll(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-cluster"))
    doc = stack_doc("example-prod")
    doc["config"]["gpufleet:cluster"]["kubernetesVersion"] = "1.36"
    bumped = write_stack(tmp_path, "example-prod", doc)
    done = invoke("preview", "--stack", str(bumped), "--deployed", "example-prod")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "step 1: control plane 1.35 -> 1.36"
    for pool in ("system", "h100-train", "l40s-infer", "a10g-batch", "h100-mig"):
        assert any(line.startswith(f"rolls: node group {pool} (Kubernetes 1.35 -> 1.36") for line in lines), (
            pool
        )
    assert "  disrupts running: every workload admitted to h100-train (cluster not read)" in lines
    assert (
        lines[-1]
        == "to let running jobs finish first: invoke drain --pools h100-train,l40s-infer,a10g-batch,h100-mig, then deploy"
    )


def test_invoke_preview_refuses_a_skipped_minor_with_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-cluster"))
    doc = stack_doc("example-prod")
    doc["config"]["gpufleet:cluster"]["kubernetesVersion"] = "1.34"
    deployed = write_stack(tmp_path, "deployed", doc)
    bumped = copy.deepcopy(doc)
    bumped["config"]["gpufleet:cluster"]["kubernetesVersion"] = "1.36"
    done = invoke(
        "preview", "--stack", str(write_stack(tmp_path, "bumped", bumped)), "--deployed", str(deployed)
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "error: gpufleet:cluster.kubernetesVersion: 1.34 -> 1.36 skips a minor; EKS upgrades one minor at a time: "
        "deploy 1.35 first, then 1.36"
    ]


def test_a_bare_metal_driver_bump_says_how_it_is_applied() -> None:
    before = spec_of("metal")
    after = spec_of("metal", lambda c: c.update({"gpufleet:versions": {"nvidiaDriverVersion": "580.105.08"}}))
    (note,) = plan_rollout(rollout_facts(before), rollout_facts(after)).notes
    assert note.startswith(
        f"NVIDIA driver {before.versions.nvidia_driver_version} -> 580.105.08: `invoke metal --reboot`"
    )


def _admitted(namespace: str, name: str, flavor: str, finished: bool = False) -> dict[str, Any]:
    """A Workload as Kueue v0.19.2 writes its status (the shape tests/twin/test_upgrade.py reads live)."""
    conditions = [{"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True"}]
    if finished:
        conditions.append({"type": "Finished", "status": "True"})
    assignment = {"name": "main", "flavors": {"nvidia.com/gpu": flavor, "cpu": flavor}}
    return {
        "metadata": {"namespace": namespace, "name": name},
        "status": {"conditions": conditions, "admission": {"podSetAssignments": [assignment]}},
    }


def test_the_deploy_gate_refuses_to_evict_running_work_until_drained() -> None:
    before, after = (
        rollout_facts(spec_of("example-prod")),
        rollout_facts(spec_of("example-prod", minor("1.36"))),
    )
    unknown = disruption_problem(plan_rollout(before, after))
    assert unknown is not None and "could not be read" in unknown and "--roll-running" in unknown
    running = running_by_pool(
        [
            _admitted("team-llm", "job-a", "h100-train"),
            _admitted("team-llm", "job-b", "h100-train", finished=True),
        ]
    )
    busy = disruption_problem(plan_rollout(before, after, running))
    assert busy is not None and "would evict running work: team-llm/job-a;" in busy and "job-b" not in busy
    assert "invoke drain --pools h100-train,l40s-infer,a10g-batch,h100-mig" in busy
    assert disruption_problem(plan_rollout(before, after, {})) is None  # drained: nothing runs there


def test_the_deploy_gate_lets_karpenter_keep_busy_training_nodes() -> None:
    """A Karpenter training pool drifts only empty nodes, so a job running there does not stop an AMI bump."""
    release = {"gpufleet:versions": {"al2023NvidiaAmiRelease": "1.36.4-20261023"}}
    before = rollout_facts(spec_of("example-karpenter"))
    after = rollout_facts(spec_of("example-karpenter", lambda c: c.update(release)))
    running = running_by_pool([_admitted("team-llm", "job-a", "h100-train")])
    assert disruption_problem(plan_rollout(before, after, running)) is None
    serving = running_by_pool([_admitted("team-inference", "job-s", "l40s-infer")])
    assert "team-inference/job-s" in (disruption_problem(plan_rollout(before, after, serving)) or "")
