"""CEL over a pod (or a pod template): what its containers ask for and tolerate. Used by every team rule.

Quantities are read with the Kubernetes CEL quantity library (`quantity()`, kubernetes.io "Common Expression
Language in Kubernetes", Kubernetes quantity library), so `0`, `0k` and `000` are all zero and `1e3` is a
thousand, however the user wrote them (the API server keeps a quantity's own spelling unless it is zero).
A zero GPU quantity is no GPU request: `nvidia.com/gpu: 0` neither lets a pod tolerate the GPU taint nor sends
CPU work to a GPU queue, except where the API server's ExtendedResourceToleration plugin runs (EKS): it
gives a pod that names a GPU resource at any amount the GPU taint's toleration, so there a zero is refused.
"""

from __future__ import annotations

from scheduler.labels import GPU_TAINT_KEY, SHARED_GPU_RESOURCE

GPU_PREFIX = "nvidia.com/"
VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
SIDECAR = "(has(c.restartPolicy) && c.restartPolicy == 'Always')"  # a restartable init container


def containers(var: str, check: str) -> str:
    """`check` (over `c`) holds for every container, init container and ephemeral container of the pod `var`."""
    parts = [f"{var}.spec.containers.all(c, {check})"]
    for field in ("initContainers", "ephemeralContainers"):
        parts.append(f"(!has({var}.spec.{field}) || {var}.spec.{field}.all(c, {check}))")
    return " && ".join(parts)


def positive(amount: str) -> str:
    """A quantity (as the object holds it: a string, or an integer in a custom resource's template) above zero."""
    return f"quantity(string({amount})).isGreaterThan(quantity('0'))"


def no_gpu_request(var: str) -> str:
    """No container asks (requests or limits) a positive amount of an `nvidia.com/` resource, and the pod names
    no ResourceClaim: the only devices gpufleet's DRA classes offer are GPU shares (scheduler.dra), so a claim
    is GPU work, routed, guarded and packed like a GPU request."""
    resources = " && ".join(
        f"(!has(c.resources.{kind}) || c.resources.{kind}.all(r, !r.startsWith('{GPU_PREFIX}') "
        f"|| !({positive(f'c.resources.{kind}[r]')})))"
        for kind in ("requests", "limits")
    )
    claims = f"(!has({var}.spec.resourceClaims) || size({var}.spec.resourceClaims) == 0)"
    return f"{claims} && " + containers(var, f"!has(c.resources) || ({resources})")


def no_zero_gpu(var: str) -> str:
    """No container names the GPU taint's resource (`nvidia.com/gpu`) at zero, in requests or limits (the API
    server copies a limit to an unset request before admission plugins run). Other `nvidia.com/` resources get
    tolerations of taints gpufleet never sets."""
    key = f"'{GPU_TAINT_KEY}'"
    resources = " && ".join(
        f"(!has(c.resources.{kind}) || !({key} in c.resources.{kind}) || {positive(f'c.resources.{kind}[{key}]')})"
        for kind in ("requests", "limits")
    )
    return containers(var, f"!has(c.resources) || ({resources})")


def zero_gpu_message(what: str) -> str:
    """Why a zero GPU quantity is refused where the API server adds the toleration (no_zero_gpu)."""
    return (
        f"{what} names {GPU_TAINT_KEY} at 0: this cluster's API server (ExtendedResourceToleration) gives such a "
        f"pod the {GPU_TAINT_KEY} toleration, and CPU work may not tolerate the GPU taint; leave the resource out"
    )


def amount(resource: str) -> str:
    """Container `c`'s request of `resource` as a float: its limit where it sets no request (the API server
    copies limits to unset requests of a pod, kubernetes.io "Resource Management for Pods and Containers"; job
    templates are not defaulted), zero where it sets neither."""
    key = f"'{resource}'"
    request = f"quantity(string(c.resources.requests[{key}])).asApproximateFloat()"
    limit = f"quantity(string(c.resources.limits[{key}])).asApproximateFloat()"
    return (
        f"(has(c.resources) && has(c.resources.requests) && {key} in c.resources.requests ? {request} : "
        f"has(c.resources) && has(c.resources.limits) && {key} in c.resources.limits ? {limit} : 0.0)"
    )


def pod_request(var: str, resource: str) -> str:
    """What the pod `var` requests of `resource`, as the scheduler and Kueue count it: the pod-level request if
    set, else the larger of its containers plus restartable init containers (sidecars) and its largest other
    init container (kubernetes.io "Init Containers", resource sharing within containers)."""
    each = amount(resource)
    init = f"{var}.spec.initContainers"
    sidecars = f"(has({init}) ? {init}.filter(c, {SIDECAR}).map(c, {each}) : []) + [0.0]"
    others = f"(has({init}) ? {init}.filter(c, !{SIDECAR}).map(c, {each}) : [])"
    running = f"{var}.spec.containers.map(c, {each}).sum() + ({sidecars}).sum()"
    pod_level = f"{var}.spec.resources.requests['{resource}']"
    return (
        f"(has({var}.spec.resources) && has({var}.spec.resources.requests) && '{resource}' in "
        f"{var}.spec.resources.requests ? quantity(string({pod_level})).asApproximateFloat() : "
        f"([{running}] + {others}).max())"
    )


def no_visible_devices(var: str) -> str:
    """No container names `NVIDIA_VISIBLE_DEVICES` in `env` (what `envFrom` or the image sets, admission cannot
    see: docs/scheduling.md, threat model)."""
    return containers(var, f"!has(c.env) || c.env.all(e, e.name != '{VISIBLE_DEVICES}')")


def at_most_one_shared(var: str) -> str:
    """Time-sliced GPUs: the device plugin refuses more than one replica per container
    (failRequestsGreaterThanOne, scheduler.sharing), but only on the node, after Kueue admitted the job."""
    return containers(
        var,
        " && ".join(
            f"(!has(c.resources) || !has(c.resources.{kind}) || !('{SHARED_GPU_RESOURCE}' in c.resources.{kind}) "
            f"|| !quantity(string(c.resources.{kind}['{SHARED_GPU_RESOURCE}'])).isGreaterThan(quantity('1')))"
            for kind in ("requests", "limits")
        ),
    )


def gated(var: str, gate: str) -> str:
    return f"(has({var}.spec.schedulingGates) && {var}.spec.schedulingGates.exists(g, g.name == '{gate}'))"


def tolerates_gpu_taint(var: str) -> str:
    """A toleration that matches the GPU taint: its key (any operator), or an empty key with `Exists`."""
    key = (
        f"((has(t.key) && t.key == '{GPU_TAINT_KEY}') "
        "|| ((!has(t.key) || t.key == '') && has(t.operator) && t.operator == 'Exists'))"
    )
    effect = "(!has(t.effect) || t.effect == '' || t.effect == 'NoSchedule')"
    return f"(has({var}.spec.tolerations) && {var}.spec.tolerations.exists(t, {key} && {effect}))"
