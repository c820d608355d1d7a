"""The extender as a sidecar of the secondary scheduler: a second container in each `gpu-binpack` pod.

Pure data (no Pulumi); the stack applies it with the secondary scheduler when
``placement.strategy: FragmentationAware``. The scheduler profile that calls the extender is
:func:`scheduler.placement.with_extender`, pointed at ``http://127.0.0.1:8888``: the extender listens on the
pod's loopback only. Why a sidecar and not a Deployment behind a Service:

- **One view per pod's placement.** kube-scheduler calls filter and prioritize for a pod in turn, and the
  extender counts a pod on the node it is about to be bound to at once, before its watch sees the Binding;
  behind a Service each call may reach another replica, whose view never counted the pods in flight. Only the scheduler replica holding the leader lease schedules, and
  it reaches exactly its own sidecar; the standby's sidecar keeps a warm view for a failover.
- **Reachable only by the scheduler.** The extender answers filter and prioritize on 127.0.0.1 inside the pod,
  so no other pod can feed it pods to count; no Service. With monitoring on, a second listener on the pod
  network serves ``GET /metrics`` and nothing else (container port ``metrics``), which the stack's PodMonitor
  scrapes (infra.monitoring.extender): it reads the view, never changes it.
- **The scheduler's own rights.** It runs as the pod's ServiceAccount, `gpu-binpack`, whose
  `system:kube-scheduler` role already lists and watches nodes and pods, and ResourceSlices and ResourceClaims
  where DRA is on (kubernetes v1.36.4 plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go), which the
  extender reads for a `dra-shares` pool (the extender creates nothing; the scheduler binds).

Its probes are exec probes (`python -m scheduler.extender --probe`): the kubelet's HTTP probes would dial the
pod IP, where nothing listens.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from scheduler.labels import restricted_security_context

if TYPE_CHECKING:
    from scheduler.model import PoolView

NAME = "gpufleet-extender"
CONTAINER = "extender"
PORT = 8888
URL = f"http://127.0.0.1:{PORT}"  # the sidecar, on the pod's loopback
METRICS_PORT = 8889  # GET /metrics only, on every interface of the pod (--metrics-port)
METRICS_PORT_NAME = "metrics"  # the container port a PodMonitor names


def image_problem(image: str) -> str | None:
    """Why ``image`` is not a pinned reference (a tag or digest, never latest); None when it is."""
    if ":" not in image.rsplit("/", 1)[-1] and "@" not in image:
        return f"extender image {image!r} must be pinned (tag or digest)"
    if image.endswith(":latest"):
        return "extender image must not be 'latest'"
    return None


def modelled_pools(pools: Sequence[PoolView]) -> list[str]:
    """The pools whose GPUs the extender models (whole and time-sliced): the ones whose GPU pods teach it its
    expected workload (``--pools``). MIG pods are CPU-only to it, and DRA-shared GPUs are no node resource:
    the extender learns their target from the shares' claims (``--dra-shares``)."""
    return [p.name for p in pools if p.sharing in ("exclusive", "timeSlicing")]


def extender_container(
    image: str,
    trace: str | None = None,
    pools: Sequence[str] | None = None,
    shadow: bool = False,
    dra_shares: bool = False,
    metrics: bool = False,
) -> dict[str, Any]:
    """The sidecar container; ``image`` is a pinned reference (a tag or digest, never latest); ``pools``: the
    pool labels whose GPU pods make its expected workload (None: every node with GPUs it models);
    ``dra_shares``: a pool shares its GPUs through DRA, whose slices and claims the extender reads;
    ``metrics``: a Prometheus scrapes it, so ``/metrics`` is also served on the pod network, at a named port."""
    problem = image_problem(image)
    if problem:
        raise ValueError(problem)
    args = ["--port", str(PORT), "--host", "127.0.0.1"]
    if trace:
        args += ["--trace", trace]
    if pools is not None:
        args += ["--pools", ",".join(pools)]
    if shadow:  # placement.shadow: score and count, the profile decides
        args.append("--shadow")
    if dra_shares:
        args.append("--dra-shares")
    if metrics:
        args += ["--metrics-port", str(METRICS_PORT)]

    def probe(path: str) -> dict[str, Any]:
        return {
            "exec": {"command": ["python", "-m", "scheduler.extender", "--probe", path, "--port", str(PORT)]}
        }

    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": image,
        "args": args,
        "livenessProbe": {**probe("/healthz"), "periodSeconds": 10, "timeoutSeconds": 5},
        "readinessProbe": {**probe("/readyz"), "periodSeconds": 5, "timeoutSeconds": 5},
        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        "securityContext": restricted_security_context(),
    }
    if metrics:
        container["ports"] = [{"name": METRICS_PORT_NAME, "containerPort": METRICS_PORT, "protocol": "TCP"}]
    return container


def fragmentation_aware(
    scheduler_objects: list[dict[str, Any]],
    managed_resources: list[str],
    image: str,
    pools: Sequence[str] | None = None,
    shadow: bool = False,
    dra_shares: bool = False,
    metrics: bool = False,
) -> list[dict[str, Any]]:
    """``placement.strategy: FragmentationAware``: the secondary scheduler's objects
    (:func:`scheduler.placement.secondary_scheduler`) with its configuration calling the extender
    (:func:`scheduler.placement.with_extender`) at its sidecar, which is added to the scheduler's pods.

    With ``dra_shares`` the extender manages no resource by name: kube-scheduler calls an extender with
    ``managedResources`` only for pods whose containers ask for one of them (kubernetes v1.36.4
    pkg/scheduler/extender.go ``IsInterested``), and a pod claiming GPU shares asks for none, so it is called
    for every pod: it filters no pod with neither a GPU resource nor a claim, and scores it by FGD as the
    simulator does.

    The EKS control plane accepts only a NodeResourcesFit scoring strategy, not extenders, so on every
    platform the extender is called by the secondary scheduler that team pods name.
    """
    import yaml

    from scheduler.placement import CONFIG_FILE, with_extender
    from scheduler.yamltext import dump_text

    out = copy.deepcopy(scheduler_objects)
    configs = [o for o in out if o.get("kind") == "ConfigMap" and CONFIG_FILE in o.get("data", {})]
    deployments = [o for o in out if o.get("kind") == "Deployment"]
    if len(configs) != 1 or len(deployments) != 1:
        raise ValueError("expected the secondary scheduler's one configuration ConfigMap and one Deployment")
    data = configs[0]["data"]
    config = yaml.safe_load(data[CONFIG_FILE])
    data[CONFIG_FILE] = dump_text(with_extender(config, URL, [] if dra_shares else managed_resources))
    deployments[0]["spec"]["template"]["spec"]["containers"].append(
        extender_container(image, pools=pools, shadow=shadow, dra_shares=dra_shares, metrics=metrics)
    )
    return out
