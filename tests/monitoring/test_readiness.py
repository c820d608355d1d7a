"""The deploy's wait for Prometheus and Alertmanager, with pods as the API server reports them; the wait against
the twin's real controllers and scheduler is in tests/twin/test_monitoring_ready.py."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from infra.errors import CheckFailed
from infra.monitoring.readiness import pod_problem, wait_ready, watched
from infra.spec import ClusterSpec
from tests.conftest import load_example


def _prod() -> ClusterSpec:
    return load_example("example-prod")


def _pod(name: str, *conditions: dict[str, str], waiting: dict[str, str] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Pending", "conditions": list(conditions)}
    if waiting:
        status["containerStatuses"] = [{"name": "alertmanager", "state": {"waiting": waiting}}]
    return {"metadata": {"name": name}, "spec": {"volumes": []}, "status": status}


def test_the_operators_pods_are_found_by_the_chart_resource_names() -> None:
    """kube-prometheus-stack names its resources `<fullname>-prometheus|alertmanager`; the release
    `kube-prometheus-stack` is its own fullname (templates/_helpers.tpl at 88.5.3)."""
    assert [w.selector for w in watched(_prod())] == [
        "app.kubernetes.io/name=prometheus,app.kubernetes.io/instance=kube-prometheus-stack-prometheus",
        "app.kubernetes.io/name=alertmanager,app.kubernetes.io/instance=kube-prometheus-stack-alertmanager",
    ]
    assert watched(load_example("dev")) == []  # no Prometheus installed, nothing to wait for


def test_a_missing_secret_volume_is_named() -> None:
    """A receiver's Secret that does not exist keeps the container in ContainerCreating; the kubelet's message
    says which."""
    pod = _pod(
        "alertmanager-x-0",
        {"type": "PodScheduled", "status": "True"},
        waiting={"reason": "ContainerCreating", "message": 'secret "slack" not found'},
    )
    assert (
        pod_problem(pod, {})
        == 'alertmanager-x-0: container alertmanager ContainerCreating: secret "slack" not found'
    )
    ready = _pod("alertmanager-x-0", {"type": "Ready", "status": "True"})
    assert pod_problem(ready, {}) is None


class Stuck:
    """A cluster whose Prometheus is never scheduled; each read is counted."""

    def __init__(self) -> None:
        self.reads = 0

    def pods(self, namespace: str, label_selector: str) -> Iterable[dict[str, Any]]:
        self.reads += 1
        message = "0/3 nodes are available: 3 Insufficient memory."
        return [_pod("p-0", {"type": "PodScheduled", "status": "False", "message": message})]

    def claims(self, namespace: str) -> Iterable[dict[str, Any]]:
        return []


def test_the_wait_is_bounded_and_fails_with_the_reason() -> None:
    now = [0.0]
    cluster = Stuck()
    with pytest.raises(CheckFailed) as failed:
        wait_ready(_prod(), cluster, timeout_s=30, poll_s=10, clock=lambda: now[0],
                   pause=lambda s: now.__setitem__(0, now[0] + s))  # fmt: skip
    assert "not Ready 30 s after the deploy: p-0: not scheduled: 0/3 nodes are available" in str(failed.value)
    assert cluster.reads == 2 * 4  # two components, at 0, 10, 20 and 30 s
