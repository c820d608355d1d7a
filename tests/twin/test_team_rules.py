"""docs/scheduling.md, "What a team can and cannot do", row by row, acted out by a team member on the twin.

The member is impersonated with the team's group (kubernetes.io "User impersonation"), so the real API server's
RBAC, the project's ValidatingAdmissionPolicies and Kueue's real webhooks and controller all act on the request
as they would on the real cluster. What the left column allows is created and runs its course; what the right
column forbids is refused with a message, also when the pod is created by a Job's or a Deployment's
controller, and when the pod is checked after Kueue's webhook mutated it.

metal (existing platform, 1.35): teams `vision` (group vision-team: h100 16 GPUs, l40s 4, borrowing 8) and
`nlp`; GPU pods are bound by the `gpu-binpack` scheduler, which 1.35 team pods must name (no
MutatingAdmissionPolicy before 1.36, docs/existing.md). example-prod (aws, 1.35): time-sliced, MIG and EFA pools.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support import eventually
from tests.twin.kube import Kube, job, name, pod

GPU = "nvidia.com/gpu"
SHARED = "nvidia.com/gpu.shared"
TOLERATE_GPU = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
BINPACK = {"schedulerName": "gpu-binpack"}
QUEUE = "kueue.x-k8s.io/queue-name"
EIGHT = {"cpu": "8", "memory": "64Gi", GPU: 8}
IN_CPU = {"labels": {QUEUE: "cpu"}}
NOT_OWNED = "only the cluster's controllers set a controller ownerReference"
NOT_STARTED = "only Kueue starts a job"


@pytest.fixture(scope="module")
def vision(metal_twin: Kube) -> Kube:
    return metal_twin.as_member(("vision-team",))


def workload_of(kube: Kube, namespace: str, owner: str) -> dict[str, Any] | None:
    for wl in kube.items("workloads.kueue.x-k8s.io", namespace):
        if any(ref["name"] == owner for ref in wl["metadata"].get("ownerReferences", [])):
            return wl
    return None


def condition(obj: dict[str, Any] | None, kind: str) -> bool:
    return bool(obj) and any(
        c["type"] == kind and c["status"] == "True"
        for c in (obj or {}).get("status", {}).get("conditions", [])
    )


def pods_of(kube: Kube, namespace: str, job_name: str) -> list[dict[str, Any]]:
    return kube.items("pods", namespace, f"batch.kubernetes.io/job-name={job_name}")


def refused(result: Any, *words: str) -> None:
    assert not result.ok, f"expected a refusal, got: {result.out[:300]}"
    for word in words:
        assert word in result.err, result.err


def failed_create_events(kube: Kube, namespace: str, owner: str) -> list[str]:
    events = json.loads(kube.ok("get", "events", "-n", namespace, "-o", "json"))["items"]
    return [
        e["message"]
        for e in events
        if e["involvedObject"]["name"] == owner and e["reason"] in ("FailedCreate", "FailedCreatePodReason")
    ]


# ---- row 1: Jobs and Deployments through the team's queue -----------------------------------------------


def test_a_member_creates_jobs_and_deployments_and_kueue_queues_them(vision: Kube, metal_twin: Kube) -> None:
    """Role `edit` lets the team create Jobs and Deployments (kubernetes.io "User-facing roles"); Kueue's job
    webhook suspends a Job in a managed namespace and its controller creates a Workload in the namespace's
    LocalQueue (manageJobsWithoutQueueName with managedJobsNamespaceSelector, Kueue docs "Run A Kubernetes
    Job" and "Setup manageJobsWithoutQueueName"); once admitted it is unsuspended and its pod bound by
    gpu-binpack to the pool of its flavor."""
    train = name("train")
    made = vision.create(job(train, "vision", {"cpu": "8", "memory": "64Gi", GPU: 8}, pod=BINPACK))
    assert made.ok
    created = json.loads(made.out)  # the object as admitted, after Kueue's mutating webhook
    wl = eventually(lambda: workload_of(metal_twin, "vision", train), "the Job's Workload")
    assert wl["spec"]["queueName"] == "default"
    eventually(lambda: condition(workload_of(metal_twin, "vision", train), "Admitted"), "admission")
    assert created["spec"]["suspend"] is True  # suspended at creation, by Kueue's webhook
    bound = eventually(lambda: [p for p in pods_of(metal_twin, "vision", train) if p["spec"].get("nodeName")],
                       "the Job's pod to be bound")  # fmt: skip
    assert bound[0]["spec"]["nodeName"].startswith("gpu-h100-")
    events = json.loads(metal_twin.ok("get", "events", "-n", "vision", "-o", "json"))["items"]
    binders = {e.get("reportingComponent") for e in events if e["reason"] == "Scheduled"
               and e["involvedObject"]["name"] == bound[0]["metadata"]["name"]}  # fmt: skip
    assert binders == {"gpu-binpack"}

    web = name("web")
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": web, "namespace": "vision", "labels": {"kueue.x-k8s.io/queue-name": "cpu"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": web}},
            "template": {
                "metadata": {"labels": {"app": web}},
                "spec": {
                    "containers": [
                        {
                            "name": "web",
                            "image": "registry.example/web:1",
                            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                        }
                    ]
                },
            },
        },
    }
    assert vision.create(deployment).ok
    running = eventually(lambda: [p for p in vision.items("pods", "vision", f"app={web}")
                                  if p["status"].get("phase") == "Running"], "the Deployment's pod")  # fmt: skip
    assert running[0]["metadata"]["labels"].get("kueue.x-k8s.io/managed") == "true"
    for kind, obj in (("job", train), ("deployment", web)):
        vision.delete(kind, obj, "vision")


def test_nothing_runs_in_a_team_namespace_outside_the_queue(vision: Kube, metal_twin: Kube) -> None:
    """A Job asking not to be suspended is suspended anyway and waits for its Workload's admission; a bare
    pod is held by Kueue's `kueue.x-k8s.io/admission` scheduling gate (Kueue pod integration, pod_webhook.go);
    a member cannot lift that gate, nor skip the scheduler with `spec.nodeName` (the kubelet checks only
    NoExecute taints, kubelet lifecycle/predicate.go, so nodeName would bypass quota and taints)."""
    eager = name("eager")
    doc = job(eager, "vision", {"cpu": "1", "memory": "1Gi"}, queue="cpu")
    doc["spec"]["suspend"] = False
    made = vision.create(doc)
    assert made.ok and json.loads(made.out)["spec"]["suspend"] is True
    assert eventually(lambda: workload_of(metal_twin, "vision", eager), "its Workload")

    bare = name("bare")
    # A queue that does not exist: its Workload waits forever, so the pod keeps Kueue's gate.
    waiting = {"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "no-such-queue"}}}
    made = vision.create(pod(bare, "vision", {"cpu": "1", "memory": "1Gi", GPU: 1}, **waiting, **BINPACK))
    assert made.ok
    gates = [g["name"] for g in json.loads(made.out)["spec"].get("schedulingGates", [])]
    assert "kueue.x-k8s.io/admission" in gates
    ungate = vision.attempt("patch", "pod", bare, "-n", "vision", "--type=json",
                        "-p", '[{"op": "remove", "path": "/spec/schedulingGates"}]')  # fmt: skip
    refused(ungate, "scheduling gates")

    pinned = name("pinned")
    refused(vision.create(pod(pinned, "vision", {"cpu": "1", "memory": "1Gi"}, nodeName="gpu-h100-03")),
            "nodeName")  # fmt: skip
    for kind, obj in (("job", eager), ("pod", bare)):
        vision.delete(kind, obj, "vision")


def owner(obj: dict[str, Any]) -> dict[str, Any]:
    """A controller ownerReference to `obj` as the API server returned it."""
    meta = obj["metadata"]
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"], "uid": meta["uid"],
            "controller": True}  # fmt: skip


def test_a_member_cannot_take_a_pod_out_of_the_queue_with_an_owner_reference(
    vision: Kube, metal_twin: Kube
) -> None:
    """Kueue's pod webhook adds no gate to a pod whose controller chain reaches a Kueue-managed object, and a
    Pod is one while the pod integration is on (kueue v0.19.2 pkg/controller/jobs/pod/pod_webhook.go,
    jobframework FindAncestorJobManagedByKueue, which calls same-namespace ownership spoofing out of scope):
    an 8-GPU pod owned by the member's own CPU Job, or an executor owned by its driver pod (what Spark does),
    would be bound with no Workload and no quota. Refused at creation, and a controller reference cannot be
    added to a pod later either."""
    anchor = vision.create(job(name("anchor"), "vision", {"cpu": "1", "memory": "1Gi"}, queue="cpu"))
    assert anchor.ok, anchor.err
    forged = {"ownerReferences": [owner(json.loads(anchor.out))]}
    for _ in range(3):
        refused(vision.create(pod(name("ghost"), "vision", EIGHT, metadata=forged, **BINPACK)), NOT_OWNED)
    driver = vision.create(pod(name("driver"), "vision", {"cpu": "1", "memory": "1Gi"},
                               metadata=IN_CPU))  # fmt: skip
    assert driver.ok, driver.err
    by_driver = {"ownerReferences": [owner(json.loads(driver.out))]}
    executor = pod(
        name("exec"), "vision", {"cpu": "4", "memory": "16Gi", GPU: 1}, metadata=by_driver, **BINPACK
    )
    refused(vision.create(executor), NOT_OWNED)
    adopt = json.dumps({"metadata": {"ownerReferences": by_driver["ownerReferences"]}})
    loose = vision.create(pod(name("loose"), "vision", {"cpu": "1", "memory": "1Gi"},
                              metadata=IN_CPU))  # fmt: skip
    assert loose.ok, loose.err
    loose_name = json.loads(loose.out)["metadata"]["name"]
    refused(
        vision.attempt("patch", "pod", loose_name, "-n", "vision", "--type=merge", "-p", adopt), NOT_OWNED
    )
    for kind, obj in (("job", anchor), ("pod", driver), ("pod", loose)):
        vision.delete(kind, json.loads(obj.out)["metadata"]["name"], "vision")


def test_a_member_cannot_take_a_job_out_of_the_queue_with_an_owner_reference(
    vision: Kube, metal_twin: Kube
) -> None:
    """Kueue's Job webhook does not suspend a Job whose controller is a managed job (kueue v0.19.2
    pkg/controller/jobframework/utils.go): a GPU Job owned by the member's own admitted Job would run
    unsuspended, with no Workload. Refused; the Job itself still goes through the queue."""
    parent = vision.create(job(name("parent"), "vision", {"cpu": "1", "memory": "1Gi"}, queue="cpu"))
    assert parent.ok, parent.err
    child = job(name("child"), "vision", EIGHT, pod=BINPACK)
    child["metadata"]["ownerReferences"] = [owner(json.loads(parent.out))]
    refused(vision.create(child), NOT_OWNED)
    assert not workload_of(metal_twin, "vision", child["metadata"]["name"])
    vision.delete("job", json.loads(parent.out)["metadata"]["name"], "vision")


def test_the_clusters_controllers_still_own_team_pods(vision: Kube, metal_twin: Kube) -> None:
    """An operator (here KubeRay's ServiceAccount, impersonated: no operator runs on the twin) creates the pods of
    a member's RayCluster with a controller reference to it, as the job controller does for Jobs (its pods run:
    test_a_member_creates_jobs_and_deployments_and_kueue_queues_them)."""
    cluster = vision.create(raycluster(name("rc"), "no-such-queue"))
    assert cluster.ok, cluster.err
    kuberay = metal_twin.as_member(
        ("system:masters",), user="system:serviceaccount:ray-system:kuberay-operator"
    )
    worker = pod(name("rc-worker"), "vision", {"cpu": "4", "memory": "16Gi", GPU: 1},
                 metadata={"ownerReferences": [owner(json.loads(cluster.out))]}, **BINPACK)  # fmt: skip
    made = kuberay.attempt("create", "--dry-run=server", "-f", "-", "-o", "name", stdin=json.dumps(worker))
    assert made.ok, made.err
    refused(vision.create(worker), NOT_OWNED)
    vision.delete("raycluster.ray.io", json.loads(cluster.out)["metadata"]["name"], "vision")


def test_only_kueue_starts_a_job(vision: Kube, metal_twin: Kube) -> None:
    """Kueue stops a job started without admission only after the fact (kueue v0.19.2
    pkg/controller/jobframework/reconciler.go: "Running job is not admitted by a cluster queue, suspending"),
    after the job controller made its pods and the scheduler bound them. A member's `suspend: false` on a
    pending Job, PyTorchJob or RayCluster is refused, and no pod is created."""
    pending = job(name("unq"), "vision", EIGHT, pod=BINPACK, parallelism=2, queue="no-such-queue")
    assert vision.create(pending).ok
    eventually(lambda: workload_of(metal_twin, "vision", pending["metadata"]["name"]), "its Workload")
    start = json.dumps({"spec": {"suspend": False}})
    refused(vision.attempt("patch", "job", pending["metadata"]["name"], "-n", "vision", "--type=merge", "-p", start),
            NOT_STARTED)  # fmt: skip
    for make, kind, patch in (
        (pytorchjob, "pytorchjob.kubeflow.org", {"spec": {"runPolicy": {"suspend": False}}}),
        (raycluster, "raycluster.ray.io", {"spec": {"suspend": False}}),
    ):
        obj = make(name("unq"), "no-such-queue")
        assert vision.create(obj).ok
        refused(vision.attempt("patch", kind, obj["metadata"]["name"], "-n", "vision", "--type=merge",
                               "-p", json.dumps(patch)), NOT_STARTED)  # fmt: skip
        vision.delete(kind, obj["metadata"]["name"], "vision")
    assert pods_of(metal_twin, "vision", pending["metadata"]["name"]) == []
    vision.delete("job", pending["metadata"]["name"], "vision")


def test_a_member_cannot_grow_a_running_job_outside_kueue(vision: Kube, metal_twin: Kube) -> None:
    """Growing a running Indexed Job (parallelism and completions, kubernetes.io "Jobs", elastic Indexed Jobs)
    makes its controller create pods at once, before Kueue stops the Job for no longer matching its Workload.
    Refused while the Job runs; a member may still suspend it."""
    grow = job(name("grow"), "vision", EIGHT, pod=BINPACK)
    grow["spec"]["completionMode"] = "Indexed"
    assert vision.create(grow).ok
    job_name = grow["metadata"]["name"]
    eventually(lambda: [p for p in pods_of(metal_twin, "vision", job_name) if p["spec"].get("nodeName")],
               "the running Job's pod")  # fmt: skip
    resize = json.dumps({"spec": {"parallelism": 3, "completions": 3}})
    refused(vision.attempt("patch", "job", job_name, "-n", "vision", "--type=merge", "-p", resize),
            "a running job keeps its size")  # fmt: skip
    assert len(pods_of(metal_twin, "vision", job_name)) == 1
    suspend = json.dumps({"spec": {"suspend": True}})
    assert vision.attempt("patch", "job", job_name, "-n", "vision", "--type=merge", "-p", suspend).ok
    vision.delete("job", job_name, "vision")


def test_a_gpu_pod_gives_its_gpus_back_within_the_grace_cap(vision: Kube, metal_twin: Kube) -> None:
    """A deleted pod runs on for its termination grace (kubernetes.io "Termination of Pods"), holding its GPUs
    after Kueue stopped or preempted it: a team GPU pod, a GPU job template, and a member's deletion may ask at
    most the stack's `maxTerminationGracePeriod` (5m)."""
    long = {"terminationGracePeriodSeconds": 3600, **BINPACK}
    refused(
        vision.create(pod(name("linger"), "vision", {"cpu": "1", GPU: 1}, **long)),
        "terminationGracePeriodSeconds",
    )
    refused(
        vision.create(job(name("linger"), "vision", {"cpu": "1", GPU: 1}, pod=long)),
        "terminationGracePeriodSeconds",
    )
    running = job(name("run"), "vision", {"cpu": "1", "memory": "1Gi", GPU: 1}, pod=BINPACK)
    assert vision.create(running).ok
    bound = eventually(lambda: [p for p in pods_of(metal_twin, "vision", running["metadata"]["name"])
                                if p["spec"].get("nodeName")], "the GPU job's pod to be bound")  # fmt: skip
    # (The API server deletes a pod no node runs at once, whatever grace is asked: only a bound pod lingers.)
    refused(vision.attempt("delete", "pod", bound[0]["metadata"]["name"], "-n", "vision", "--grace-period=3600",
                           "--wait=false"), "grace")  # fmt: skip
    vision.delete("job", running["metadata"]["name"], "vision")


