"""The two causes a team member meets on a pool the autoscaler provisions: waiting for nodes, and no topology
domain, told by `kubectl gpufleet why`/`queue` from what the real Kueue v0.19.2 writes on the twin.

example-prod's EFA pool `h100-train` (the `<team>-topology` ClusterQueues) reaches its nodes through Kueue's
ProvisioningRequest admission check, answered by the cluster-autoscaler 1.35.2 stand-in (twin.autoscaler,
best-effort-atomic-scale-up); here the pool may hold 2 nodes (`oversubscribe`: team-llm's 24 GPUs of quota
exceed its 16), so a job within the quota can still find no capacity. Its nodes' lowest network layer
alternates between two domains in launch order (twin.nodes), so its two nodes never share one.

The member (llm-engineers, only their team's RBAC) may not read ProvisioningRequests: what they learn of the
request is what Kueue copies into the Workload's admission check, and its `SecondPassFailed` Events.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT
from tests.support import eventually
from tests.twin.conftest import stack_variant, start_twin
from tests.twin.kube import Kube, job, name
from tests.twin.test_team_console import GPU, PAGE, normalized, plugin, workload_of

NS, GROUP = "team-llm", "llm-engineers"
POOL, MAX_NODES = "h100-train", 2
LAYER3 = "topology.k8s.aws/network-node-layer-3"
NODE = {"cpu": "96", "memory": "1000Gi", GPU: 8, "vpc.amazonaws.com/efa": 32}  # one p5.48xlarge per pod


@pytest.fixture(scope="module")
def small_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    doc = yaml.safe_load((ROOT / "Pulumi.example-prod.yaml").read_text())
    pools = [{**p, "maxSize": MAX_NODES, "oversubscribe": True} if p["name"] == POOL else p
             for p in doc["config"]["gpufleet:nodePools"]]  # fmt: skip
    twin = start_twin(tmp_path_factory, stack_variant(tmp_path_factory, "example-prod", "small-pool",
                                                       nodePools=pools))  # fmt: skip
    try:
        yield Kube.of(twin)
    finally:
        twin.stop()


@pytest.fixture
def jobs(small_pool: Kube) -> Iterator[list[str]]:
    """The names of the jobs a test submits; each is deleted, and its Workload gone, after the test."""
    made: list[str] = []
    yield made
    for job_name in made:
        small_pool.delete("job", job_name, NS)
    for job_name in made:
        eventually(lambda j=job_name: workload_of(small_pool, NS, j) is None, f"{job_name} gone", 90)


def submit(kube: Kube, jobs: list[str], prefix: str, pods: int, **extra: Any) -> str:
    job_name = name(prefix)
    assert (
        kube.as_member((GROUP,))
        .create(job(job_name, NS, NODE, queue="topology", parallelism=pods, **extra))
        .ok
    )
    jobs.append(job_name)
    return job_name


def why(kube: Kube, job_name: str, capsys: pytest.CaptureFixture[str]) -> str:
    code, out, err = plugin(kube, GROUP, "-n", NS, "why", job_name, "--no-events", capsys=capsys)
    assert code == 0, err
    return out


def queue_line(kube: Kube, job_name: str, capsys: pytest.CaptureFixture[str]) -> str:
    code, out, err = plugin(kube, GROUP, "-n", NS, "queue", capsys=capsys)
    assert code == 0, err
    (line,) = [line for line in out.splitlines() if f"/{job_name} " in line]
    return line


def page_session(command: str) -> str:
    """The output docs/teams.md records for `command`, a job's name in it with any suffix (`wide-56deb7`)."""
    pattern = re.escape(command).replace("XXXXXX", "[0-9a-f]{6}")
    for block in re.findall(r"^```text\n(.*?)^```", PAGE.read_text(), re.M | re.S):
        if re.match(rf"\$ {pattern}\n", block):
            return str(block.split("\n", 1)[1])
    raise AssertionError(f"docs/teams.md records no session of {command!r}")


def same(text: str) -> list[str]:
    """`normalized`, also without the Workload's own suffix (`job-wide-56deb7-43610`) and the time Kueue asks
    the autoscaler again (the booking of a provisioned gang may run out while it waits)."""
    text = re.sub(r"(-XXXXXX|-[0-9a-f]{6})-[0-9a-z]{5}\b", r"\1-XXXXX", text)
    text = re.sub(r"; the autoscaler's booking ran out meanwhile and Kueue asks again at \S+", "", text)
    return normalized(text)


def test_a_member_may_not_read_provisioning_requests(small_pool: Kube) -> None:
    """What the answers below rest on: the team's role reads Workloads and Events, not the requests."""
    member = small_pool.as_member((GROUP,))
    refused = member.attempt("auth", "can-i", "list", "provisioningrequests.autoscaling.x-k8s.io", "-n", NS)
    assert refused.out.strip() == "no", refused
    assert member.ok("auth", "can-i", "list", "events", "-n", NS).strip() == "yes"


