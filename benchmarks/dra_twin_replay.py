"""The openb trace on GPU shares through DRA, replayed through the real scheduler: the path of
`benchmarks/dra_shares.py` (every GPU a DRA device of 8 shares, a fractional ask the fewest shares that cover
it, a whole GPU all of a device's shares) on a replay twin (`twin.replay`: Kubernetes 1.36, the driver's
ResourceSlices, a ResourceClaim per pod, the gpu-binpack profile and for FragmentationAware the extender with
`--dra-shares`), beside the in-process simulator on the same nodes, pods and seed under the allocator's
first-fit rule.

The simulator's MostAllocated runs with the weights the profile really has on claims: NodeResourcesFit counts
no claim, so only CPU and memory are scored (``gpu=0, shared=0``; infra.simulate.stack.stack_model). The
simulator's FGD is the extender's scoring with the trace as its target, which the twin's extender is given
(``--trace``, the extender's option for a known workload). Beside FragmentationAware runs the deployed extender's own verbs
in-process on the same claims (``FGD-Extender-DRA``, scheduler.sim.policies.extender_claims): shares, claims
for several whole GPUs and CPU-only pods all scored by it. ``--learned-target`` gives the extender no trace (as
a stack renders it): it learns its target from the claims and their pods' CPU, on the twin and in-process.

A replay twin places one pod at a time, so the whole openb cluster (1,213 nodes, some 10,000 pods a run) is out
of reach on a small machine (``--no-twin --nodes 1213`` runs it in-process only): ``--nodes N`` takes a seeded sample of the trace's GPU nodes (the protocol then
inflates the trace to 1.3x that sample's GPUs; pods naming a GPU model the sample lacks fail in both).
The devices' product names are the trace's model names and their memory nominal (no claim asks memory).

``--kueue`` sends every pod through the real Kueue first, as a team submits it (`twin.replay_kueue`: a
queue-name label, the stack's Kueue configuration with its `deviceClassMappings`, one ClusterQueue holding the
whole sample, claims made from templates) and reports what Kueue admitted and counted beside the shares the
allocator gave (``kueue_queue_usage``, ``kueue_counted_shares``, ``claimed_shares``), with per pod its admission
and bind times and counted shares in ``--json``'s ``kueue_records``.

The twin's nodes carry the seed's ranked names (`scheduler.sim.protocol.seed_order`), so the extender's
first-by-name among FGD's equal nodes is the simulator's first in rank. Each row names the first pod whose node
differs from the last side's (``first_parting``: the simulator's and the in-process extender's against the
twin's); ``--records`` keeps, per pod, the node and GPUs each side gave it and the devices the twin's
allocator gave its claim (``pod_records``), and ``--keep DIR`` the twin's folder with its processes' logs.

Usage: python benchmarks/dra_twin_replay.py [--workload default] [--nodes 60] [--seed 42] [--gpu-only]
[--learned-target] [--kueue] [--no-twin] [--records] [--keep DIR] [--json FILE]
(the traces from GPUFLEET_SHARED or ../shared; needs the twin's 1.36 toolchain). Measured in
docs/simulation.md ("GPU shares through DRA, through the real scheduler").
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.dra_shares import SHARES, in_shares  # noqa: E402
from scheduler.fgd.model import Cluster, Workload  # noqa: E402
from scheduler.sim import read_nodes, read_pods  # noqa: E402
from scheduler.sim.policies.extender_claims import ExtenderClaimsPolicy  # noqa: E402
from scheduler.sim.protocol import seed_order  # noqa: E402
from scheduler.sim.runner import Placement, run_placed  # noqa: E402

NOMINAL_MEMORY_MIB = 16384


def sample(cluster: Cluster, nodes: int, seed: int) -> Cluster:
    """``nodes`` of the cluster's, drawn without replacement with ``seed``, in their original order."""
    keep = np.sort(
        np.random.default_rng(seed).choice(cluster.size, size=min(nodes, cluster.size), replace=False)
    )
    return Cluster.build(
        [str(cluster.names[i]) for i in keep],
        [int(cluster.cpu_milli[i]) for i in keep],
        [int(cluster.memory_mib[i]) for i in keep],
        [int(cluster.num_gpu[i]) for i in keep],
        [str(cluster.gpu_model[i]) for i in keep],
    )


def replay_twin(
    cluster: Cluster,
    pods: Workload,
    profile: str,
    args: argparse.Namespace,
    units: dict[str, int],
    claims: frozenset[str],
    devices: dict[str, tuple[str, int]],
) -> tuple[dict[str, object], list[Placement], list[list[int]]]:
    """The replay through a twin's real scheduler: its figures, where each pod went and the devices its claim
    got. With ``--keep`` the twin's folder (its processes' logs) stays there, one folder a profile."""
    from twin.replay import ReplayTwin, twin_policy

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep) / profile if args.keep else Path(tmp)
        started = time.monotonic()
        target = None if args.learned_target else pods
        twin = ReplayTwin.start(
            seed_order(cluster, pods, args.seed)[1],  # its nodes named as the run ranks them
            units,
            profile,
            folder,
            target=target,
            claims=claims,
            devices=devices,
            kueue=args.kueue,
        )
        try:
            policy = twin_policy(profile, twin, claims, units)
            real, placed = run_placed(cluster, pods, policy, args.seed, share_rule="first-fit")
            seen = twin.kueue_summary() | {"kueue_gated": twin.gated} if args.kueue else {}
        finally:
            twin.stop()
        wall = time.monotonic() - started
    figures = {
        "pods": int(policy.placed_pods),
        "twin_unallocated": round(real.unallocated(100), 2),
        "twin_failed": int(real.failed),
        "pods_per_second": round(policy.placed_pods / policy.seconds, 1) if policy.seconds else 0.0,
        "claimed": policy.claimed,
        "devices_differ": policy.devices_differ,
        "wall_s": round(wall),
    }
    return figures | seen, placed, policy.pod_devices