def test_kinds_kueue_does_not_queue_as_one_job_are_refused(vision: Kube) -> None:
    """Role `edit` and kueue-batch-user-role (its TFJob, XGBoostJob... editors, kueue v0.19.2
    charts/kueue/templates/rbac/*_editor_role.yaml) let a member create kinds the stack does not queue as one
    job: Kueue would meet their pods one by one. Refused; a CronJob is queued (its Jobs are Jobs) and its
    template checked when it is created."""
    template = {"metadata": {"labels": {"app": "x"}}, "spec": {"restartPolicy": "Never", "containers": [
        {"name": "main", "image": "x", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}]}}  # fmt: skip
    kubeflow = {"replicas": 1, "restartPolicy": "Never", "template": template}
    serving = {"metadata": template["metadata"], "spec": {**template["spec"], "restartPolicy": "Always"}}
    objects = [
        {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "spec": {"tfReplicaSpecs": {"Worker": kubeflow}}},
        {"apiVersion": "kubeflow.org/v1", "kind": "XGBoostJob", "spec": {"xgbReplicaSpecs": {"Master": kubeflow}}},
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "spec": {"selector": {"matchLabels": {"app": "x"}},
                                                                  "template": serving}},
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "spec": {"selector": {"matchLabels": {"app": "x"}},
                                                                   "template": serving}},
        {"apiVersion": "v1", "kind": "ReplicationController", "spec": {"selector": {"app": "x"}, "template": serving}},
    ]  # fmt: skip
    for obj in objects:
        obj["metadata"] = {"name": name(obj["kind"].lower()), "namespace": "vision"}
        refused(vision.create(obj), "Kueue does not queue this kind")
    cron = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": name("cron"), "namespace": "vision"},
            "spec": {"schedule": "0 * * * *", "jobTemplate": {"metadata": {"labels": {QUEUE: "cpu"}},
                                                              "spec": {"template": template}}}}  # fmt: skip
    refused(vision.create(cron), "NVIDIA_VISIBLE_DEVICES")
    template["spec"]["containers"][0].pop("env")
    made = vision.attempt("create", "--dry-run=server", "-f", "-", "-o", "name", stdin=json.dumps(cron))
    assert made.ok, made.err


