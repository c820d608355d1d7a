"""What Prometheus says about the GPU pods reclaim may act on, and whether those numbers can be trusted.

The idle signal is dcgm-exporter's `DCGM_FI_DEV_GPU_UTIL{namespace, pod}`, the series the `GpuAllocatedIdle`
alert reads, over a team's own window. It is only as true as the exporter's pod mapping
(`infra.monitoring.exporter`): a pod it cannot map to a process reads 0 however busy its GPU (per-process
values without a token or the host's PIDs), and a time-sliced GPU's other pods have no series at all (one pod
per GPU). So for every pod of a workload that holds a GPU (by the API server: running, with an `nvidia.com/`
request or limit) reclaim acts only when:
- the pod has a GPU series, and its last sample is fresh (at most `FRESH_SCRAPES` scrape intervals old);
- the dcgm-exporter target of the pod's node is up;
- none of its GPUs is degenerate: the GPU's own device-level series showed activity in the window while every
  pod holding it read exactly 0 (`metrics.degenerate_gpus`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from infra.monitoring import metrics as m
from infra.monitoring.metrics import seconds
from infra.monitoring.prometheus import Prometheus

FRESH_SCRAPES = 3  # a pod's last GPU sample older than this many scrape intervals is stale
GPU_RESOURCE_PREFIX = "nvidia.com/"  # whole GPUs, time-sliced replicas, MIG slices
# Per node, its exporter target's `up` (the monitor's relabelling gives every target the pod's `node`).
EXPORTER_UP = f'max by (node) ({m.UP}{{job="{m.DCGM_JOB}"}})'

PodKey = tuple[str, str]  # (namespace, pod)
Object = dict[str, Any]


def _selector(namespace: str) -> str:
    return f'{m.GPU_UTIL}{{namespace="{namespace}",pod!=""}}'


def idle_query(namespace: str, after: str) -> str:
    """Pods of the namespace whose every GPU stayed below the idle threshold for the whole window, and that
    already held a GPU when the window began (a pod younger than the window has too few samples to be called
    idle)."""
    sel = _selector(namespace)
    return (
        f"max by (namespace, pod) (max_over_time({sel}[{after}])) < {m.IDLE_UTIL_PERCENT}"
        f" and on (namespace, pod) count by (namespace, pod) ({sel} offset {after})"
    )


def seen_query(namespace: str) -> str:
    """The time of each pod's last GPU sample (Prometheus answers a series for its lookback after the last
    scrape, and ends it at once when the target or the series disappears)."""
    return f"max by (namespace, pod) (timestamp({_selector(namespace)}))"


def gpus_query(namespace: str, after: str) -> str:
    """The GPUs (UUIDs) each pod carried a series of in the window."""
    return f"max by (namespace, pod, UUID) (last_over_time({_selector(namespace)}[{after}]))"


@dataclass(frozen=True)
class Evidence:
    """What Prometheus says about the opted-in teams' GPU pods at one time."""

    idle: set[PodKey]  # every GPU below the threshold for the team's whole window (and held at its start)
    last_seen: dict[PodKey, float]  # the time of each pod's last GPU sample
    exporter_up: dict[str, float]  # node -> `up` of its dcgm-exporter target
    # pod -> its GPUs (UUID -> device %) busy in the window while every pod holding them read exactly 0
    degenerate: dict[PodKey, dict[str, float]]
    fresh_s: float  # a last sample older than this is stale

    @property
    def holding(self) -> set[PodKey]:
        return set(self.last_seen)


def gather(prom: Prometheus, windows: Mapping[str, str], at: float, scrape_interval: str) -> Evidence:
    """Read, at time `at`, what reclaim decides on for each namespace and its idle window."""
    idle: set[PodKey] = set()
    seen: dict[PodKey, float] = {}
    degenerate: dict[PodKey, dict[str, float]] = {}
    for namespace, after in windows.items():
        idle |= {(lb["namespace"], lb["pod"]) for lb, _ in prom.instant(idle_query(namespace, after), at)}
        seen |= {(lb["namespace"], lb["pod"]): t for lb, t in prom.instant(seen_query(namespace), at)}
        broken = {lb["UUID"]: v for lb, v in prom.instant(m.degenerate_gpus(after), at)}
        for lb, _ in prom.instant(gpus_query(namespace, after), at):
            if lb.get("UUID") in broken:
                degenerate.setdefault((lb["namespace"], lb["pod"]), {})[lb["UUID"]] = broken[lb["UUID"]]
    up = {lb.get("node", ""): v for lb, v in prom.instant(EXPORTER_UP, at)}
    return Evidence(idle, seen, up, degenerate, FRESH_SCRAPES * seconds(scrape_interval))


def holds_gpu(pod: Object) -> bool:
    """A running pod with an `nvidia.com/` request or limit: the kubelet has given it GPUs (or slices)."""
    if (pod.get("status") or {}).get("phase") != "Running":
        return False
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        if any(
            key.startswith(GPU_RESOURCE_PREFIX)
            for part in ("requests", "limits")
            for key in res.get(part) or {}
        ):
            return True
    return False


def trust_problems(namespace: str, pods: Iterable[Object], evidence: Evidence, at: float) -> list[str]:
    """Why the GPU numbers of these pods (each holding a GPU) cannot be acted on; empty when they can."""
    out: list[str] = []
    for pod in pods:
        name = str((pod.get("metadata") or {}).get("name", ""))
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        key = (namespace, name)
        if key not in evidence.last_seen:
            out.append(
                f"pod {name} holds a GPU but has no {m.GPU_UTIL} series (dcgm-exporter does not map it to the "
                "pod, e.g. another pod of its time-sliced GPU carries the GPU's series)"
            )
            continue
        age = at - evidence.last_seen[key]
        if age > evidence.fresh_s:
            out.append(f"pod {name}'s last GPU sample is {age:.0f}s old (more than {evidence.fresh_s:.0f}s)")
        if node and evidence.exporter_up.get(node) != 1:
            state = "down" if node in evidence.exporter_up else "not scraped"
            out.append(f"the dcgm-exporter target of node {node} is {state}")
        for gpu, busy in sorted(evidence.degenerate.get(key, {}).items()):
            out.append(
                f"GPU {gpu} of pod {name} was {busy:g}% busy while every pod holding it read exactly 0 "
                "(dcgm-exporter cannot map its processes to pods)"
            )
    return list(dict.fromkeys(out))
