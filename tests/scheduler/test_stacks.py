"""The example stacks end to end: spec -> infra's adapter -> compile -> upstream schemas and references."""

from __future__ import annotations

from pathlib import Path

from infra.scheduling import scheduler_inputs
from infra.spec import ClusterSpec
from scheduler import compile, pool_node_labels
from scheduler.references import reference_problems
from scheduler.validation import validate_objects


def test_example_stack_compiles_to_valid_consistent_objects(
    example_spec: ClusterSpec, shared_dir: Path
) -> None:
    policy, pools = scheduler_inputs(example_spec)
    objects = compile(policy, pools)
    assert validate_objects(objects, shared_dir / "crds", policy.kubernetes_version) == []
    assert reference_problems(objects, policy, pools) == []
    queues_per_team = 1 + any(p.topology_levels for p in pools)  # and a topology queue
    assert (
        len([o for o in objects if o["kind"] == "ClusterQueue"]) == len(example_spec.teams) * queues_per_team
    )
    for pool in pools:  # the node groups carry exactly the labels the flavors and device plugin select on
        assert pool_node_labels(pool).items() <= pool.labels.items()
