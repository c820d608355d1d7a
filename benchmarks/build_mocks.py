"""Time `build(spec)` under Pulumi's mocks for a stack (default: the production example); target < 5 s.

Measures from the call to `build` until every resource has been registered with the mocks, i.e. the
program's own cost in a `pulumi preview`/`up` minus the engine and providers. The first run also pays for
importing the provider SDK modules the program uses (pulumi_aws loads them lazily); the median of the runs
after it is the steady cost. Prints one line per run.

    python benchmarks/build_mocks.py [--stack example-prod] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pulumi  # noqa: E402

from infra import build  # noqa: E402
from infra.stackfile import load_stack  # noqa: E402
from tests.infra.conftest import Mocks, after_registration  # noqa: E402


def one_run(stack: str) -> tuple[float, int]:
    spec = load_stack(ROOT / f"Pulumi.{stack}.yaml")
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    mocks = Mocks()
    pulumi.runtime.set_mocks(mocks, project="gpufleet", stack=stack, preview=False)
    result: dict[str, float] = {}

    @pulumi.runtime.test
    def program() -> pulumi.Output[float]:
        start = time.perf_counter()
        outputs = build(spec)
        done = after_registration(lambda: result.setdefault("s", time.perf_counter() - start))
        return pulumi.Output.all(done, outputs).apply(lambda v: v[0])

    program()
    loop.close()
    return result["s"], len(mocks.resources)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", default="example-prod")
    parser.add_argument("--runs", type=int, default=4)
    args = parser.parse_args()
    times = []
    for i in range(args.runs):
        seconds, resources = one_run(args.stack)
        times.append(seconds)
        note = " (cold: includes SDK imports)" if i == 0 else ""
        print(f"run {i + 1}: build({args.stack}) under mocks: {seconds:.2f} s, {resources} resources{note}")
    warm = times[1:] or times
    print(f"median of warm runs: {statistics.median(warm):.2f} s (target < 5 s); cold run: {times[0]:.2f} s")


if __name__ == "__main__":
    main()