def test_no_capacity_for_the_whole_job_is_waiting_for_nodes(
    small_pool: Kube, jobs: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Three one-node pods: within team-llm's quota (24 GPUs), but the pool may hold two nodes, so the
    autoscaler finds no capacity for all of them at once (`CapacityIsNotFound`) and Kueue keeps the check
    Pending with the request's message, the quota reserved: `why` and `queue` say it waits for nodes, and why."""
    wide = submit(small_pool, jobs, "wide", 3)

    def told() -> str:
        out = why(small_pool, wide, capsys)
        return out if "Capacity is not found" in out else ""

    nodes_before = len(small_pool.items("nodes", selector=f"gpufleet.io/pool={POOL}"))
    out = eventually(told, "the no-capacity answer", 90)
    assert "[WaitingForNodes] waiting for nodes: the autoscaler found no capacity in pool h100-train for all " \
           "its 3 pods at once" in out, out  # fmt: skip
    assert "admission check gpufleet-provisioning: Pending Capacity is not found, CA will try to find it later." \
           in out, out  # fmt: skip
    assert "QuotaReserved=True" in out and "Admitted=True" not in out
    line = queue_line(small_pool, wide, capsys)
    assert line.split()[0] == "-" and "[WaitingForNodes]" in line and "no capacity in pool h100-train" in line
    assert same(page_session("kubectl gpufleet why wide-XXXXXX -n team-llm")) == same(out)
    code, eta, err = plugin(small_pool, GROUP, "-n", NS, "eta", wide, "--no-events", capsys=capsys)
    assert code == 0 and "past the line, its quota reserved" in eta and "[WaitingForNodes]" in eta, (eta, err)
    # all or nothing: the autoscaler added no node for part of the job
    assert len(small_pool.items("nodes", selector=f"gpufleet.io/pool={POOL}")) == nodes_before
    assert not [p for p in small_pool.items("pods", NS) if p["metadata"]["name"].startswith(wide)]


def test_a_job_waits_for_its_nodes_then_runs(
    small_pool: Kube, jobs: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """One one-node pod: the autoscaler provisions a node; until it has joined and Kueue has placed the pod
    (its topology assignment is delayed until then), every answer given while the Workload is not admitted is
    that it waits for nodes, never that it is admitted and starting; then it runs."""
    one = submit(small_pool, jobs, "one", 1)
    answers: list[str] = []

    def running() -> bool:
        out = why(small_pool, one, capsys)
        answers.append(out)
        return "[Running]" in out

    eventually(running, "the job running on its new node", 120, every=0.2)
    waiting = [a for a in answers if "Admitted=True" not in a]
    assert waiting, answers  # it was seen waiting at least once
    for out in waiting:
        assert "[WaitingForNodes] waiting for nodes:" in out and "pool h100-train" in out, out
    node = small_pool.items("pods", NS, f"batch.kubernetes.io/job-name={one}")[0]["spec"]["nodeName"]
    assert small_pool.get("node", node)["metadata"]["labels"]["gpufleet.io/pool"] == POOL


def test_a_gang_no_domain_can_hold_is_told_so(
    small_pool: Kube, jobs: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A gang of two one-node pods that requires one network-node-layer-3 domain: the autoscaler provisions
    the pool's two nodes (or finds them), which sit on different domains; Kueue's second pass cannot place the
    gang (`topology "h100-train" allows to fit only 1 out of 2 pod(s)`, a SecondPassFailed Event) and the
    Workload keeps its quota, unadmitted: `why` and `queue` name the topology domain."""
    gang = submit(
        small_pool, jobs, "gang", 2, annotations={"kueue.x-k8s.io/podset-required-topology": LAYER3}
    )

    def told() -> str:
        out = why(small_pool, gang, capsys)
        return out if "[NoTopologyDomain]" in out else ""

    out = eventually(told, "the topology-domain answer", 120)
    assert "no domain of topology h100-train has room for all its pods together (only 1 of its 2 pods fit in " \
           "any one)" in out, out  # fmt: skip
    assert "Admitted=True" not in out
    code, listed, err = plugin(small_pool, GROUP, "-n", NS, "queue", "--no-events", capsys=capsys)
    assert code == 0, err
    assert same(page_session("kubectl gpufleet queue -n team-llm")) == same(listed)
    line = queue_line(small_pool, gang, capsys)
    assert line.split()[0] == "-" and "[NoTopologyDomain]" in line, line

    def domains() -> set[str]:
        return {
            n["metadata"]["labels"][LAYER3]
            for n in small_pool.items("nodes", selector=f"gpufleet.io/pool={POOL}")
        }

    eventually(lambda: len(domains()) == MAX_NODES, "the pool's two nodes, one on each domain", 60)
    assert "[NoTopologyDomain]" in why(small_pool, gang, capsys)  # with both nodes there, still no domain
