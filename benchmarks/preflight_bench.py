"""Time `run_preflight` for the example-prod stack against moto's HTTP server on loopback (target: < 5 s).

Measures what a user waits for: boto3 session and clients, the offerings, quota, SSM and capacity-reservation
calls over HTTP, and rendering the table. The first run includes boto3's one-off model loading ("cold");
the following runs are "warm". Run: `python benchmarks/preflight_bench.py [--runs N]`.
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402

from infra.preflight import print_findings, run_preflight  # noqa: E402
from infra.stackfile import load_stack  # noqa: E402
from tests.preflight.fakeaws import CURRENT, FakeAws, fake_aws_server  # noqa: E402

TARGET_S = 5.0
# The deployer's address is stated, as on a runner with a known egress: no call to the address echo service.
os.environ.setdefault("GPUFLEET_DEPLOYER_ADDRESS", "203.0.113.7")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs after the cold one")
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto's per-request access log
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_EC2_METADATA_DISABLED="true"
    )
    spec = load_stack(ROOT / "Pulumi.example-prod.yaml")
    with fake_aws_server() as url:
        os.environ["AWS_ENDPOINT_URL"] = url
        fake = FakeAws(url)
        CURRENT.append(fake)
        fake.seed_clean(spec)
        times = []
        for _ in range(args.runs + 1):
            start = time.perf_counter()
            findings = run_preflight(spec)
            print_findings(findings, Console(file=io.StringIO(), width=160), spec.stack)
            times.append(time.perf_counter() - start)
        assert not [f for f in findings if f.is_error], "seeded stack must pass"
    cold, warm = times[0], times[1:]
    print(f"preflight example-prod against moto ({len(findings)} findings, {args.runs} warm runs)")
    print(f"  cold   {cold:.3f} s")
    print(f"  warm   median {statistics.median(warm):.3f} s, max {max(warm):.3f} s")
    print(f"  target < {TARGET_S:.1f} s: {'met' if max(times) < TARGET_S else 'MISSED'}")


if __name__ == "__main__":
    main()
