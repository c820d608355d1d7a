"""CEL over a pod (or a pod template): what its containers ask for and tolerate. Used by every team rule."""

from __future__ import annotations

from scheduler.labels import GPU_TAINT_KEY


def containers(var: str, check: str) -> str:
    """`check` (over `c`) holds for every container, init container and ephemeral container of the pod `var`."""
    parts = [f"{var}.spec.containers.all(c, {check})"]
    for field in ("initContainers", "ephemeralContainers"):
        parts.append(f"(!has({var}.spec.{field}) || {var}.spec.{field}.all(c, {check}))")
    return " && ".join(parts)


def no_gpu_request(var: str) -> str:
    resources = " && ".join(
        f"(!has(c.resources.{kind}) || c.resources.{kind}.all(r, !r.startsWith('nvidia.com/')))"
        for kind in ("requests", "limits")
    )
    return containers(var, f"!has(c.resources) || ({resources})")


def tolerates_gpu_taint(var: str) -> str:
    """A toleration that matches the GPU taint: its key (any operator), or an empty key with `Exists`."""
    key = (
        f"((has(t.key) && t.key == '{GPU_TAINT_KEY}') "
        "|| ((!has(t.key) || t.key == '') && has(t.operator) && t.operator == 'Exists'))"
    )
    effect = "(!has(t.effect) || t.effect == '' || t.effect == 'NoSchedule')"
    return f"(has({var}.spec.tolerations) && {var}.spec.tolerations.exists(t, {key} && {effect}))"
