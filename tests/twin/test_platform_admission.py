"""What each platform's API server adds at admission, and the team rules that follow from it and from the Kueue
release the twin runs. The aws twin's API server runs EKS's admission plugins and the existing twin kubeadm's
(twin.controlplane.ADMISSION_PLUGINS), so what a pod gets here is what the real API server gives it there.
"""

from __future__ import annotations

import json
from typing import Any

from tests.twin.kube import Kube, job, name, pod

EXISTS_GPU = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def admitted_tolerations(kube: Kube, requests: dict[str, Any]) -> list[dict[str, Any]]:
    """The tolerations a pod in kube-system (where GPU pods are allowed) has once admission ran (a dry run)."""
    obj = pod(name("plain"), "kube-system", requests)
    out = kube.ok("create", "--dry-run=server", "-f", "-", "-o", "json", stdin=json.dumps(obj))
    return list(json.loads(out)["spec"].get("tolerations", []))


def refused(result: Any, *words: str) -> None:
    assert not result.ok, f"expected a refusal, got: {result.out[:300]}"
    for word in words:
        assert word in result.err, result.err


def test_on_eks_a_pod_naming_a_gpu_tolerates_the_gpu_taint_even_at_zero(prod_twin: Kube) -> None:
    """EKS's ExtendedResourceToleration gives the pod a toleration of the taint keyed by each extended resource
    it names, whatever the amount (kubernetes v1.36.4 plugin/pkg/admission/extendedresourcetoleration/
    admission.go:71-95)."""
    for amount in ("1", "0"):
        assert EXISTS_GPU in admitted_tolerations(prod_twin, {"cpu": "1", "nvidia.com/gpu": amount}), amount
    assert EXISTS_GPU not in admitted_tolerations(prod_twin, {"cpu": "1"})


def test_on_kubeadm_a_pod_naming_a_gpu_gets_no_toleration_of_the_gpu_taint(metal_twin: Kube) -> None:
    """kubeadm's API server does not run ExtendedResourceToleration: the existing platform's pods tolerate only
    what they say."""
    for amount in ("1", "0"):
        assert EXISTS_GPU not in admitted_tolerations(metal_twin, {"cpu": "1", "nvidia.com/gpu": amount}), (
            amount
        )


def test_on_eks_a_zero_gpu_request_is_refused_when_the_job_is_created(prod_twin: Kube) -> None:
    """A Helm chart that renders `nvidia.com/gpu: 0` for CPU work makes pods that tolerate the GPU taint on EKS,
    which the pod rule refuses after Kueue admitted the job; the job itself is refused, with the reason."""
    research = prod_twin.as_member(("researchers",))
    zero = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": 0}
    dry = ("create", "--dry-run=server", "-f", "-", "-o", "name")
    refused(research.attempt(*dry, stdin=json.dumps(job(name("zero"), "team-research", zero, queue="cpu"))),
            "at 0", "ExtendedResourceToleration")  # fmt: skip
    cpu = {"cpu": "1", "memory": "1Gi"}
    made = research.attempt(*dry, stdin=json.dumps(job(name("cpu"), "team-research", cpu, queue="cpu")))
    assert made.ok, made.err


def test_a_job_asks_at_most_its_completions_at_once(metal_twin: Kube) -> None:
    """Kueue v0.19.2 frees the quota of a Job's running pods once succeeded and running pods pass `completions`
    (kubernetes-sigs/kueue#16132): a Job or a CronJob's Job with parallelism > completions is refused."""
    vision = metal_twin.as_member(("vision-team",))
    dry = ("create", "--dry-run=server", "-f", "-", "-o", "name")
    wide = job(name("wide"), "vision", {"cpu": "1", "memory": "1Gi"}, queue="cpu", parallelism=2)
    assert vision.attempt(*dry, stdin=json.dumps(wide)).ok
    wide["spec"]["parallelism"] = 4
    refused(vision.attempt(*dry, stdin=json.dumps(wide)), "parallelism <= completions")
    cron = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name("nightly"), "namespace": "vision", "labels": wide["metadata"]["labels"]},
        "spec": {"schedule": "0 2 * * *", "jobTemplate": {"metadata": {"labels": wide["metadata"]["labels"]},
                                                          "spec": wide["spec"]}},
    }  # fmt: skip
    refused(vision.attempt(*dry, stdin=json.dumps(cron)), "parallelism <= completions")


def test_a_statefulsets_pod_template_does_not_change_once_it_exists(metal_twin: Kube) -> None:
    """Kueue v0.19.2 ungates a rolling update's pods before admitting them (kubernetes-sigs/kueue#16401): a
    member's change of a StatefulSet's pod template is refused; its labels may still change."""
    vision = metal_twin.as_member(("vision-team",))
    set_name = name("cache")
    labels = {"app": set_name, "kueue.x-k8s.io/queue-name": "cpu"}
    container = {"name": "main", "image": "registry.example/cache:1",
                 "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}  # fmt: skip
    sts = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": set_name, "namespace": "vision", "labels": labels},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": set_name}}, "serviceName": set_name,
                 "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}}},
    }  # fmt: skip
    made = vision.create(sts)
    assert made.ok, made.err
    try:
        image = json.dumps([{"op": "replace", "path": "/spec/template/spec/containers/0/image",
                             "value": "registry.example/cache:2"}])  # fmt: skip
        refused(vision.attempt("patch", "statefulset", set_name, "-n", "vision", "--type=json", "-p", image),
                "does not change once it exists")  # fmt: skip
        label = vision.attempt("label", "statefulset", set_name, "-n", "vision", "tier=cache")
        assert label.ok, label.err
    finally:
        vision.delete("statefulset", set_name, "vision")
