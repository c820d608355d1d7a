"""The most GPU room any Ready node of a pool has: a bound that tells placement, without looking at a node, that
a pod shape fits nowhere in the pool.

Under load most placement attempts find no room, and most of those are pods whose GPUs no node of the pool has
free: no node has as many fully free GPUs as the pod asks, or no GPU has the share it asks free. Counting the
pool's Ready nodes by their fully free GPUs and by the largest free share of one of their GPUs answers that for
the whole pool from the nodes changed since the last question, instead of testing each changed node per shape.
"""

from __future__ import annotations

import numpy as np

from scheduler.fgd.model import MILLI


class PoolRoom:
    """One pool's Ready nodes counted by their fully free GPUs (``whole[c]``: nodes with ``c`` of them) and by
    the largest free milli-GPU of one of their GPUs (``part[m]``: nodes whose largest is ``m``), with each
    node's own pair, kept up to date from the pool's changed nodes."""

    __slots__ = ("_most_part", "_node", "members", "nodes", "part", "seen", "whole")

    def __init__(self, nodes: np.ndarray, members: frozenset[int], free_gpu: np.ndarray, seen: int) -> None:
        """``nodes``: the pool's Ready nodes (as an array and as ``members``); ``free_gpu``: the cluster's free
        milli-GPU per GPU; ``seen``: how far into the pool's changed nodes this holds."""
        self.nodes, self.members, self.seen = nodes, members, seen
        rows = free_gpu[nodes]
        full = (rows == MILLI).sum(axis=1).tolist()
        most = rows.max(axis=1).tolist()
        self.whole = [0] * (free_gpu.shape[1] + 1)
        self.part: dict[int, int] = {}
        self._node: dict[int, tuple[int, int]] = {}
        for node, c, m in zip(nodes.tolist(), full, most, strict=True):
            self._node[node] = (c, m)
            self.whole[c] += 1
            self.part[m] = self.part.get(m, 0) + 1
        self._most_part: int | None = None

    def update(self, node: int, row: list[int]) -> None:
        """Node ``node`` (a member) has ``row`` free milli-GPU per GPU now."""
        c, m = row.count(MILLI), max(row, default=0)
        was_c, was_m = self._node[node]
        if (c, m) == (was_c, was_m):
            return
        self._node[node] = (c, m)
        whole, part = self.whole, self.part
        whole[was_c] -= 1
        whole[c] += 1
        left = part[was_m] - 1
        if left:
            part[was_m] = left
        else:
            del part[was_m]
            if was_m == self._most_part:
                self._most_part = None
        part[m] = part.get(m, 0) + 1
        if self._most_part is not None and m > self._most_part:
            self._most_part = m

    def may_fit(self, gpus: int, milli: int) -> bool:
        """False when no member has ``gpus`` GPUs with ``milli`` free each (a pod's GPU test in ``feasible``);
        True when one may (its CPU, memory and GPU model are not looked at)."""
        if gpus <= 0:
            return True
        if milli >= MILLI:
            whole = self.whole
            return any(whole[c] for c in range(gpus, len(whole)))
        if gpus == 1:
            if self._most_part is None:
                self._most_part = max(self.part, default=-1)
            return self._most_part >= milli
        return True  # several shares of several GPUs: not bounded here
