"""The replay of GPU shares through DRA with the real Kueue 0.19.2 in the loop (`ReplayTwin.start(kueue=True)`):
the pool, pods and seed of test_replay_dra_shares, each pod labelled for a LocalQueue, gated by Kueue's webhook,
admitted from a ClusterQueue that holds the whole pool under the stack's `deviceClassMappings`, and only then
bound by the real scheduler, its claim made from a ResourceClaimTemplate.

Kueue must count what the allocator gave: its ClusterQueue's usage of the share resource, and the sum of what it
charged each admitted pod, equal the shares the bound pods' claims consumed; and every bound pod must have been
admitted no later than it was bound (both stamped by the API server, to the second), behind the admission gate.
Holding nothing back, Kueue must not move a pod: each still goes to one of the simulator's best-scored nodes on
the state so far, or finds no node exactly where the simulator finds none (test_replay_dra_shares.Checked).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.sim import run_one
from tests.twin.conftest import toolchain
from tests.twin.test_replay_dra_shares import CLAIMS, CLUSTER, PER_GPU, POOL, SEED, WORKLOAD, Checked
from twin.replay import ReplayTwin


@pytest.mark.parametrize("profile", ["MostAllocated", "FragmentationAware"])
def test_kueue_admits_every_pod_before_it_is_bound_and_counts_the_claimed_shares(
    profile: str, tmp_path: Path
) -> None:
    toolchain("1.36")
    twin = ReplayTwin.start(
        CLUSTER, {POOL: PER_GPU}, profile, tmp_path / profile, target=WORKLOAD, claims=CLAIMS,
        devices={POOL: ("NVIDIA L40S", 49152)}, kueue=True,
    )  # fmt: skip
    try:
        policy = Checked(twin, profile)
        result = run_one(CLUSTER, WORKLOAD, policy, SEED, share_rule="first-fit")
        seen = twin.kueue_summary()
        gated = twin.gated
    finally:
        twin.stop()
    bound = policy.claimed
    # a few dozen pods, some finding no room (the protocol asks 1.3x the GPUs): both kinds went through Kueue
    assert policy.placed_pods >= 24 and 0 < bound < policy.placed_pods, (policy.placed_pods, bound)
    assert gated == policy.placed_pods, "a pod reached the scheduler without Kueue's admission gate"
    assert seen["kueue_admitted"] == bound, seen
    assert seen["admitted_after_bound"] == 0, [
        r for r in seen["kueue_records"] if not (r["admitted"] and r["bound"] and r["admitted"] <= r["bound"])
    ]
    assert seen["claimed_shares"] > 0
    assert seen["kueue_queue_usage"] == seen["kueue_counted_shares"] == seen["claimed_shares"], seen
    assert policy.devices_differ == 0
    names = {i: str(n).split("-", 1)[1] for i, n in enumerate(policy.ctx.cluster.names)}
    off = [(i, names.get(node), [names[b] for b in best]) for i, (node, best) in enumerate(policy.steps)
           if (node < 0) != (not best) or (node >= 0 and node not in best)]  # fmt: skip
    assert not off, f"pods placed off the simulator's best nodes with Kueue in the loop: {off}"
    print(f"{profile} through Kueue: {bound} of {policy.placed_pods} pods bound, {seen['claimed_shares']} shares "
          f"claimed and counted; {result.unallocated(100):.2f} % unallocated")  # fmt: skip
