"""A team member, with only their team's group, on the metal twin: what their access lets them read, and the
`kubectl gpufleet` answers (quota, place in line, the reason, a job's story) as the real API server, Kueue and
scheduler make them.

The member is impersonated (`--as`, `--as-group`: the group an EKS access entry or the identity provider's
groups claim gives them), so the API server's RBAC decides every read the plugin makes. metal: h100 is 4 hosts
x 8 GPUs; vision and nlp each hold 16 of them, borrowing up to 8.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from scheduler.explain import cli
from scheduler.explain.commands import VISIBILITY
from tests.conftest import ROOT
from tests.support import eventually
from tests.twin.kube import Kube, job, name

GPU = "nvidia.com/gpu"
BINPACK = {"schedulerName": "gpu-binpack"}
PRIORITY = "kueue.x-k8s.io/priority-class"
WORKLOADS = "workloads.kueue.x-k8s.io"
PAGE = ROOT / "docs" / "teams.md"


def plugin(kube: Kube, group: str, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """`kubectl gpufleet ARGS` run as a member of `group`, through the twin's own kubectl."""
    code = cli.main(["--kubectl", str(kube.binary), "--kubeconfig", str(kube.kubeconfig),
                     "--as", "alice@example.com", "--as-group", group, *args])  # fmt: skip
    out = capsys.readouterr()
    return code, out.out, out.err


def eight(job_name: str, namespace: str, *, pods: int = 1, priority: str = "default") -> dict[str, Any]:
    """Jobs of 8-GPU pods with their priority class named (on 1.35 a job without the label has priority 0)."""
    return job(job_name, namespace, {"cpu": "8", "memory": "64Gi", GPU: 8}, pod=BINPACK, parallelism=pods,
               labels={PRIORITY: priority})  # fmt: skip


def workload_of(kube: Kube, namespace: str, owner: str) -> dict[str, Any] | None:
    for wl in kube.items(WORKLOADS, namespace):
        if any(ref["name"] == owner for ref in wl["metadata"].get("ownerReferences", [])):
            return wl
    return None


def reserved(kube: Kube, namespace: str, owner: str) -> bool:
    wl = workload_of(kube, namespace, owner) or {}
    return any(c["type"] == "QuotaReserved" and c["status"] == "True"
               for c in wl.get("status", {}).get("conditions", []))  # fmt: skip


def considered(kube: Kube, namespace: str, owner: str) -> bool:
    """Kueue has tried it and written why it waits."""
    wl = workload_of(kube, namespace, owner) or {}
    return any(c["type"] == "QuotaReserved" and c["status"] == "False" and c.get("message")
               for c in wl.get("status", {}).get("conditions", []))  # fmt: skip


def h100_in_use(kube: Kube, queue: str) -> int:
    status = json.loads(kube.ok("get", "clusterqueues.kueue.x-k8s.io", queue, "-o", "json")).get("status", {})
    for flavor in status.get("flavorsUsage", []):
        for resource in flavor["resources"] if flavor["name"] == "h100" else []:
            if resource["name"] == GPU:
                return int(resource.get("total", 0))
    return 0


def normalized(text: str) -> list[str]:
    """Lines without the random suffixes of the jobs' names (`next-3fa2c1`) and trailing spaces, and without
    the order of jobs of one priority submitted within the same second: Kueue breaks that tie by UID
    (pkg/cache/queue/cluster_queue.go:1089), so the positions column and the order of names are left out."""
    lines = [re.sub(r"-[0-9a-f]{6}\b", "-XXXXXX", line).rstrip() for line in text.strip().splitlines()]
    lines = [re.sub(r"^\s+\d+  (job/)", r"   \1", line) for line in lines]
    lines = [re.sub(r"ahead \(([^)]*)\)", lambda m: f"ahead ({', '.join(sorted(m[1].split(', ')))})", line)
             for line in lines]  # fmt: skip
    return sorted(lines)


def recorded(command: str) -> str:
    """The output docs/teams.md records for `command` in its session."""
    for block in re.findall(r"^```text\n(.*?)^```", PAGE.read_text(), re.M | re.S):
        if block.startswith(f"$ {command}\n"):
            return block.split("\n", 1)[1]
    raise AssertionError(f"docs/teams.md records no session of {command!r}")


