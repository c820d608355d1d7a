"""An answer to "why does it wait?": the reason's name (the Event reason written on the Workload) and its words.

Its own room so that every module that names a reason (the Kubernetes reasons, the nodes a workload waits for,
the Slurm answers) shares one vocabulary without importing one another.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Reason(enum.Enum):
    """What holds a workload; the value is the Event reason written on it."""

    FINISHED = "Finished"
    INACTIVE = "Deactivated"
    RUNNING = "Running"
    PROVISIONING = "WaitingForNodes"
    FRAGMENTATION = "Fragmentation"
    OVER_LIMIT = "OverTeamLimit"
    PRIORITY = "BehindHigherPriority"
    BORROWED = "ReclaimingFromBorrowers"
    QUOTA = "QuotaInUse"
    STARTING = "Starting"
    UNKNOWN = "Waiting"
    PODS_READY = "PodsNotReadyInTime"
    TOPOLOGY = "NoTopologyDomain"
    DEPENDENCY = "WaitingForDependency"  # Slurm: a job it depends on has not reached the state it waits for
    ESTIMATE = "EstimatedStart"  # not a reason it waits: the `eta` answer, recorded beside the reasons


@dataclass(frozen=True)
class Answer:
    reason: Reason
    says: str  # the reason, one sentence
    to_start: str  # what would let it start ("" once it runs)
