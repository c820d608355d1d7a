"""The two-pool fair-sharing exchange (tests/sim/test_dynamic_fair_sharing.py, `exchange_world`) as a stack file:
pool `a`, 16 time-sliced replicas (two L40S hosts of 4 GPUs, 2 replicas each), and pool `m`, 6 whole H100s (one
host), both the quota of team `lender`; `t1` (weight 2) and `t2` (weight 1) have no quota and borrow both.
Shared by the twin's test, which runs it on Kueue, and the simulate CLI's, which reports the exchange."""

from __future__ import annotations

import copy
from typing import Any

DEFAULT = ("LessThanOrEqualToFinalShare", "LessThanInitialShare")  # the stack's default, example-prod's
STRICT = ("LessThanInitialShare",)


def exchange_stack(metal: dict[str, Any], strategies: tuple[str, ...]) -> dict[str, Any]:
    """The exchange's stack file from the metal stack's: its two pools and three teams, fair sharing on with
    the given `fairSharingPreemptionStrategies`."""
    doc = copy.deepcopy(metal)
    config = doc["config"]
    config["gpufleet:scheduling"] = {"fairSharingPreemptionStrategies": list(strategies)}
    config["gpufleet:nodePools"] = [
        {"name": "a", "hosts": ["gpu-a-01", "gpu-a-02"], "gpuModel": "L40S", "gpusPerNode": 4, "cpusPerNode": 64,
         "memoryGiBPerNode": 512, "sharing": {"timeSlicing": {"replicas": 2}}},
        {"name": "m", "hosts": ["gpu-m-01"], "gpuModel": "H100", "gpusPerNode": 6, "cpusPerNode": 96,
         "memoryGiBPerNode": 1024},
    ]  # fmt: skip
    config["gpufleet:teams"] = [
        {"name": "lender", "quotas": {"a": 8, "m": 6}, "groups": ["lender-team"]},
        {"name": "t1", "quotas": {}, "weight": 2, "groups": ["t1-team"]},
        {"name": "t2", "quotas": {}, "groups": ["t2-team"]},
    ]
    return doc