# ---- the normal paths: each kind admitted and started by Kueue ---------------------------------------------


def pytorchjob(name_: str, queue: str = "") -> dict[str, Any]:
    container = {"name": "pytorch", "image": "registry.example/train:1",
                 "resources": {"requests": EIGHT, "limits": EIGHT}}  # fmt: skip
    template = {"spec": {**BINPACK, "restartPolicy": "Never", "containers": [container]}}
    labels = {QUEUE: queue} if queue else {}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name_, "namespace": "vision", "labels": labels},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template}}}}  # fmt: skip


def raycluster(name_: str, queue: str = "") -> dict[str, Any]:
    head = {"spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.49.0",
            "resources": {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"cpu": "2", "memory": "8Gi"}}}]}}  # fmt: skip
    one = {"cpu": "8", "memory": "64Gi", GPU: 1}
    worker = {"spec": {**BINPACK, "containers": [{"name": "ray-worker", "image": "rayproject/ray:2.49.0",
              "resources": {"requests": one, "limits": one}}]}}  # fmt: skip
    labels = {QUEUE: queue} if queue else {}
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": name_, "namespace": "vision", "labels": labels},
            "spec": {"headGroupSpec": {"rayStartParams": {}, "template": head},
                     "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "minReplicas": 2, "maxReplicas": 2,
                                           "rayStartParams": {}, "template": worker}]}}  # fmt: skip


