"""The ProvisioningRequest admission check on the simulator's clock: the requests Kueue has open and the
autoscaler's answer to one of them, by :mod:`scheduler.provisioning`'s rules.

A job given quota on a pool its ClusterQueue's check covers (`Queue.checked`) holds that quota and waits: its
request joins :class:`Requests` in creation order, and the autoscaler's loop (every `Settings.scan_interval_s`)
takes the first one not in back-off and answers it when the wrapper orchestrator's turn is the requests'
(:func:`scheduler.provisioning.turn`). The answer (:func:`scheduler.provisioning.answer`) is computed on the
pool as the autoscaler's snapshot holds it: the free room of its Ready nodes and the whole of the nodes coming
up, less what the pool's other pending pods take first (:func:`first_fit`); a scale-up of all the request's pods
at once takes absent nodes of the pool, while it may grow (a capacity block only inside its window).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from scheduler.fgd.model import MILLI
from scheduler.provisioning import retry_after

Room = tuple[list[int], list[int]]  # ([free CPU milli, free memory MiB], free milli-GPU per GPU) of one node
PodAsk = tuple[int, int, int, int]  # CPU milli, memory MiB, GPUs, milli-GPU per GPU


def _take(room: Room, pod: PodAsk) -> bool:
    (cpu_mem, gpus), (cpu, mem, count, milli) = room, pod
    if cpu_mem[0] < cpu or cpu_mem[1] < mem:
        return False
    want = milli if count else 0
    chosen = [g for g, free in enumerate(gpus) if free >= want and (milli < MILLI or free == MILLI)][:count]
    if len(chosen) < count:
        return False
    cpu_mem[0] -= cpu
    cpu_mem[1] -= mem
    for g in chosen:
        gpus[g] -= want
    return True


def first_fit(pods: Iterable[PodAsk], rooms: list[Room]) -> list[PodAsk]:
    """Put each pod on the first room it fits (taking what it asks from that room); return the pods left.

    A pod of whole GPUs takes that many wholly free GPUs, a share takes part of one GPU; CPU and memory too."""
    return [pod for pod in pods if not any(_take(room, pod) for room in rooms)]


@dataclass
class _Request:
    job: int
    not_found: int = 0  # `CapacityIsNotFound` answers in a row
    retry_at: float = float("-inf")  # tried only after this (the back-off since its last answer)


class Requests:
    """Kueue's open ProvisioningRequests, oldest first, with each one's back-off, and the wrapper orchestrator's
    mode (whether its next loop serves request pods)."""

    def __init__(self) -> None:
        self.open: dict[int, _Request] = {}
        self.request_mode = False

    def create(self, job: int) -> None:
        self.open[job] = _Request(job)

    def drop(self, job: int) -> None:
        """The job was provisioned, or lost its quota (Kueue deletes the request)."""
        self.open.pop(job, None)

    def next(self, t: float) -> int | None:
        """The job of the first request the autoscaler may try at ``t`` (injector.go `GetPodsFromNextRequest`)."""
        return next((r.job for r in self.open.values() if r.retry_at < t), None)

    def not_found(self, job: int, t: float) -> None:
        request = self.open[job]
        request.not_found += 1
        request.retry_at = t + retry_after(request.not_found)
