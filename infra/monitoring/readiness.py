"""Whether the metrics stack a deploy installed runs: Prometheus and Alertmanager Ready, or why not.

`helm install --wait` (the release's `atomic`) waits only for what the chart itself renders; Prometheus and
Alertmanager are StatefulSets the Prometheus operator creates afterwards from the chart's custom resources, so
the release succeeds while their pods cannot start (a volume claim no StorageClass binds, a receiver's Secret
that does not exist). `invoke deploy` therefore waits for their pods after `pulumi up`, for a bounded time,
and fails with what holds each one back.

The pods are found by the labels the operator gives every pod of a resource (prometheus-operator v0.93.0
pkg/prometheus/server/operator.go:1696-1703 `makeSelectorLabels`, pkg/alertmanager/operator.go:797-802):
`app.kubernetes.io/name` (`prometheus` or `alertmanager`) and `app.kubernetes.io/instance` (the resource's
name). The chart names the resources `<fullname>-prometheus` and `<fullname>-alertmanager`
(kube-prometheus-stack 88.5.3 templates/_helpers.tpl, `kube-prometheus-stack.prometheus.crname`,
`kube-prometheus-stack.alertmanager.crname`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from infra.errors import CheckFailed
from infra.monitoring.stack import chart_fullname
from infra.spec import ClusterSpec

READY_TIMEOUT_S = 600  # a new EBS volume is created and attached, and both images pulled, well within it
POLL_S = 5.0
STORAGE_FIX = (
    "give the cluster a default StorageClass, or name one in gpufleet:cluster.monitoring.storage.storageClass"
)


class PodReader(Protocol):
    def pods(self, namespace: str, label_selector: str) -> Iterable[dict[str, Any]]: ...
    def claims(self, namespace: str) -> Iterable[dict[str, Any]]: ...


@dataclass(frozen=True)
class Watched:
    component: str  # prometheus | alertmanager, the operator's app.kubernetes.io/name
    resource: str  # the custom resource's name

    @property
    def selector(self) -> str:
        return f"app.kubernetes.io/name={self.component},app.kubernetes.io/instance={self.resource}"


def watched(spec: ClusterSpec) -> list[Watched]:
    """The operator-made pods a `prometheus: install` deploy must see Ready; none otherwise."""
    if spec.cluster.monitoring.prometheus != "install":
        return []
    full = chart_fullname(spec)
    return [Watched(c, f"{full}-{c}") for c in ("prometheus", "alertmanager")]


def _claim_problem(pod: str, claim_name: str, claims: dict[str, dict[str, Any]]) -> str | None:
    claim = claims.get(claim_name)
    if claim is None:
        return f"{pod}: its PersistentVolumeClaim {claim_name} does not exist yet"
    phase = claim.get("status", {}).get("phase", "Pending")
    if phase == "Bound":
        return None
    cls = claim.get("spec", {}).get("storageClassName")
    which = f"StorageClass {cls}" if cls else "no StorageClass (the cluster has no default)"
    return f"{pod}: PersistentVolumeClaim {claim_name} is {phase}, {which}; {STORAGE_FIX}"


def pod_problem(pod: dict[str, Any], claims: dict[str, dict[str, Any]]) -> str | None:
    """None when the pod is Ready, else the first thing that holds it back: an unbound claim, scheduling, a
    waiting container, or its phase."""
    name = pod["metadata"]["name"]
    status = pod.get("status") or {}
    conditions = {c["type"]: c for c in status.get("conditions") or []}
    if conditions.get("Ready", {}).get("status") == "True":
        return None
    for volume in pod.get("spec", {}).get("volumes") or []:
        ref = volume.get("persistentVolumeClaim")
        if ref and (problem := _claim_problem(name, ref["claimName"], claims)):
            return problem
    scheduled = conditions.get("PodScheduled", {})
    if scheduled.get("status") == "False":
        return (
            f"{name}: not scheduled: {scheduled.get('message') or scheduled.get('reason', 'no reason given')}"
        )
    for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        if waiting := (cs.get("state") or {}).get("waiting"):
            detail = f": {waiting['message']}" if waiting.get("message") else ""
            return f"{name}: container {cs['name']} {waiting.get('reason', 'waiting')}{detail}"
    return f"{name}: {status.get('phase', 'Pending')}, not Ready"


def problems(spec: ClusterSpec, reader: PodReader) -> list[str]:
    """What keeps each watched pod from Ready; empty when all are."""
    namespace = spec.cluster.monitoring.namespace
    targets = watched(spec)
    if not targets:
        return []
    claims = {c["metadata"]["name"]: c for c in reader.claims(namespace)}
    found: list[str] = []
    for target in targets:
        pods = list(reader.pods(namespace, target.selector))
        if not pods:
            found.append(
                f"{target.component}: no pod in {namespace} yet (the Prometheus operator creates it from the "
                f"{target.resource} resource)"
            )
        found += [p for pod in pods if (p := pod_problem(pod, claims))]
    return found


def _read(spec: ClusterSpec, reader: PodReader) -> list[str]:
    """problems(), with a failed read as the problem (the API server may be briefly unreachable)."""
    try:
        return problems(spec, reader)
    except Exception as exc:  # any client or connection failure: report it, keep waiting
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return [f"could not read the cluster: {reason}"]


def wait_ready(
    spec: ClusterSpec,
    reader: PodReader,
    timeout_s: float = READY_TIMEOUT_S,
    poll_s: float = POLL_S,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], None] = time.sleep,
) -> None:
    """Return once every watched pod is Ready; CheckFailed (exit 1) naming what is not when `timeout_s` ends."""
    deadline = clock() + timeout_s
    while found := _read(spec, reader):
        if clock() >= deadline:
            raise CheckFailed(
                f"the monitoring stack of {spec.stack!r} is not Ready {timeout_s:.0f} s after the deploy: "
                + "; ".join(found)
                + f". The resources are in place: fix this, then `invoke deploy --stack {spec.stack}` again "
                "(it changes nothing and waits again)"
            )
        pause(poll_s)