def jobset(name_: str) -> dict[str, Any]:
    container = {"name": "main", "image": "registry.example/train:1",
                 "resources": {"requests": EIGHT, "limits": EIGHT}}  # fmt: skip
    template = {"spec": {"parallelism": 1, "completions": 1, "template": {"spec": {
        **BINPACK, "restartPolicy": "Never", "containers": [container]}}}}  # fmt: skip
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name_, "namespace": "vision"},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2, "template": template}]}}  # fmt: skip


def started(obj: dict[str, Any]) -> bool:
    spec = obj["spec"]
    flag = spec.get("runPolicy", {}).get("suspend") if obj["kind"] == "PyTorchJob" else spec.get("suspend")
    return not flag


@pytest.mark.parametrize("make", [jobset, pytorchjob, raycluster], ids=["jobset", "pytorchjob", "raycluster"])
def test_framework_jobs_are_admitted_and_started_by_kueue(vision: Kube, metal_twin: Kube, make: Any) -> None:
    """No operator runs on the twin, so what is observed is Kueue's part: a member's JobSet (CRD of jobset
    v0.12.0), PyTorchJob and RayCluster are suspended at creation, admitted to the team's queue with their GPUs
    on a pool's flavor, and started by Kueue lifting the suspend flag the rules keep for it."""
    obj = make(name("fw"))
    made = vision.create(obj)
    assert made.ok, made.err
    assert not started(json.loads(made.out))
    kind = f"{obj['kind'].lower()}.{obj['apiVersion'].split('/')[0]}"
    job_name = obj["metadata"]["name"]
    eventually(lambda: condition(workload_of(metal_twin, "vision", job_name), "Admitted"), "admission", 90)
    wl = workload_of(metal_twin, "vision", job_name)
    flavors = {f for ps in wl["status"]["admission"]["podSetAssignments"] for f in ps["flavors"].values()}
    assert "h100" in flavors, wl["status"]["admission"]
    eventually(lambda: started(metal_twin.get(kind, job_name, "vision")), "Kueue to start it")
    vision.delete(kind, job_name, "vision")


