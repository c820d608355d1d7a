"""The team admission policies decided by the real API server: each case is created by a team member as a
server-side dry run (`kubectl create --dry-run=server`), which runs every admission step, the project's
ValidatingAdmissionPolicies and Kueue's webhooks included, without persisting anything (kubernetes.io "Dry-run":
"admission controllers are run"). CEL semantics are the API server's own (kubernetes.io "Validating Admission
Policy"); on 1.36 the MutatingAdmissionPolicies are GA and served by default (KEP-3962), on 1.35 not rendered.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import eventually
from tests.twin.conftest import start_twin
from tests.twin.kube import Kube, job, name

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
GPU = {"limits": {"nvidia.com/gpu": "1"}}


def pod(namespace: str, *, tolerations: list[dict[str, str]] | None = None, gates: tuple[str, ...] = (),
        resources: dict[str, Any] | None = None, env: list[dict[str, str]] | None = None,
        scheduler: str = "gpu-binpack", **spec: Any) -> dict[str, Any]:  # fmt: skip
    container: dict[str, Any] = {"name": "main", "image": "registry.example/x:1"}
    if resources:
        container["resources"] = resources
    if env:
        container["env"] = env
    body: dict[str, Any] = {"containers": [container], "schedulerName": scheduler, **spec}
    if tolerations is not None:
        body["tolerations"] = tolerations
    if gates:
        body["schedulingGates"] = [{"name": g} for g in gates]
    gpu = any(r.startswith("nvidia.com/") for kind in (resources or {}).values() for r in kind)
    labels = {} if gpu else {"kueue.x-k8s.io/queue-name": "cpu"}  # CPU-only pods go to the cpu queue
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name("case"), "namespace": namespace, "labels": labels},
        "spec": body,
    }


def admits(kube: Kube, obj: dict[str, Any]) -> bool:
    return kube.attempt("create", "--dry-run=server", "-f", "-", "-o", "name", stdin=json.dumps(obj)).ok


CASES = [
    ("a plain pod", {}, True),
    ("a GPU pod with the GPU toleration (an admitted GPU job's pod)", {"tolerations": [GPU_TOLERATION], "resources": GPU}, True),
    ("NVIDIA_VISIBLE_DEVICES", {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}, False),
    ("NVIDIA_VISIBLE_DEVICES with a GPU", {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}], "resources": GPU}, False),
    ("CUDA_VISIBLE_DEVICES", {"env": [{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}]}, True),
    ("the GPU toleration, no GPU", {"tolerations": [GPU_TOLERATION]}, False),
    ("a toleration of every taint", {"tolerations": [{"operator": "Exists"}]}, False),
    ("the GPU key, Exists", {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}, False),
    ("the GPU key, NoExecute only", {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}]}, True),
    ("another taint", {"tolerations": [{"key": "example.com/spot", "operator": "Exists"}]}, True),
    ("the GPU toleration behind a self-made topology gate, no owner", {"tolerations": [GPU_TOLERATION], "gates": ("kueue.x-k8s.io/topology",)}, False),
    ("the GPU toleration behind another gate", {"tolerations": [GPU_TOLERATION], "gates": ("example.com/other",)}, False),
    ("one time-sliced replica", {"resources": {"limits": {"nvidia.com/gpu.shared": "1"}}}, True),
    ("two time-sliced replicas", {"resources": {"limits": {"nvidia.com/gpu.shared": "2"}}}, False),
    ("four whole GPUs", {"resources": {"limits": {"nvidia.com/gpu": "4"}}}, True),
    ("system-node-critical", {"priorityClassName": "system-node-critical"}, False),
    ("system-cluster-critical with a GPU", {"priorityClassName": "system-cluster-critical", "resources": GPU}, False),
    ("spec.nodeName", {"nodeName": "gpu-h100-01"}, False),
    ("a GPU pod on the default scheduler", {"resources": GPU, "scheduler": "default-scheduler"}, False),
    ("a CPU pod on the default scheduler", {"scheduler": "default-scheduler"}, True),
]  # fmt: skip


@pytest.mark.parametrize(("case", "spec", "allowed"), CASES, ids=[c[0] for c in CASES])
def test_team_pod_rules(metal_twin: Kube, case: str, spec: dict[str, Any], allowed: bool) -> None:
    member = metal_twin.as_member(("vision-team",))
    assert admits(member, pod("vision", **spec)) is allowed, case


def test_visible_devices_through_env_from_are_left_to_the_container_toolkit(metal_twin: Kube) -> None:
    """`env` naming NVIDIA_VISIBLE_DEVICES is refused; a ConfigMap's keys through `envFrom` (with or without a
    prefix) are not read by admission, like an image's own ENV, so they are admitted: what keeps them from
    exposing GPUs is the container toolkit refusing the variable from unprivileged containers (docs/scheduling.md,
    threat model)."""
    member = metal_twin.as_member(("vision-team",))
    for env_from in (
        [{"configMapRef": {"name": "gpu-env"}}],
        [{"prefix": "NVIDIA_", "configMapRef": {"name": "x"}}],
    ):
        obj = pod("vision")
        obj["spec"]["containers"][0]["envFrom"] = env_from
        assert admits(member, obj)
    assert not admits(member, pod("vision", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]))


def test_init_containers_cannot_set_visible_devices(metal_twin: Kube) -> None:
    member = metal_twin.as_member(("vision-team",))
    obj = pod("vision")
    obj["spec"]["initContainers"] = [
        {"name": "x", "image": "busybox", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}
    ]
    assert not admits(member, obj)


def test_an_update_may_not_add_a_gpu_toleration_or_an_ephemeral_container_with_gpus(metal_twin: Kube) -> None:
    """Tolerations may be added to a pod (an update may add, not remove them: kubernetes.io "Taints and
    Tolerations"); one that tolerates the GPU taint without a GPU request is refused, and so is an ephemeral
    container (the pods/ephemeralcontainers subresource) that sets NVIDIA_VISIBLE_DEVICES."""
    member = metal_twin.as_member(("vision-team",))
    waiting = pod("vision", scheduler="default-scheduler")  # in the cpu queue: CPU-only
    created = member.attempt("create", "-f", "-", "-o", "json", stdin=json.dumps(waiting))
    assert created.ok, created.err
    pod_name = waiting["metadata"]["name"]
    add = json.dumps([{"op": "add", "path": "/spec/tolerations/-", "value": GPU_TOLERATION}])
    result = member.attempt("patch", "pod", pod_name, "-n", "vision", "--type=json", "-p", add)
    assert not result.ok and "must request a GPU" in result.err
    debug = {"spec": {"ephemeralContainers": [{"name": "dbg", "image": "busybox",
                                               "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}]}}  # fmt: skip
    # Members have no access to the subresource (`edit` does not grant it); the policy holds for whoever has.
    result = metal_twin.attempt("patch", "pod", pod_name, "-n", "vision", "--subresource=ephemeralcontainers",
                        "--type=strategic", "-p", json.dumps(debug))  # fmt: skip
    assert not result.ok and "NVIDIA_VISIBLE_DEVICES" in result.err
    member.delete("pod", pod_name, "vision")


@pytest.mark.parametrize(("kind", "allowed"), [("ClusterIP", True), (None, True), ("LoadBalancer", False), ("NodePort", False)])  # fmt: skip
def test_services(prod_twin: Kube, kind: str | None, allowed: bool) -> None:
    member = prod_twin.as_member(("researchers",))
    spec: dict[str, Any] = {"ports": [{"port": 80}], "selector": {"app": "x"}}
    if kind:
        spec["type"] = kind
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name("svc"), "namespace": "team-research"},
        "spec": spec,
    }
    assert admits(member, service) is allowed


def test_ingresses_and_gateway_routes_are_external_exposure(prod_twin: Kube) -> None:
    """`edit` grants Ingresses (kubernetes.io "Using RBAC Authorization", user-facing roles), which
    the shared ingress controller serves outside the cluster: refused like a LoadBalancer Service."""
    member = prod_twin.as_member(("researchers",))
    ingress = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": name("web"), "namespace": "team-research"},
        "spec": {"rules": [{"host": "x.example.com", "http": {"paths": [{"path": "/", "pathType": "Prefix",
                 "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]},
    }  # fmt: skip
    result = member.attempt("create", "--dry-run=server", "-f", "-", stdin=json.dumps(ingress))
    assert not result.ok and "Ingresses and Gateway routes" in result.err, result.err


@pytest.mark.parametrize(
    ("budget", "allowed"),
    [({"maxUnavailable": 1}, True), ({"minAvailable": 1}, True), ({"minAvailable": "50%"}, True),
     ({"maxUnavailable": 0}, False), ({"maxUnavailable": "0%"}, False), ({"minAvailable": "100%"}, False),
     ({"maxUnavailable": "00%"}, False), ({"minAvailable": "0100%"}, False), ({"maxUnavailable": "010%"}, True)],
)  # fmt: skip
def test_disruption_budgets_may_not_forbid_every_eviction(
    prod_twin: Kube, budget: dict, allowed: bool
) -> None:
    """A budget that allows no eviction pins its nodes against drains and scale-down (kubernetes.io "Specifying a
    Disruption Budget for your Application"). The values are compared as numbers: the API accepts a percentage
    with leading zeros (kubernetes/apimachinery v0.35.8 IsValidPercent), so `00%` and `0100%` are 0 and 100%.
    `minAvailable: 1` is allowed: whether it equals the replicas it selects is not known at admission
    (docs/scheduling.md)."""
    member = prod_twin.as_member(("researchers",))
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name("pdb"), "namespace": "team-research"},
        "spec": {"selector": {"matchLabels": {"app": "serve"}}, **budget},
    }
    assert admits(member, pdb) is allowed


def test_pods_that_predate_the_rules_can_still_be_updated(metal_twin: Kube) -> None:
    """A pod that broke a rule before its namespace became team-managed can still be updated (so Kueue and
    controllers can remove finalizers and gates); without the ratchet every UPDATE would be refused."""
    ns = name("legacy")
    metal_twin.ok("create", "namespace", ns)
    eventually(lambda: metal_twin.attempt("get", "sa", "default", "-n", ns).ok, "the default ServiceAccount")
    old = pod(ns, env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])
    assert metal_twin.create(old).ok
    metal_twin.ok("label", "namespace", ns, "gpufleet.io/queue-managed=true")
    fresh = pod(ns, env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])
    refusal = eventually(
        lambda: (r := metal_twin.create(fresh)) and not r.ok and r, "a new pod to be refused"
    )
    assert "NVIDIA_VISIBLE_DEVICES" in refusal.err
    relabelled = metal_twin.attempt("label", "pod", old["metadata"]["name"], "-n", ns, "touched=yes")
    assert relabelled.ok, relabelled.err
    metal_twin.ok("delete", "namespace", ns, "--wait=false")


# ---- 1.36: the MutatingAdmissionPolicies, GA and on by default ----------------------------------------------


@pytest.fixture(scope="module")
def metal_136(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    """The metal stack on Kubernetes 1.36 (`invoke twin --minor 1.36`): its policy compiled for 1.36."""
    twin = start_twin(tmp_path_factory, "metal", minor="1.36")
    yield Kube.of(twin)
    twin.stop()


def test_on_1_36_team_jobs_get_the_default_priority_and_pods_the_packing_scheduler(metal_136: Kube) -> None:
    """A job without `kueue.x-k8s.io/priority-class` gets the team's default WorkloadPriorityClass (from its
    namespace's label); a pod that leaves schedulerName at the default gets gpu-binpack, so a GPU pod needs
    no schedulerName at all (docs/existing.md)."""
    member = metal_136.as_member(("vision-team",))
    unlabelled = job(name("plain"), "vision", {"cpu": "1", "memory": "1Gi"})
    created = member.attempt("create", "-f", "-", "-o", "json", stdin=json.dumps(unlabelled))
    assert created.ok, created.err
    labels = json.loads(created.out)["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/priority-class"] == "default"
    assert labels["kueue.x-k8s.io/queue-name"] == "cpu"  # a CPU-only job is routed to the cpu queue
    chosen = job(
        name("chosen"), "vision", {"cpu": "1"}, labels={"kueue.x-k8s.io/priority-class": "preemptible"}
    )
    assert (
        json.loads(member.ok("create", "-f", "-", "-o", "json", stdin=json.dumps(chosen)))["metadata"][
            "labels"
        ]["kueue.x-k8s.io/priority-class"]
        == "preemptible"
    )
    gpu = pod("vision", resources=GPU, scheduler="default-scheduler")
    gpu["spec"].pop("schedulerName")
    made = member.attempt("create", "--dry-run=server", "-f", "-", "-o", "json", stdin=json.dumps(gpu))
    assert made.ok, made.err
    assert json.loads(made.out)["spec"]["schedulerName"] == "gpu-binpack"
    eventually(lambda: member.items("workloads.kueue.x-k8s.io", "vision"), "the Workloads")
