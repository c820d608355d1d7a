"""How cluster-autoscaler 1.35.2 answers a ProvisioningRequest of class best-effort-atomic-scale-up: pure rules,
shared by the twin's autoscaler stand-in (which writes them as conditions on the API server) and the dynamic
simulator (which plays them on its clock), so both wait, answer and retry alike.

Kueue's provisioning admission check (kueue v0.19.2 pkg/controller/admissionchecks/provisioning/controller.go,
`syncCheckStates`) creates one request per Workload once its quota is reserved, admits the Workload when the
request is `Provisioned=True`, and on `Provisioned=False` only copies the message: the check stays Pending and
the quota stays reserved. Retrying is the autoscaler's (paths under cluster-autoscaler/ at the tag):

- **When.** The autoscaler runs a loop every `--scan-interval`, 10 s (config/const.go:56). Each loop the
  injector takes the first request it may try (processors/provreq/injector.go `GetPodsFromNextRequest`); the
  wrapper orchestrator then serves either the request's pods or the regular unschedulable pods, alternating
  loops while both wait (provisioningrequest/orchestrator/wrapper_orchestrator.go `ScaleUp`): :func:`turn`.
- **The answer** (provisioningrequest/besteffortatomic/provisioning_class.go `Provision`, "Pick 1
  ProvisioningRequest"): every pod fits the cluster as it is → `CapacityIsFound`; a scale-up of all of them at
  once succeeds → `CapacityIsProvisioned` (set when the scale-up is requested: the pods then wait for the nodes
  to boot); otherwise `CapacityIsNotFound`, nothing added: :func:`answer`.
- **Retry.** A request last answered `Provisioned=False` is tried again once its back-off has passed since
  that answer: `--provisioning-request-initial-backoff-time` (1m) the first time, doubled at each retry up to
  `--provisioning-request-max-backoff-time` (10m) (injector.go `IsAvailableForProvisioning`;
  config/flags/flags.go:219-220): :func:`retry_after`.
- **Booking.** A provisioned request keeps its capacity booked for 10 minutes (processors/provreq/processor.go:41).
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

ATOMIC = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
SCAN_INTERVAL_S = 10.0
INITIAL_BACKOFF_S = 60.0
MAX_BACKOFF_S = 600.0
RESERVATION_S = 600.0


class Answer(Enum):
    """The `Provisioned` condition's reason the autoscaler writes (provisioningrequest/conditions/conditions.go)."""

    FOUND = "CapacityIsFound"  # Provisioned=True: the pods fit the nodes there are
    PROVISIONED = "CapacityIsProvisioned"  # Provisioned=True: nodes for every pod are being added
    NOT_FOUND = "CapacityIsNotFound"  # Provisioned=False: tried again after the back-off

    @property
    def provisioned(self) -> bool:
        return self is not Answer.NOT_FOUND


def answer(fits_now: bool, scale_up: Callable[[], bool]) -> Answer:
    """The atomic answer: ``fits_now`` when every pod of the request fits the cluster as it is (nodes coming up
    included, as the autoscaler's snapshot holds them); else ``scale_up()`` tries to add nodes for all of them
    at once, all or nothing, and says whether it did (it is called only then)."""
    if fits_now:
        return Answer.FOUND
    return Answer.PROVISIONED if scale_up() else Answer.NOT_FOUND


def retry_after(not_found: int, scale: float = 1.0) -> float:
    """Seconds after its ``not_found``-th answer of `CapacityIsNotFound` in a row before a request is tried
    again: 1m, 2m, 4m, 8m, then 10m (``scale`` shortens every duration, for a twin run on a faster clock)."""
    if not_found < 1:
        return 0.0
    return min(INITIAL_BACKOFF_S * 2.0 ** min(not_found - 1, 16), MAX_BACKOFF_S) * scale


def turn(request_mode: bool, has_request: bool, has_regular: bool) -> tuple[bool, bool]:
    """One loop of the wrapper orchestrator: (serve the request's pods this loop, the mode of the next loop).

    With only request pods the loop serves them, with only regular pods it serves those, with both it serves
    whichever ``request_mode`` says; the mode flips after every loop that had pods to serve."""
    if not has_request and not has_regular:
        return False, request_mode
    mode = request_mode
    if not has_request:
        mode = False
    elif not has_regular:
        mode = True
    return mode, not mode