@pytest.fixture
def full_h100(metal_twin: Kube) -> Iterator[dict[str, str]]:
    """nlp and vision each run 16 H100 GPUs (their quotas, the whole pool); then vision queues more."""
    made: list[tuple[str, str]] = []
    names = {"nlp-a": name("nlp"), "vision-a": name("run"), "over": name("huge"), "low": name("low"),
             "next": name("next")}  # fmt: skip
    try:
        for key, ns in (("nlp-a", "nlp"), ("vision-a", "vision")):
            group = f"{ns}-team"
            assert metal_twin.as_member((group,)).create(eight(names[key], ns, pods=2)).ok
            made.append((ns, names[key]))
            eventually(lambda k=key, n=ns: reserved(metal_twin, n, names[k]), f"{key} admitted", 90)
        vision = metal_twin.as_member(("vision-team",))
        for key, pods, prio in (("over", 4, "default"), ("low", 1, "preemptible"), ("next", 1, "default")):
            assert vision.create(eight(names[key], "vision", pods=pods, priority=prio)).ok
            made.append(("vision", names[key]))
        for key in ("over", "low", "next"):
            eventually(
                lambda k=key: considered(metal_twin, "vision", names[k]), f"Kueue to consider {key}", 90
            )
        for team in ("vision", "nlp"):  # Kueue writes a ClusterQueue's usage a moment after admitting
            eventually(lambda t=team: h100_in_use(metal_twin, t) == 16, f"{team}'s queue to count 16", 60)
        yield names
    finally:
        for ns, job_name in made:
            metal_twin.delete("job", job_name, ns)
        for ns, job_name in made:
            eventually(lambda n=ns, j=job_name: workload_of(metal_twin, n, j) is None, f"{job_name} gone", 90)