# ---- row 2: quota, borrowing, and the namespace's ceiling ------------------------------------------------


def test_a_team_borrows_idle_gpus_up_to_its_limit_and_no_further(vision: Kube, metal_twin: Kube) -> None:
    """vision has 16 H100s and may borrow 8 of nlp's idle ones (ClusterQueue borrowingLimit, Kueue docs
    "Cluster Queue", Borrowing): a 24-GPU job is admitted while nlp is idle; a 32-GPU job stays pending."""
    wide, too_wide = name("wide"), name("toowide")
    eight = {"cpu": "8", "memory": "64Gi", GPU: 8}
    assert vision.create(job(wide, "vision", eight, pod=BINPACK, parallelism=3)).ok
    wl = eventually(lambda: workload_of(metal_twin, "vision", wide), "the 24-GPU Workload")
    eventually(lambda: condition(workload_of(metal_twin, "vision", wide), "Admitted"), "the 24-GPU admission")
    wl = workload_of(metal_twin, "vision", wide)
    usage = wl["status"]["admission"]["podSetAssignments"][0]["resourceUsage"][GPU]
    assert usage == "24"
    vision.delete("job", wide, "vision")
    eventually(lambda: not workload_of(metal_twin, "vision", wide), "the 24-GPU Workload to go")
    assert vision.create(job(too_wide, "vision", eight, pod=BINPACK, parallelism=4)).ok
    pending = eventually(lambda: workload_of(metal_twin, "vision", too_wide), "the 32-GPU Workload")
    eventually(lambda: condition(workload_of(metal_twin, "vision", too_wide), "QuotaReserved") is False
               and (workload_of(metal_twin, "vision", too_wide) or {}).get("status", {}).get("conditions"),
               "Kueue to report the 32-GPU Workload pending")  # fmt: skip
    assert not condition(workload_of(metal_twin, "vision", too_wide), "Admitted"), pending
    vision.delete("job", too_wide, "vision")


