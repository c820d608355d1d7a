"""Scheduler compiler speed: the prod example (compile + validate against the real schemas) and a synthetic
200-team x 20-pool policy (compile only). Targets: < 2 s and < 5 s. Prints numbers; asserts nothing.

    .venv/bin/python benchmarks/compile_bench.py
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infra.versions import KUEUE_VERSION  # noqa: E402
from scheduler import compile  # noqa: E402
from scheduler.labels import GPU_TAINT, POOL_LABEL  # noqa: E402
from scheduler.model import PoolView, SchedulingPolicy, TeamPolicy  # noqa: E402
from scheduler.references import reference_problems  # noqa: E402
from scheduler.validation import validate_objects  # noqa: E402
from tests.scheduler.examples import PROD, PROD_POOLS  # noqa: E402

SHARED = Path(os.environ.get("GPUFLEET_SHARED", ROOT.parent / "shared"))


def synthetic(teams: int = 200, pools: int = 20) -> tuple[SchedulingPolicy, tuple[PoolView, ...]]:
    """Pools of 100 nodes x 8 GPUs (every 4th time-sliced, every 5th MIG); each team holds 4 GPUs on 3 pools."""
    views = []
    for i in range(pools):
        name = f"pool-{i:02d}"
        sharing = "timeSlicing" if i % 4 == 1 else "mig" if i % 5 == 2 else "exclusive"
        views.append(
            PoolView(
                name=name, gpu_model="H100", gpus_per_node=8, max_nodes=100, labels={POOL_LABEL: name},
                taints=(dict(GPU_TAINT),), sharing=sharing,  # type: ignore[arg-type]
                time_slicing_replicas=4 if sharing == "timeSlicing" else None,
                mig_profile="1g.10gb" if sharing == "mig" else None, cpus_per_node=192, memory_gib_per_node=2048,
                node_group=f"eks-{name}-.*",
            )
        )  # fmt: skip
    members = tuple(
        TeamPolicy(
            name=f"team-{t:03d}", namespace=f"ns-{t:03d}", quotas={f"pool-{(t + k) % pools:02d}": 4 for k in range(3)},
            borrowing_limit=8, groups=(f"group-{t:03d}",), weight=1.0 + t % 3,
        )
        for t in range(teams)
    )  # fmt: skip
    return SchedulingPolicy(teams=members, platform="aws", kueue_version=KUEUE_VERSION), tuple(views)


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """(first run, median of the following runs) in seconds."""
    runs = []
    for _ in range(repeat + 1):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return runs[0], statistics.median(runs[1:])


def main() -> None:
    crds = SHARED / "crds"

    def prod() -> None:
        objects = compile(PROD, PROD_POOLS)
        problems = validate_objects(objects, crds, PROD.kubernetes_version) + reference_problems(
            objects, PROD, PROD_POOLS
        )
        assert not problems, problems

    first, warm = timed(prod, 5)
    print(f"prod example: compile + validate ({len(compile(PROD, PROD_POOLS))} objects)")
    print(f"  first run (loads schemas) {first:.3f} s, warm median {warm:.3f} s   target < 2 s")
    policy, pools = synthetic()
    first, warm = timed(lambda: compile(policy, pools), 3)
    print(
        f"synthetic {len(policy.teams)} teams x {len(pools)} pools: compile ({len(compile(policy, pools))} objects)"
    )
    print(f"  first run {first:.3f} s, median {warm:.3f} s   target < 5 s")


if __name__ == "__main__":
    main()
