"""Team-namespace admission policies: their real CEL, evaluated with cel-python against allowed and denied
objects, and the namespaces they match (the platform's never).

CEL semantics and the variables (`object`, `oldObject`, `request`, `namespaceObject`) are those of the
Kubernetes docs "Validating Admission Policy" and "Mutating Admission Policy"; a policy with
`failurePolicy: Fail` rejects the request when an expression cannot be evaluated, which the helper mirrors.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import celpy
import pytest

from scheduler import admission, compile
from scheduler.admission import DEFAULT_PRIORITY, DEFAULT_SCHEDULER, PODS, SERVICES
from scheduler.labels import SECONDARY_SCHEDULER_NAME
from tests.scheduler.examples import METAL, METAL_POOLS, PROD, PROD_POOLS
from tests.scheduler.helpers import find, of_kind, selector_matches

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}


def evaluate(expression: str, **activation: Any) -> bool | None:
    """True/False, or None when the expression cannot be evaluated (the API server then fails the request)."""
    env = celpy.Environment()
    try:
        result = env.program(env.compile(expression)).evaluate(
            {k: celpy.json_to_cel(v) for k, v in activation.items()}
        )
    except celpy.CELEvalError:
        return None
    return bool(result) if isinstance(result, celpy.celtypes.BoolType) else None


def admitted(policy: dict[str, Any], obj: dict[str, Any], old: dict[str, Any] | None = None) -> bool:
    operation = "UPDATE" if old is not None else "CREATE"
    return all(
        evaluate(v["expression"], object=obj, oldObject=old, request={"operation": operation}) is True
        for v in policy["spec"]["validations"]
    )


def pod(*, tolerations: list[dict[str, str]] | None = None, gates: list[str] = (), **container: Any) -> dict[str, Any]:  # type: ignore[assignment]  # fmt: skip
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox", **container}]}
    if tolerations is not None:
        spec["tolerations"] = tolerations
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    if "priorityClassName" in spec["containers"][0]:
        spec["priorityClassName"] = spec["containers"][0].pop("priorityClassName")
    spec["schedulerName"] = "default-scheduler"  # the API server's default, set before admission
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


GPU = {"resources": {"limits": {"nvidia.com/gpu": "1"}}}


@pytest.fixture(scope="module")
def pods_policy() -> dict[str, Any]:
    return find(compile(PROD, PROD_POOLS), "ValidatingAdmissionPolicy", PODS)


@pytest.mark.parametrize(
    ("obj", "allowed"),
    [
        (pod(), True),
        (pod(tolerations=[GPU_TOLERATION], **GPU), True),  # what Kueue makes of an admitted GPU job
        (pod(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]), False),
        (pod(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}], **GPU), False),
        (pod(env=[{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}]), True),
        (pod(tolerations=[GPU_TOLERATION]), False),  # tolerates its way onto a GPU node, asks for no GPU
        (pod(tolerations=[{"operator": "Exists"}]), False),  # tolerates every taint
        (pod(tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}]), False),
        (pod(tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}]), True),
        (pod(tolerations=[{"key": "example.com/spot", "operator": "Exists"}]), True),
        (pod(tolerations=[GPU_TOLERATION], gates=["kueue.x-k8s.io/topology"]), True),  # placed by Kueue TAS
        (pod(tolerations=[GPU_TOLERATION], gates=["example.com/other"]), False),
        (
            pod(
                resources={
                    "requests": {"nvidia.com/gpu.shared": "1"},
                    "limits": {"nvidia.com/gpu.shared": "1"},
                }
            ),
            True,
        ),
        (
            pod(
                resources={
                    "requests": {"nvidia.com/gpu.shared": "2"},
                    "limits": {"nvidia.com/gpu.shared": "2"},
                }
            ),
            False,
        ),
        (pod(resources={"limits": {"nvidia.com/gpu.shared": "4"}}), False),
        (pod(resources={"limits": {"nvidia.com/gpu": "4"}}), True),
        (pod(priorityClassName="system-node-critical"), False),
        (pod(priorityClassName="system-cluster-critical", **GPU), False),
        (pod(priorityClassName="high"), True),
    ],
)
def test_team_pod_rules(pods_policy: dict[str, Any], obj: dict[str, Any], allowed: bool) -> None:
    assert admitted(pods_policy, obj) is allowed


def test_an_init_or_ephemeral_container_cannot_set_visible_devices(pods_policy: dict[str, Any]) -> None:
    env = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    for field in ("initContainers", "ephemeralContainers"):
        obj = pod()
        obj["spec"][field] = [{"name": "x", "image": "busybox", "env": env}]
        assert not admitted(pods_policy, obj)


def test_an_update_may_not_add_a_gpu_toleration(pods_policy: dict[str, Any]) -> None:
    """Tolerations may be added to a running pod (the API allows additions); one that tolerates the GPU taint
    without a GPU request is refused, while Kueue lifting the topology gate of a pod it placed is not."""
    before = pod()
    after = pod(tolerations=[GPU_TOLERATION])
    assert not admitted(pods_policy, after, old=before)
    gated = pod(tolerations=[GPU_TOLERATION], gates=["kueue.x-k8s.io/topology"])
    assert admitted(pods_policy, pod(tolerations=[GPU_TOLERATION]), old=gated)
    # Kueue admitting a gated bare pod of a topology gang: it adds the flavor's toleration while the pod still
    # carries the topology gate (the API refuses adding scheduling gates on update, so only Kueue's stays).
    admission_gated = pod(gates=["kueue.x-k8s.io/admission", "kueue.x-k8s.io/topology"])
    assert admitted(
        pods_policy, pod(tolerations=[GPU_TOLERATION], gates=["kueue.x-k8s.io/topology"]), old=admission_gated
    )


def test_existing_clusters_require_the_packing_scheduler_for_gpu_pods() -> None:
    policy = find(compile(METAL, METAL_POOLS), "ValidatingAdmissionPolicy", PODS)
    assert not admitted(policy, pod(**GPU))
    named = pod(**GPU)
    named["spec"]["schedulerName"] = SECONDARY_SCHEDULER_NAME
    assert admitted(policy, named)
    assert admitted(policy, pod())  # CPU-only pods may use the default scheduler


@pytest.mark.parametrize(("kind", "allowed"), [("ClusterIP", True), (None, True), ("LoadBalancer", False), ("NodePort", False)])  # fmt: skip
def test_services(kind: str | None, allowed: bool) -> None:
    policy = find(compile(PROD, PROD_POOLS), "ValidatingAdmissionPolicy", SERVICES)
    spec: dict[str, Any] = {"ports": [{"port": 80}]}
    if kind:
        spec["type"] = kind
    assert (
        admitted(policy, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": spec})
        is allowed
    )


def test_policies_match_team_namespaces_only_and_external_services_per_team() -> None:
    teams = tuple(replace(t, external_services=t.name == "inference") for t in PROD.teams)
    objects = compile(replace(PROD, teams=teams), PROD_POOLS)
    pods = find(objects, "ValidatingAdmissionPolicy", PODS)["spec"]["matchConstraints"]["namespaceSelector"]
    services = find(objects, "ValidatingAdmissionPolicy", SERVICES)["spec"]["matchConstraints"][
        "namespaceSelector"
    ]
    for ns in of_kind(objects, "Namespace"):
        labels = {**ns["metadata"]["labels"], "kubernetes.io/metadata.name": ns["metadata"]["name"]}
        assert selector_matches(pods, labels)
        assert selector_matches(services, labels) is (ns["metadata"]["name"] != "team-inference")
    for platform in ("kube-system", "kueue-system", "gpu-operator", "monitoring", "ingress"):
        labels = {"kubernetes.io/metadata.name": platform}
        assert not selector_matches(pods, labels) and not selector_matches(services, labels)
    for binding in of_kind(objects, "ValidatingAdmissionPolicyBinding"):
        assert binding["spec"]["validationActions"] == ["Deny"]


def test_mutating_policies_only_where_the_api_is_served() -> None:
    """MutatingAdmissionPolicy is admissionregistration.k8s.io/v1 (GA, on by default) from Kubernetes 1.36;
    in 1.34-1.35 it is v1beta1 behind a feature gate and a runtime-config flag (Kubernetes docs, "Mutating
    Admission Policy"; the 1.35 and 1.36 OpenAPI schemas of kubernetes-validate)."""
    assert not of_kind(compile(METAL, METAL_POOLS), "MutatingAdmissionPolicy")
    objects = compile(
        replace(METAL, kubernetes_version="1.36", kube_scheduler_image_tag="v1.36.4"), METAL_POOLS
    )
    assert {p["metadata"]["name"] for p in of_kind(objects, "MutatingAdmissionPolicy")} == {
        DEFAULT_PRIORITY,
        DEFAULT_SCHEDULER,
    }
    aws = compile(replace(PROD, kubernetes_version="1.36", kube_scheduler_image_tag="v1.36.4"), PROD_POOLS)
    assert {p["metadata"]["name"] for p in of_kind(aws, "MutatingAdmissionPolicy")} == {DEFAULT_PRIORITY}


def test_mutation_expressions() -> None:
    """The match conditions select what is unset; the apply configurations carry the team's default."""
    namespace = {"metadata": {"labels": {admission.PRIORITY_LABEL: "production"}}}
    job = {"metadata": {"name": "j"}}
    labelled = {"metadata": {"name": "j", "labels": {admission.KUEUE_PRIORITY_LABEL: "preemptible"}}}
    assert evaluate(admission.PRIORITY_NOT_SET, object=job) is True
    assert evaluate(admission.PRIORITY_NOT_SET, object=labelled) is False
    assert evaluate(admission.SCHEDULER_NOT_SET, object=pod()) is True
    named = pod()
    named["spec"]["schedulerName"] = "other"
    assert evaluate(admission.SCHEDULER_NOT_SET, object=named) is False
    assert "'production'" not in admission.SET_PRIORITY  # read from the namespace, not baked in
    # The apply configuration's label map, evaluated (the Object{...} wrapper needs the API server's types).
    labels = admission.SET_PRIORITY.removeprefix("Object{metadata: Object.metadata{labels: ").removesuffix(
        "}}"
    )
    env = celpy.Environment()
    value = env.program(env.compile(labels)).evaluate({"namespaceObject": celpy.json_to_cel(namespace)})
    assert dict(value) == {admission.KUEUE_PRIORITY_LABEL: "production"}
    bare = env.program(env.compile(labels)).evaluate({"namespaceObject": celpy.json_to_cel({"metadata": {}})})
    assert dict(bare) == {}
    assert f"'{SECONDARY_SCHEDULER_NAME}'" in admission.SET_SCHEDULER


def test_mutating_policies_validate_against_the_1_36_core_schemas() -> None:
    from scheduler.validation import core_problems

    policy = replace(METAL, kubernetes_version="1.36", kube_scheduler_image_tag="v1.36.4")
    objects = [o for o in compile(policy, METAL_POOLS) if "AdmissionPolicy" in o["kind"]]
    assert [p for o in objects for p in core_problems(o, "1.36")] == []