def test_the_gpu_ceiling_holds_even_without_kueue(vision: Kube) -> None:
    """The namespace's `gpu-ceiling` ResourceQuota is charged when a pod is created, gated or not
    (kubernetes.io "Resource Quotas": the quota system tracks usage at creation and refuses requests that
    exceed it, 403 "exceeded quota"), so at most quota + borrowing (24 H100s for vision) can ever exist."""
    made = []
    for _ in range(3):
        p = name("ceiling")
        assert vision.create(pod(p, "vision", {"cpu": "1", "memory": "1Gi", GPU: 8}, **BINPACK)).ok
        made.append(p)
    over = vision.create(pod(name("ceiling"), "vision", {"cpu": "1", "memory": "1Gi", GPU: 8}, **BINPACK))
    refused(over, "exceeded quota", "gpu-ceiling")
    for p in made:
        vision.delete("pod", p, "vision")


def test_the_ceiling_caps_cores_and_memory_too(vision: Kube) -> None:
    """The `gpu-ceiling` quota also caps `requests.cpu` and `requests.memory` at what the team's GPUs may ask
    plus every team's CPU-only allowance (vision: 832 cores), so work that escaped the queue could not take the
    other team's cores either."""
    huge = pod(name("huge"), "vision", {"cpu": "900", "memory": "1Gi"}, metadata={"labels": {QUEUE: "cpu"}})
    refused(vision.create(huge), "exceeded quota", "requests.cpu")


# ---- row 3: read the queues, change nothing of others -----------------------------------------------------


def test_members_read_the_queues_and_change_no_one_elses(vision: Kube) -> None:
    """The queue-reader ClusterRole grants get/list on ClusterQueues, ResourceFlavors, WorkloadPriorityClasses
    and Cohorts; nothing grants writes on them, nor any access to another team's namespace (RBAC is
    deny-by-default, kubernetes.io "Using RBAC Authorization")."""
    for kind in ("clusterqueues", "resourceflavors", "workloadpriorityclasses", "cohorts"):
        assert vision.attempt("get", f"{kind}.kueue.x-k8s.io").ok, kind
    refused(vision.attempt("patch", "clusterqueue.kueue.x-k8s.io", "vision", "--type=merge",
                       "-p", '{"spec": {"stopPolicy": "Hold"}}'), "forbidden")  # fmt: skip
    refused(vision.attempt("delete", "resourceflavor.kueue.x-k8s.io", "h100"), "forbidden")
    refused(vision.create(job(name("elsewhere"), "nlp", {"cpu": "1"})), "forbidden")
    refused(vision.attempt("get", "workloads.kueue.x-k8s.io", "-n", "nlp"), "forbidden")
    refused(vision.attempt("patch", "localqueue.kueue.x-k8s.io", "default", "-n", "nlp", "--type=merge",
                       "-p", '{"spec": {"stopPolicy": "Hold"}}'), "forbidden")  # fmt: skip


# ---- row 4: workload priorities yes, system priorities no --------------------------------------------------


def test_members_pick_workload_priorities_not_system_ones(vision: Kube, metal_twin: Kube) -> None:
    """A job's `kueue.x-k8s.io/priority-class` label selects a WorkloadPriorityClass (Kueue docs "Workload
    Priority Class"), up to the team's own (`teams[].priority`, vision's is `default`: a team labelling its
    jobs `production` would preempt other teams' borrowed work); the system
    PriorityClasses, which any namespace may use by default (kubernetes.io "Pod Priority and Preemption",
    system-node-critical/system-cluster-critical), are refused in team pods."""
    urgent = name("urgent")
    labelled = job(
        urgent,
        "vision",
        {"cpu": "1", "memory": "1Gi"},
        queue="cpu",
        labels={"kueue.x-k8s.io/priority-class": "preemptible"},
    )
    assert vision.create(labelled).ok
    wl = eventually(lambda: workload_of(metal_twin, "vision", urgent), "its Workload")
    assert wl["spec"]["priorityClassRef"]["name"] == "preemptible" and wl["spec"]["priority"] == 10
    above = job(name("above"), "vision", {"cpu": "1"}, queue="cpu",
                labels={"kueue.x-k8s.io/priority-class": "production"})  # fmt: skip
    refused(vision.create(above), "priority classes up to its own")
    unknown = job(name("unknown"), "vision", {"cpu": "1"}, queue="cpu",
                  labels={"kueue.x-k8s.io/priority-class": "urgent"})  # fmt: skip
    refused(vision.create(unknown), "production, default, preemptible")
    for klass in ("system-node-critical", "system-cluster-critical"):
        refused(vision.create(pod(name("vip"), "vision", {"cpu": "1"}, priorityClassName=klass)), klass)
    # In a Job's template too: refused when the Job is created, before Kueue could admit it and hold quota
    # for pods its controller would never get created.
    controller = name("vipjob")
    vip = job(
        controller, "vision", {"cpu": "1"}, queue="cpu", pod={"priorityClassName": "system-cluster-critical"}
    )
    refused(vision.create(vip), "system-cluster-critical")
    assert not workload_of(metal_twin, "vision", controller)
    vision.delete("job", urgent, "vision")


