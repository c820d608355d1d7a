"""waitForPodsReady told to a team member, as the real Kueue 0.19.2 does it on the twin.

The metal stack with a short `waitForPodsReadyTimeout` (the stack's knob; its Kueue configuration takes it as
`waitForPodsReady.timeout`, with the project's requeuing strategy: backoff from 60 s, doubling). A job whose pod
no node can take (a node selector no node matches) is admitted on quota, its pod stays Pending, and Kueue evicts
it when the timeout passes, gives its quota back and holds it in a backoff before requeueing it: the answers a
member reads during that backoff are built from the conditions and `requeueState` Kueue writes, so this checks
them against Kueue itself rather than against objects written in its shape.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

import pytest
import yaml

from scheduler.explain.order import condition as kueue_condition
from tests.conftest import ROOT
from tests.support import eventually
from tests.twin.conftest import stack_variant, start_twin
from tests.twin.kube import Kube, job, name
from tests.twin.test_team_console import BINPACK, GPU, PRIORITY, plugin, reserved, workload_of

TIMEOUT_S = 20
BACKOFF_BASE_S = 60  # requeuingStrategy.backoffBaseSeconds (scheduler/kueue_config.py)


@pytest.fixture(scope="module")
def ready_twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    doc = yaml.safe_load((ROOT / "Pulumi.metal.yaml").read_text())
    scheduling = {**doc["config"].get("gpufleet:scheduling", {}), "waitForPodsReadyTimeout": f"{TIMEOUT_S}s"}
    twin = start_twin(tmp_path_factory, stack_variant(tmp_path_factory, "metal", "podsready",
                                                       scheduling=scheduling))  # fmt: skip
    try:
        yield Kube.of(twin)
    finally:
        twin.stop()


def condition(workload: dict[str, Any], kind: str) -> Mapping[str, Any]:
    """The workload's condition of `kind`, empty when Kueue has not written it."""
    return kueue_condition(workload, kind) or {}


def _at(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def test_a_job_whose_pods_never_start_is_evicted_and_told_when_it_is_requeued(
    ready_twin: Kube, capsys: pytest.CaptureFixture[str]
) -> None:
    """Admitted, its one pod Pending on a selector no node matches; once the timeout passes Kueue evicts it
    (Evicted, reason PodsReadyTimeout), releases its quota and sets Requeued=False with the time of its requeue
    (`requeueState`, the backoff's first step); the member's `why` and `queue` say so, with that time, and
    what to do."""
    member = ready_twin.as_member(("vision-team",))
    stuck = name("stuck")
    pod = {**BINPACK, "nodeSelector": {"example.com/rack": "nowhere"}}
    body = job(stuck, "vision", {"cpu": "8", "memory": "64Gi", GPU: 8}, pod=pod,
               labels={PRIORITY: "default"})  # fmt: skip
    assert member.create(body).ok
    try:
        eventually(lambda: reserved(ready_twin, "vision", stuck), "the job admitted on quota", 90)
        admitted = _at(condition(workload_of(ready_twin, "vision", stuck) or {}, "QuotaReserved")
                       ["lastTransitionTime"])  # fmt: skip

        def evicted() -> dict[str, Any] | None:
            wl = workload_of(ready_twin, "vision", stuck) or {}
            backing_off = condition(wl, "Requeued").get("status") == "False"
            return wl if backing_off and wl.get("status", {}).get("requeueState") else None

        wl = eventually(evicted, "Kueue's eviction for pods not ready", TIMEOUT_S + 90)
        gone = condition(wl, "Evicted")
        assert (gone.get("status"), gone.get("reason")) == ("True", "PodsReadyTimeout"), wl["status"]
        assert condition(wl, "Requeued").get("reason") == "PodsReadyTimeout", wl["status"]
        assert condition(wl, "QuotaReserved").get("status") == "False", wl["status"]
        # the eviction comes once the timeout has passed since admission (a PodsReady check, not earlier)
        assert _at(gone["lastTransitionTime"]) - admitted >= TIMEOUT_S - 1, (admitted, gone)
        state = wl["status"]["requeueState"]
        assert int(state.get("count", 0)) == 1, state
        wait = _at(state["requeueAt"]) - _at(gone["lastTransitionTime"])
        assert BACKOFF_BASE_S - 2 <= wait <= 2 * BACKOFF_BASE_S, (wait, state)

        code, out, err = plugin(ready_twin, "vision-team", "-n", "vision", "why", stuck, capsys=capsys)
        assert code == 0, err
        assert "[PodsNotReadyInTime]" in out, out
        assert f"requeued at {state['requeueAt']}" in out and "evicted 1 time so far" in out, out
        assert "a node selector no node matches" in out, out
        code, out, err = plugin(
            ready_twin, "vision-team", "-n", "vision", "queue", "--no-events", capsys=capsys
        )
        assert code == 0, err
        (line,) = [line for line in out.splitlines() if f"/{stuck} " in line and "[" in line]
        assert "[PodsNotReadyInTime]" in line, out
        # Kueue's own quota view agrees: the evicted job holds none of vision's H100s
        status = json.loads(ready_twin.ok("get", "clusterqueues.kueue.x-k8s.io", "vision", "-o", "json"))
        used = [r.get("total", 0) for f in status.get("status", {}).get("flavorsUsage", []) if f["name"] == "h100"
                for r in f["resources"] if r["name"] == GPU]  # fmt: skip
        assert used in ([0], ["0"], []), status["status"]
    finally:
        ready_twin.delete("job", stuck, "vision")
        eventually(lambda: workload_of(ready_twin, "vision", stuck) is None, f"{stuck} gone", 90)