def pod_records(
    sides: dict[str, list[Placement]], devices: list[list[int]] | None
) -> list[dict[str, object]]:
    """Per pod of the protocol's order, the node and GPUs each side gave it (None: failed) and, from the twin,
    the devices the real allocator gave its claim: the first pod whose node differs is where two replays part."""
    out = []
    for i, placed in enumerate(zip(*sides.values(), strict=True)):
        row: dict[str, object] = {"pod": i}
        for side, p in zip(sides, placed, strict=True):
            row[side] = None if p is None else [p[0], p[1]]
        if devices is not None and devices[i]:
            row["twin_devices"] = devices[i]
        out.append(row)
    return out


def first_parting(a: list[Placement], b: list[Placement]) -> int | None:
    """The first pod (its place in the protocol's order) whose node, or failure, differs between two replays."""
    for i, (got_a, got_b) in enumerate(zip(a, b, strict=True)):
        if (got_a is None) != (got_b is None) or (got_a and got_b and got_a[0] != got_b[0]):
            return i
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="default")
    parser.add_argument("--nodes", type=int, default=60)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--profiles", default="MostAllocated,FragmentationAware")
    parser.add_argument(
        "--gpu-only", action="store_true", help="leave the CPU-only pods out, as a stack's GPU taint does"
    )
    parser.add_argument(
        "--learned-target",
        action="store_true",
        help="give the extender no trace: it learns its target from the claims, as a stack renders it",
    )
    parser.add_argument(
        "--kueue", action="store_true", help="every pod through the real Kueue first, which counts its shares"
    )
    parser.add_argument(
        "--no-twin", action="store_true", help="the simulator and the in-process extender only (any --nodes)"
    )
    parser.add_argument("--json", default="")
    parser.add_argument("--records", action="store_true",
                        help="per pod, the node and GPUs each side gave it, in --json's rows")  # fmt: skip
    parser.add_argument("--keep", default="", help="keep the twin's folder (its logs) under this folder")
    args = parser.parse_args(argv)
    from benchmarks.fgd_reproduction import shared_dir

    traces = shared_dir() / "traces" / "alibaba-gpu-v2023"
    cluster = sample(read_nodes(str(traces / "openb_node_list_gpu_node.csv")), args.nodes, args.seed)
    pods = in_shares(read_pods(str(traces / f"openb_pod_list_{args.workload}.csv")))
    if args.gpu_only:
        pods = pods.take(np.flatnonzero(pods.num_gpu > 0))
    models = sorted({str(m) for m in cluster.gpu_model})
    units = dict.fromkeys(models, SHARES)
    claims = frozenset(models)
    devices = {m: (m, NOMINAL_MEMORY_MIB) for m in models}
    print(f"{cluster.size} nodes, {int(cluster.num_gpu.sum())} GPUs ({', '.join(models)}); seed {args.seed}")
    rows = []
    sims = {"MostAllocated": ("MostAllocated", {"gpu": 0, "shared": 0}), "FragmentationAware": ("FGD", None)}
    in_process = {"FragmentationAware": ExtenderClaimsPolicy}
    for profile in [p for p in args.profiles.split(",") if p]:
        policy_name, params = sims[profile]
        sim, sides = run_placed(cluster, pods, policy_name, args.seed, params=params, share_rule="first-fit")
        placements = {"sim": sides}
        extender = in_process.get(profile)
        ext = None
        if extender is not None:
            own = extender(SHARES, not args.learned_target)
            ext, placements["in_process"] = run_placed(cluster, pods, own, args.seed, share_rule="first-fit")
        row = {
            "profile": profile,
            "simulator_policy": policy_name,
            "sim_unallocated": round(sim.unallocated(100), 2),
            "extender_in_process_unallocated": round(ext.unallocated(100), 2) if ext else None,
            "sim_failed": int(sim.failed),
        }
        got = None
        if not args.no_twin:
            twin_row, placements["twin"], got = replay_twin(
                cluster, pods, profile, args, units, claims, devices
            )
            row |= twin_row
        *others, last = placements
        row["first_parting"] = {o: first_parting(placements[o], placements[last]) for o in others}
        if args.records:
            row["pod_records"] = pod_records(placements, got)
        rows.append(row)
        print(
            json.dumps({k: v for k, v in row.items() if k not in ("kueue_records", "pod_records")}),
            flush=True,
        )
    if args.json:
        setup = {"nodes": args.nodes, "seed": args.seed, "gpu_only": args.gpu_only,
                 "learned_target": args.learned_target, "kueue": args.kueue}  # fmt: skip
        Path(args.json).write_text(json.dumps({**setup, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
