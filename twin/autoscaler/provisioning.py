"""ProvisioningRequests as cluster-autoscaler 1.35.2 answers them: which to try, and the conditions it writes.

Kueue's provisioning admission check creates one request of class `best-effort-atomic-scale-up` per Workload
(kueue v0.19.2 pkg/controller/admissionchecks/provisioning) and admits when it is `Provisioned=True`.
cluster-autoscaler, per loop, takes the first request it may try (processors/provreq/injector.go
`GetPodsFromNextRequest`, `IsAvailableForProvisioning`): never one that `Failed` or is already `Provisioned`;
one `Provisioned=False` again only after its back-off. It marks it `Accepted`, and answers it. The answer and
the back-off are the autoscaler's rules the dynamic simulator plays too (:mod:`scheduler.provisioning`, which
cites them); here they become conditions. A provisioned request keeps its capacity booked for 10 minutes, then gets `BookingExpired=True`,
`CapacityReservationTimeExpired` (processors/provreq/processor.go:41,97-108). Reasons and messages:
provisioningrequest/conditions/conditions.go.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from scheduler.provisioning import ATOMIC, RESERVATION_S, Answer

ACCEPTED = ("Accepted", "Accepted", "ProvisioningRequest is accepted by ClusterAutoscaler")
FOUND = ("Provisioned", Answer.FOUND.value, "Capacity is found in the cluster")
PROVISIONED = ("Provisioned", Answer.PROVISIONED.value, "Capacity is found in the cluster")
NOT_FOUND = ("Provisioned", Answer.NOT_FOUND.value, "Capacity is not found, CA will try to find it later.")
BOOKING_EXPIRED = ("BookingExpired", "CapacityReservationTimeExpired", "Capacity reservation time is expired")
CONDITION = {Answer.FOUND: (FOUND, "True"), Answer.PROVISIONED: (PROVISIONED, "True"),
             Answer.NOT_FOUND: (NOT_FOUND, "False")}  # fmt: skip


def _find(pr: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    return next((c for c in pr.get("status", {}).get("conditions", []) if c["type"] == kind), None)


def is_true(pr: Mapping[str, Any], kind: str) -> bool:
    found = _find(pr, kind)
    return found is not None and found["status"] == "True"


def since(pr: Mapping[str, Any], kind: str, now: datetime) -> float:
    """Seconds since the condition last changed (0 when it is absent)."""
    found = _find(pr, kind)
    if found is None:
        return 0.0
    changed = datetime.strptime(found["lastTransitionTime"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return (now - changed).total_seconds()


def may_try(pr: Mapping[str, Any], now: datetime, backoff_s: float) -> bool:
    """Not failed, not provisioned, and any earlier `Provisioned=False` older than the back-off."""
    if (
        pr["spec"].get("provisioningClassName") != ATOMIC
        or is_true(pr, "Failed")
        or is_true(pr, "Provisioned")
    ):
        return False
    return _find(pr, "Provisioned") is None or since(pr, "Provisioned", now) > backoff_s


def booking_over(pr: Mapping[str, Any], now: datetime, scale: float) -> bool:
    return (
        pr["spec"].get("provisioningClassName") == ATOMIC
        and is_true(pr, "Provisioned")
        and not is_true(pr, "BookingExpired")
        and not is_true(pr, "Failed")
        and since(pr, "Provisioned", now) > RESERVATION_S * scale
    )


def with_condition(
    conditions: Sequence[Mapping[str, Any]],
    kind_reason_message: tuple[str, str, str],
    status: str,
    now: datetime,
    generation: int,
) -> list[dict[str, Any]]:
    """The conditions with one added or replaced in place (conditions.go `AddOrUpdateCondition`)."""
    kind, reason, message = kind_reason_message
    new = {"type": kind, "status": status, "reason": reason, "message": message,
           "lastTransitionTime": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "observedGeneration": generation}  # fmt: skip
    out = [dict(c) if c["type"] != kind else new for c in conditions]
    return out if any(c["type"] == kind for c in conditions) else [*out, new]
