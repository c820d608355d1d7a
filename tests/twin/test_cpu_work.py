"""CPU-only work on the twin: its own queue and quota, never the cores that come with GPUs, routed there by
the admission policies (scheduler/queue_routing.py).

metal (1.35): teams `vision` and `nlp`, each with the default CPU-only allowance (32 cores, 128 GiB) in its
`<team>-cpu` ClusterQueue; their GPU queues hold only the cores and memory of their GPU quota (`gpu-cores`).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from scheduler.kueue import CPU_QUEUE
from scheduler.queue_routing import QUEUE_LABEL
from tests.support import eventually
from tests.twin.kube import Kube, job, name, pod
from tests.twin.test_team_rules import BINPACK, GPU, TOLERATE_GPU, condition, pods_of, refused, workload_of


@pytest.fixture(scope="module")
def vision(metal_twin: Kube) -> Kube:
    return metal_twin.as_member(("vision-team",))


def flavors(wl: dict[str, Any]) -> dict[str, str]:
    return wl["status"]["admission"]["podSetAssignments"][0]["flavors"]


def test_cpu_only_work_cannot_take_the_cores_that_come_with_gpus(vision: Kube, metal_twin: Kube) -> None:
    """Five 16-core CPU jobs: the `cpu` queue admits what the team's allowance and the other team's idle
    allowance hold (Kueue borrows within the cohort, docs "Cluster Queue"), 32 + 32 cores, and queues the rest,
    though the team's GPU queue has hundreds of cores of its GPUs unused; a GPU job then still gets the cores
    its GPUs come with. One quota for both (allowance + GPU cores, 480 cores for vision) would admit all five
    onto the few untainted nodes and leave the GPU job short."""
    jobs = [name("cpu") for _ in range(5)]
    for j in jobs:
        assert vision.create(job(j, "vision", {"cpu": "16", "memory": "8Gi"}, queue=CPU_QUEUE)).ok
    eventually(lambda: all(workload_of(metal_twin, "vision", j) for j in jobs), "the Workloads")

    def settled() -> tuple[list[str], list[str]] | None:
        admitted = [j for j in jobs if condition(workload_of(metal_twin, "vision", j), "Admitted")]
        pending = [j for j in jobs if j not in admitted]
        if len(admitted) < 4:
            return None
        return admitted, pending

    admitted, pending = eventually(settled, "the CPU queue to admit what its quota holds")
    assert len(admitted) == 4 and len(pending) == 1
    for j in admitted:
        wl = workload_of(metal_twin, "vision", j)
        assert wl["status"]["admission"]["clusterQueue"] == "vision-cpu"
        assert flavors(wl) == {"cpu": "cpu-only", "memory": "cpu-only"}
    waiting = workload_of(metal_twin, "vision", pending[0])
    assert not condition(waiting, "QuotaReserved")

    train = name("train")
    gpu_job = job(train, "vision", {"cpu": "96", "memory": "512Gi", GPU: 4}, pod=BINPACK)
    assert vision.create(gpu_job).ok
    eventually(
        lambda: condition(workload_of(metal_twin, "vision", train), "Admitted"), "the GPU job's admission"
    )
    wl = workload_of(metal_twin, "vision", train)
    assert wl["status"]["admission"]["clusterQueue"] == "vision"
    assert flavors(wl) == {"cpu": "gpu-cores", "memory": "gpu-cores", GPU: "h100"}
    for j in [*jobs, train]:
        vision.delete("job", j, "vision")


def test_cpu_pods_land_on_untainted_nodes(vision: Kube, metal_twin: Kube) -> None:
    """The `cpu-only` flavor adds no toleration: the pod is bound to an untainted node (kubernetes.io "Taints
    and Tolerations": a NoSchedule taint keeps pods that do not tolerate it off the node)."""
    batch = name("cpu")
    assert vision.create(job(batch, "vision", {"cpu": "2", "memory": "4Gi"}, queue=CPU_QUEUE)).ok
    bound = eventually(
        lambda: [p for p in pods_of(metal_twin, "vision", batch) if p["spec"].get("nodeName")],
        "the CPU pod to be bound",
    )
    assert bound[0]["spec"]["nodeName"].startswith("twin-cpu-")
    vision.delete("job", batch, "vision")


@pytest.mark.parametrize("queue", [None, "default", "topology"])
def test_a_cpu_only_job_outside_the_cpu_queue_is_refused(vision: Kube, queue: str | None) -> None:
    """On 1.35 nothing fills the queue in (no MutatingAdmissionPolicy): a CPU-only job that names no queue (Kueue's
    webhook then gives it `default`, LocalQueueDefaulting) or a GPU queue is refused with the label to set."""
    refused(
        vision.create(job(name("cpu"), "vision", {"cpu": "1"}, queue=queue)), f"{QUEUE_LABEL}: {CPU_QUEUE}"
    )


def test_a_gpu_job_in_the_cpu_queue_is_refused(vision: Kube) -> None:
    refused(
        vision.create(job(name("gpu"), "vision", {"cpu": "1", GPU: 1}, queue=CPU_QUEUE, pod=BINPACK)),
        "cannot use the 'cpu' queue",
    )


def test_bare_cpu_pods_are_routed_and_a_jobs_pods_are_not(vision: Kube, metal_twin: Kube) -> None:
    """A bare pod is checked itself; a Job's pods (owned by it) are not, their Job was."""
    refused(vision.create(pod(name("bare"), "vision", {"cpu": "1"})), CPU_QUEUE)
    labelled = pod(name("bare"), "vision", {"cpu": "1"}, metadata={"labels": {QUEUE_LABEL: CPU_QUEUE}})
    made = vision.attempt("create", "--dry-run=server", "-f", "-", "-o", "json", stdin=json.dumps(labelled))
    assert made.ok, made.err


def test_a_zero_gpu_request_is_cpu_work(vision: Kube, metal_twin: Kube) -> None:
    """`nvidia.com/gpu: 0` asks for no GPU (a Helm chart rendering `{{ .Values.gpus }}` with 0 writes it): such
    a job may neither tolerate the GPU taint nor use the GPU queue's cores, which are on GPU nodes."""
    zero = {"cpu": "16", "memory": "8Gi", GPU: 0}
    tolerating = job(name("zero"), "vision", zero, pod={**BINPACK, "tolerations": TOLERATE_GPU})
    refused(vision.create(tolerating), "without a GPU request")
    refused(vision.create(job(name("zero"), "vision", zero, pod=BINPACK)), f"{QUEUE_LABEL}: {CPU_QUEUE}")
    in_cpu = job(name("zero"), "vision", zero, queue=CPU_QUEUE)
    assert vision.create(in_cpu).ok
    eventually(lambda: condition(workload_of(metal_twin, "vision", in_cpu["metadata"]["name"]), "Admitted"),
               "the zero-GPU job's admission in the cpu queue")  # fmt: skip
    assert flavors(workload_of(metal_twin, "vision", in_cpu["metadata"]["name"]))["cpu"] == "cpu-only"
    vision.delete("job", in_cpu["metadata"]["name"], "vision")


def test_cores_cannot_strand_another_teams_guaranteed_gpus(vision: Kube, metal_twin: Kube) -> None:
    """vision runs its 16 guaranteed H100s on two hosts; cores-heavy pods aimed at the other two hosts (190 of
    192 cores with no GPU, or with one GPU) would leave nlp's admitted 16-GPU job Pending with every quota
    respected (Kueue admits by quota, with no view of nodes). Each is refused: a GPU pod asks at most 24 cores
    and 256 GiB per GPU there, and CPU work cannot tolerate the GPU taint. nlp's job is then bound in full."""
    own = job(name("own"), "vision", {"cpu": "8", "memory": "64Gi", GPU: 8}, pod=BINPACK, parallelism=2)
    assert vision.create(own).ok
    eventually(lambda: len([p for p in pods_of(metal_twin, "vision", own["metadata"]["name"])
                            if p["spec"].get("nodeName")]) == 2, "vision's 16 GPUs bound")  # fmt: skip
    pinned = {**BINPACK, "tolerations": TOLERATE_GPU, "nodeSelector": {"gpufleet.io/pool": "h100"}}
    for ask, words in (({"cpu": "190", "memory": "64Gi", GPU: 0}, "tolerates the nvidia.com/gpu=true taint"),
                       ({"cpu": "190", "memory": "64Gi", GPU: 1}, "more cores or memory per GPU")):  # fmt: skip
        refused(vision.create(job(name("heavy"), "vision", ask, pod=pinned)), words)
        refused(vision.create(pod(name("heavy"), "vision", ask, **pinned)), words)
    nlp = metal_twin.as_member(("nlp-team",), user="bob@example.com")
    theirs = job(name("theirs"), "nlp", {"cpu": "8", "memory": "64Gi", GPU: 8}, pod=BINPACK, parallelism=2)
    assert nlp.create(theirs).ok
    eventually(lambda: len([p for p in pods_of(metal_twin, "nlp", theirs["metadata"]["name"])
                            if p["spec"].get("nodeName")]) == 2, "nlp's guaranteed 16 GPUs bound", 90)  # fmt: skip
    vision.delete("job", own["metadata"]["name"], "vision")
    nlp.delete("job", theirs["metadata"]["name"], "nlp")