def test_quota_queue_and_why_as_a_member(
    metal_twin: Kube, full_h100: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = plugin(metal_twin, "vision-team", "-n", "vision", "quota", capsys=capsys)
    assert code == 0, err
    (h100,) = [line.split() for line in out.splitlines() if line.split()[:2] == ["h100", GPU]]
    # POOL RESOURCE QUOTA IN-USE BORROWED LENDS MAX COHORT-FREE BORROWED-BY
    assert h100[:8] == ["h100", GPU, "16", "16", "0", "0", "24", "0"], out

    shown = out
    code, out, err = plugin(metal_twin, "vision-team", "-n", "vision", "queue", capsys=capsys)
    assert code == 0, err
    assert normalized(recorded("kubectl gpufleet quota -n vision")) == normalized(shown)
    assert normalized(recorded("kubectl gpufleet queue -n vision")) == normalized(out)
    lines = out.splitlines()
    by_job = {n: next(line for line in lines if n in line and "[" in line) for n in full_h100.values()
              if any(n in line and "[" in line for line in lines)}  # fmt: skip
    assert "[OverTeamLimit]" in by_job[full_h100["over"]] and "(24: quota plus borrowing limit)" in out
    assert "[QuotaInUse]" in by_job[full_h100["next"]], out
    assert "uses 16 of its 16 nvidia.com/gpu in pool h100 and the cohort has 0 free; 8 more needed" in out
    assert "[BehindHigherPriority]" in by_job[full_h100["low"]], out
    positions = {n: int(by_job[n].split()[0]) for n in (full_h100["next"], full_h100["low"])}
    assert positions[full_h100["next"]] < positions[full_h100["low"]]  # Kueue's order: priority first
    assert "recorded as an Event" in out

    events = json.loads(metal_twin.ok("get", "events", "-n", "vision", "-o", "json"))["items"]
    ours = [e for e in events if e.get("reportingComponent") == "kubectl-gpufleet"]
    assert {e["reason"] for e in ours} >= {"OverTeamLimit", "QuotaInUse", "BehindHigherPriority"}
    assert all(e["involvedObject"]["kind"] == "Workload" for e in ours)

    code, out, err = plugin(
        metal_twin, "vision-team", "-n", "vision", "why", full_h100["vision-a"], capsys=capsys
    )
    assert code == 0, err
    assert "[Running]" in out or "[Starting]" in out, out
    assert "QuotaReserved=True" in out

    code, out, err = plugin(metal_twin, "vision-team", "-n", "nlp", "why", full_h100["nlp-a"], capsys=capsys)
    assert code == 3 and "forbidden" in err.lower() and full_h100["nlp-a"] not in out, (out, err)
    code, _out, err = plugin(metal_twin, "vision-team", "-n", "vision", "why", "no-such-job", capsys=capsys)
    assert code == 2 and err.startswith("kubectl gpufleet: JOB: no job or Workload named 'no-such-job'"), err


def test_positions_are_kueues_own_from_its_visibility_api(
    metal_twin: Kube, full_h100: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Kueue's visibility API is served on the twin, through the API server's aggregator: a member reads their
    LocalQueue's pending workloads with their own access, `queue` takes its positions from there and says so,
    and a member of another team may not read them (the team's RoleBindings are namespaced: the chart's
    pending-workloads-lq-viewer role reaches members through `edit` and `kueue-batch-user-role`)."""
    path = VISIBILITY.format(ns="vision", lq="default")
    summary = json.loads(metal_twin.as_member(("vision-team",)).ok("get", "--raw", path))
    served = {item["metadata"]["name"]: int(item["positionInClusterQueue"]) for item in summary["items"]}
    waiting = {key: workload_of(metal_twin, "vision", full_h100[key]) for key in ("over", "low", "next")}
    names = {key: str((wl or {}).get("metadata", {}).get("name")) for key, wl in waiting.items()}
    assert set(names.values()) <= set(served), (names, summary)
    assert served[names["next"]] < served[names["low"]]  # priority first, as Kueue orders its queue

    code, out, err = plugin(metal_twin, "vision-team", "-n", "vision", "queue", "--no-events", capsys=capsys)
    assert code == 0, err
    assert "(positions from Kueue's visibility API; 0 is next)" in out, out
    for key, workload in names.items():
        (line,) = [line for line in out.splitlines() if f"/{full_h100[key]} " in line]
        assert int(line.split()[0]) == served[workload], (key, out)

    refused = metal_twin.as_member(("nlp-team",)).attempt("get", "--raw", path)
    assert not refused.ok and "forbidden" in refused.err.lower(), refused
    assert not any(n in refused.out + refused.err for n in names.values())
    # nor through the ClusterQueue's view, which lists every namespace's workloads in it
    whole = "/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/vision/pendingworkloads"
    refused = metal_twin.as_member(("nlp-team",)).attempt("get", "--raw", whole)
    assert not refused.ok and "forbidden" in refused.err.lower(), refused


def test_fragmentation_is_told_as_such(metal_twin: Kube, capsys: pytest.CaptureFixture[str]) -> None:
    """vision runs 8 pods of 3 H100 GPUs (24: its 16 and 8 borrowed); packed two to a node, they leave 2 GPUs
    free on each of the 4 nodes. nlp's one 8-GPU pod is admitted (8 GPUs of the cohort are free) but no node
    has 8 free together: the scheduler's `Insufficient nvidia.com/gpu` becomes the fragmentation reason."""
    spread, whole = name("spread"), name("whole")
    three = {"cpu": "3", "memory": "24Gi", GPU: 3}
    made = [("vision", spread), ("nlp", whole)]
    try:
        assert (
            metal_twin.as_member(("vision-team",))
            .create(job(spread, "vision", three, pod=BINPACK, parallelism=8, labels={PRIORITY: "default"}))
            .ok
        )
        eventually(lambda: reserved(metal_twin, "vision", spread), "the spread job admitted", 90)

        def bound() -> int:
            pods = metal_twin.items("pods", "vision", f"batch.kubernetes.io/job-name={spread}")
            return sum(1 for p in pods if p["spec"].get("nodeName"))

        eventually(lambda: bound() == 8, "its 8 pods bound", 90)
        assert metal_twin.as_member(("nlp-team",)).create(eight(whole, "nlp")).ok
        eventually(lambda: reserved(metal_twin, "nlp", whole), "nlp's 8-GPU job admitted", 90)

        def told() -> str:
            code, out, err = plugin(metal_twin, "nlp-team", "why", whole, "-n", "nlp", capsys=capsys)
            assert code == 0, err
            return out if "[Fragmentation]" in out else ""

        out = eventually(told, "the fragmentation reason", 90)
        assert "no node of pool h100 has 8 free GPUs together" in out and "Insufficient nvidia.com/gpu" in out
    finally:
        for ns, job_name in made:
            metal_twin.delete("job", job_name, ns)
        for ns, job_name in made:
            eventually(lambda n=ns, j=job_name: workload_of(metal_twin, n, j) is None, f"{job_name} gone", 90)