def test_a_priority_class_does_not_lift_a_workload_past_the_teams_cap(vision: Kube, metal_twin: Kube) -> None:
    """Kueue takes a Workload's priority from its pods' PriorityClass when the job names no WorkloadPriorityClass
    (kueue v0.19.2 pkg/controller/jobframework/reconciler.go ExtractPriority), and kube-scheduler preempts
    lower-priority pods for it: with a chart's `high-priority` class on the cluster, a job or pod naming it is
    refused unless the stack lists it (`scheduling.podPriorityClasses`, none on metal)."""
    metal_twin.ok("create", "priorityclass", "high-priority", "--value=1000000")
    try:
        lifted = job(
            name("lift"), "vision", {"cpu": "1"}, queue="cpu", pod={"priorityClassName": "high-priority"}
        )
        refused(vision.create(lifted), "podPriorityClasses")
        assert not workload_of(metal_twin, "vision", lifted["metadata"]["name"])
        bare = pod(name("lift"), "vision", {"cpu": "1"}, priorityClassName="high-priority",
                   metadata={"labels": {QUEUE: "cpu"}})  # fmt: skip
        refused(vision.create(bare), "podPriorityClasses")
    finally:
        metal_twin.ok("delete", "priorityclass", "high-priority")


def test_jobs_whose_pods_would_be_refused_are_refused_up_front(vision: Kube, metal_twin: Kube) -> None:
    """A job kind's templates obey the pod rules at creation, so nothing holds
    the team's quota while its controller's pods are refused (waitForPodsReady would evict it after 30 min and
    requeue it forever). Jobs, Deployments and the integrations the twin serves (PyTorchJob, RayJob)."""
    two_slices = job(name("twoslice"), "vision", {"cpu": "1", SHARED: 2}, pod=BINPACK)
    refused(vision.create(two_slices), "more than one nvidia.com/gpu.shared")
    no_scheduler = job(name("noscheduler"), "vision", {"cpu": "1", GPU: 1})
    refused(vision.create(no_scheduler), "schedulerName: gpu-binpack")
    pinned = job(name("pinned"), "vision", {"cpu": "1"}, pod={"nodeName": "gpu-h100-01"})
    refused(vision.create(pinned), "spec.nodeName")
    container = {"name": "w", "image": "x", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}
    template = {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [container]}}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name("dep"), "namespace": "vision"},
                  "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "x"}}, "template": template}}  # fmt: skip
    refused(vision.create(deployment), "NVIDIA_VISIBLE_DEVICES")
    worker = {"replicas": 1, "template": {"spec": {"containers": [{"name": "pytorch", "image": "x",
              "resources": {"limits": {SHARED: 2}}}]}}}  # fmt: skip
    pytorch = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name("pt"), "namespace": "vision"},
               "spec": {"pytorchReplicaSpecs": {"Master": worker}}}  # fmt: skip
    refused(vision.create(pytorch), "more than one nvidia.com/gpu.shared")
    head = {
        "rayStartParams": {},
        "template": {
            "spec": {
                "containers": [{"name": "ray-head", "image": "x"}],
                "priorityClassName": "system-node-critical",
            }
        },
    }
    ray = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": name("ray"), "namespace": "vision"},
           "spec": {"entrypoint": "python x.py", "rayClusterSpec": {"headGroupSpec": head}}}  # fmt: skip
    refused(vision.create(ray), "system-node-critical")
    for obj in (
        two_slices,
        no_scheduler,
        pinned,
        deployment,
        pytorch,
        ray,
    ):  # nothing admitted, no quota held
        assert not workload_of(metal_twin, "vision", obj["metadata"]["name"])


# ---- row 5: GPUs only by asking for them ---------------------------------------------------------------------


def test_members_request_whole_and_time_sliced_gpus(vision: Kube, metal_twin: Kube) -> None:
    """Whole GPUs on h100 and one time-sliced replica (`nvidia.com/gpu.shared`) on l40s are admitted and bound
    to their pools; more than one replica per container is refused up front (the device plugin would refuse
    it on the node, failRequestsGreaterThanOne, NVIDIA k8s-device-plugin "Shared Access to GPUs")."""
    slice_ = name("slice")
    assert vision.create(job(slice_, "vision", {"cpu": "2", "memory": "8Gi", SHARED: 1}, pod=BINPACK)).ok
    bound = eventually(lambda: [p for p in pods_of(metal_twin, "vision", slice_) if p["spec"].get("nodeName")],
                       "the sliced pod to be bound")  # fmt: skip
    assert bound[0]["spec"]["nodeName"].startswith("gpu-l40s-")
    refused(vision.create(pod(name("greedy"), "vision", {"cpu": "1", SHARED: 2}, **BINPACK)), "at most one")
    vision.delete("job", slice_, "vision")


def test_no_gpu_without_a_gpu_request(vision: Kube, metal_twin: Kube) -> None:
    """NVIDIA_VISIBLE_DEVICES in a container, or the GPU taint tolerated without a GPU request, is refused:
    in a bare pod, in a Job's template (the Job itself, before Kueue admits it), and after Kueue's pod webhook
    has mutated the pod
    (it adds the `kueue.x-k8s.io/topology` gate to every pod it manages while topology-aware scheduling is on,
    kueue v0.19.2 pkg/controller/jobs/pod/pod_webhook.go, so that gate cannot be taken as Kueue's placement)."""
    env = {"container": {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}}
    refused(vision.create(pod(name("peek"), "vision", {"cpu": "1"}, **env)), "NVIDIA_VISIBLE_DEVICES")
    sneaky = {"tolerations": TOLERATE_GPU, "nodeSelector": {"gpufleet.io/pool": "h100"}}
    refused(vision.create(pod(name("sneak"), "vision", {"cpu": "1"}, **sneaky)), "must request a GPU")
    by_job = name("sneakjob")
    refused(
        vision.create(job(by_job, "vision", {"cpu": "1", "memory": "1Gi"}, pod=sneaky)),
        "without a GPU request",
    )
    assert not workload_of(metal_twin, "vision", by_job)


def test_prod_members_request_mig_slices_and_efa(prod_twin: Kube) -> None:
    """example-prod: a MIG slice (`nvidia.com/mig-1g.10gb`, the mixed strategy's resource) is admitted to the
    h100-mig flavor and bound there; EFA interfaces (`vpc.amazonaws.com/efa`) with whole GPUs to h100-train."""
    research = prod_twin.as_member(("researchers",))
    mig = name("mig")
    assert research.create(
        job(mig, "team-research", {"cpu": "2", "memory": "8Gi", "nvidia.com/mig-1g.10gb": 1})
    ).ok
    bound = eventually(lambda: [p for p in pods_of(prod_twin, "team-research", mig) if p["spec"].get("nodeName")],
                       "the MIG pod to be bound", 90)  # fmt: skip
    assert "h100-mig" in bound[0]["spec"]["nodeName"]
    efa = name("efa")
    ask = {"cpu": "32", "memory": "256Gi", GPU: 8, "vpc.amazonaws.com/efa": 32}
    assert research.create(job(efa, "team-research", ask, queue="topology")).ok
    wl = eventually(lambda: workload_of(prod_twin, "team-research", efa), "the EFA Workload")
    eventually(
        lambda: condition(workload_of(prod_twin, "team-research", efa), "Admitted"), "the EFA admission", 90
    )
    wl = workload_of(prod_twin, "team-research", efa)
    assert wl["status"]["admission"]["podSetAssignments"][0]["flavors"][GPU] == "h100-train"
    for j in (mig, efa):
        research.delete("job", j, "team-research")


# ---- row 6: Services ------------------------------------------------------------------------------------


def test_cluster_ip_services_only(vision: Kube) -> None:
    """ClusterIP Services are the team's; LoadBalancer and NodePort (unless allowExternalServices) and
    `externalIPs` are refused: a ClusterIP Service with externalIPs lets kube-proxy capture that address for
    every pod and node (CVE-2020-8554, kubernetes/kubernetes#97076)."""

    def service(kind: str, **spec: Any) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name("svc"), "namespace": "vision"},
                "spec": {"type": kind, "selector": {"app": "x"}, "ports": [{"port": 80}], **spec}}  # fmt: skip

    ok = service("ClusterIP")
    assert vision.create(ok).ok
    for kind in ("LoadBalancer", "NodePort"):
        refused(vision.create(service(kind)), "LoadBalancer and NodePort")
    refused(vision.create(service("ClusterIP", externalIPs=["203.0.113.7"])), "externalIPs")
    vision.delete("service", ok["metadata"]["name"], "vision")


# ---- row 7: GPUs only in team namespaces (CPU-only work: tests/twin/test_cpu_work.py) -----------------------------------------------------


def test_gpu_pods_are_refused_outside_team_namespaces(metal_twin: Kube) -> None:
    """Even the cluster admin cannot create a GPU pod in a namespace Kueue does not manage (gpufleet's
    cluster-wide guard, scheduler/guard.py), except kube-system and gpu-operator."""
    ns = name("scratch")
    metal_twin.ok("create", "namespace", ns)
    eventually(lambda: metal_twin.attempt("get", "sa", "default", "-n", ns).ok, "the default ServiceAccount")
    refused(metal_twin.create(pod(name("gpu"), ns, {"cpu": "1", GPU: 1}, tolerations=TOLERATE_GPU)),
            "GPU pods must run in a team namespace")  # fmt: skip
    metal_twin.ok("delete", "namespace", ns, "--wait=false")


# ---- row 8: one scheduler for GPUs -----------------------------------------------------------------------------------


def test_gpu_pods_name_the_packing_scheduler(vision: Kube) -> None:
    """Where gpu-binpack runs, a GPU pod naming any other scheduler (or none, on 1.35, where no
    MutatingAdmissionPolicy fills it in) is refused: two schedulers binding the same GPUs would race."""
    for spec in ({}, {"schedulerName": "default-scheduler"}, {"schedulerName": "my-scheduler"}):
        refused(vision.create(pod(name("gpu"), "vision", {"cpu": "1", GPU: 1}, **spec)), "gpu-binpack")
