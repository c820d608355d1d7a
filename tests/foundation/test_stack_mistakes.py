"""The mistakes a new user makes in a stack file, each a copy of an example stack with one change: every one is
one problem naming its key path and what is accepted (or is rightly accepted), and a file with many mistakes
reports them all at once, from every pass (unknown keys, bad values, cross-field rules)."""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.errors import ConfigError
from infra.stackfile import parse_config
from tests.conftest import ROOT

Config = dict[str, Any]
NP, TEAMS, CLUSTER, SLURM = "gpufleet:nodePools", "gpufleet:teams", "gpufleet:cluster", "gpufleet:slurm"


def example(name: str) -> Config:
    return yaml.safe_load((ROOT / f"Pulumi.{name}.yaml").read_text())["config"]


def put(*path: Any, value: Any) -> Callable[[Config], None]:
    def mutate(c: Config) -> None:
        node: Any = c
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value

    return mutate


def same_host_twice(c: Config) -> None:
    c[NP][1]["hosts"].append(c[NP][0]["hosts"][0])


def two_h100_pools(c: Config) -> None:
    c[NP][1].update(gpuModel="H100", gpusPerNode=8, sharing="exclusive")


# (id, stack, mistake, the key path of the one problem, words it must say)
MISTAKES: list[tuple[str, str, Callable[[Config], None], str, str]] = [
    ("gpus-per-node-on-aws", "dev", put(NP, 0, "gpusPerNode", value=8), f"{NP}[0].gpusPerNode", "only for platform existing"),
    ("fractional-quota", "metal", put(TEAMS, 0, "quotas", "h100", value=2.5), f"{TEAMS}[0].quotas.h100", "fractional part"),
    ("groups-not-a-list", "metal", put(TEAMS, 0, "groups", value="vision-team"), f"{TEAMS}[0].groups", "a list of group names, e.g. [vision-team]"),
    ("quotas-as-a-list", "metal", put(TEAMS, 0, "quotas", value=[{"pool": "h100", "gpus": 16}]), f"{TEAMS}[0].quotas", "GPUs per pool name, e.g. {h100: 16, l40s: 4}"),
    ("taint-in-kubectl-form", "example-prod", put(NP, 0, "taints", value=["dedicated=llm:NoSchedule"]), f"{NP}[0].taints[0]", "{key: dedicated, value: llm, effect: NoSchedule}"),
    ("host-in-two-pools", "metal", same_host_twice, f"{NP}[1].hosts[3]", "gpu-h100-01 is already listed at gpufleet:nodePools[0].hosts[0] (pool 'h100')"),
    ("host-twice-in-one-pool", "metal", lambda c: c[NP][0]["hosts"].append("gpu-h100-02"), f"{NP}[0].hosts[4]", "gpu-h100-02 is already listed at gpufleet:nodePools[0].hosts[1]"),
    ("host-in-two-slurm-pools", "metal-slurm", same_host_twice, f"{NP}[1].hosts[3]", "a host belongs to one pool, once"),
    ("idle-after-two-units", "metal", put(TEAMS, 0, "idleAfter", value="2h30m"), f"{TEAMS}[0].idleAfter", "e.g. 30m or 2h"),
    ("memory-in-kubernetes-units", "metal", put(TEAMS, 0, "memoryQuotaGiB", value="128Gi"), f"{TEAMS}[0].memoryQuotaGiB", "a whole number of GiB, e.g. 128"),
    ("cpu-in-millicores", "metal", put(TEAMS, 0, "cpuQuota", value="500m"), f"{TEAMS}[0].cpuQuota", "a whole number of cores, e.g. 32"),
    ("no-gpus-per-node", "metal", put(NP, 0, "gpusPerNode", value=0), f"{NP}[0].gpusPerNode", "greater than or equal to 1"),
    ("zero-weight", "metal", put(TEAMS, 0, "weight", value=0), f"{TEAMS}[0].weight", "greater than 0"),
    ("lending-above-quota", "metal", put(TEAMS, 0, "lendingLimit", value=40), f"{TEAMS}[0].lendingLimit", "exceeds the team's largest quota"),
    ("fqdn-in-capitals-on-kubernetes", "metal", put(NP, 0, "hosts", 0, value="GPU-H100-01.corp.example.com"), f"{NP}[0].hosts[0]", "not a Kubernetes node name: lowercase letters, digits, '-' and '.' (a DNS subdomain); e.g. 'gpu-h100-01.corp.example.com'"),
    ("reserved-pool-label", "metal", put(NP, 0, "labels", value={"gpufleet.io/pool": "x"}), f"{NP}[0].labels.gpufleet.io/pool", "set by gpufleet"),
    ("instance-type-in-capitals", "dev", put(NP, 0, "instanceType", value="G6e.xlarge"), f"{NP}[0].instanceType", "did you mean g6e.xlarge"),
    ("slurm-with-monitoring", "metal-slurm", put(CLUSTER, "monitoring", value={"prometheus": "install"}), f"{CLUSTER}.monitoring", "is a Kubernetes setting (Prometheus, alerts and dashboards; a Slurm stack's usage comes from sacct); Slurm does not use it: remove it"),
    ("slurm-with-fragmentation-aware", "metal-slurm", put("gpufleet:scheduling", value={"placement": {"strategy": "FragmentationAware"}}), "gpufleet:scheduling.placement.strategy", "Slurm places with select/cons_tres"),
    ("slurm-with-reclaim", "metal-slurm", put(TEAMS, 0, "reclaimIdle", value=True), f"{TEAMS}[0].reclaimIdle", "is a Kubernetes setting (idle reclaim deactivates Kueue workloads)"),
    ("slurm-with-cpu-quota", "metal-slurm", put(TEAMS, 1, "cpuQuota", value=16), f"{TEAMS}[1].cpuQuota", "the CPU-only Kueue queue"),
    ("slurm-with-placement-weights", "metal-slurm", put("gpufleet:scheduling", value={"placement": {"weights": {"cpu": 2}}}), "gpufleet:scheduling.placement.weights", "kube-scheduler's scoring"),
    ("slurm-with-node-labels", "metal-slurm", put(NP, 0, "labels", value={"rack": "a"}), f"{NP}[0].labels", "Kubernetes node labels"),
    ("slurm-with-kubeconfig", "metal-slurm", put(CLUSTER, "kubeconfig", value="~/.kube/x"), f"{CLUSTER}.kubeconfig", "Slurm does not use it"),
    ("slurm-on-aws", "dev", put(CLUSTER, "orchestrator", value="slurm"), f"{CLUSTER}.orchestrator", "on aws use kubernetes"),
    ("slurm-in-capitals", "metal", put(CLUSTER, "orchestrator", value="Slurm"), f"{CLUSTER}.orchestrator", "'kubernetes' or 'slurm'"),
    ("slurm-section-on-kubernetes", "metal", put(SLURM, value={"controllerHosts": ["c"], "accountingHost": "d"}), SLURM, "only with gpufleet:cluster.orchestrator: slurm"),
    ("partition-of-no-pool", "metal-slurm", put(SLURM, "partitions", "a100", value={"maxTime": "1:00:00"}), f"{SLURM}.partitions.a100", "no pool named 'a100'"),
    ("max-time-in-days", "metal-slurm", put(SLURM, "partitions", "h100", "maxTime", value="7d"), f"{SLURM}.partitions.h100.maxTime", "a Slurm time limit: minutes, days-hours:minutes:seconds or UNLIMITED, e.g. 7-00:00:00 for 7 days"),
    ("slurm-host-with-a-comma", "metal-slurm", put(NP, 0, "hosts", 0, value="gpu-h100-01,gpu-h100-02"), f"{NP}[0].hosts[0]", "not a host name"),
    ("untested-kueue-release", "dev", put("gpufleet:versions", value={"kueueChart": "0.20.0"}), "gpufleet:versions.kueueChart", "set gpufleet:versions.kueueChartOverride: true"),
    ("fair-sharing-strategies-reversed", "example-prod", put("gpufleet:scheduling", "fairSharingPreemptionStrategies", value=["LessThanInitialShare", "LessThanOrEqualToFinalShare"]), "gpufleet:scheduling.fairSharingPreemptionStrategies", "accepted: [LessThanOrEqualToFinalShare, LessThanInitialShare]; [LessThanOrEqualToFinalShare]; [LessThanInitialShare]"),
    ("fair-sharing-strategy-misspelt", "example-prod", put("gpufleet:scheduling", "fairSharingPreemptionStrategies", value=["LessThanFinalShare"]), "gpufleet:scheduling.fairSharingPreemptionStrategies[0]", "'LessThanOrEqualToFinalShare' or 'LessThanInitialShare'"),
    ("slurm-with-fair-sharing-strategies", "metal-slurm", put("gpufleet:scheduling", value={"fairSharingPreemptionStrategies": ["LessThanInitialShare"]}), "gpufleet:scheduling.fairSharingPreemptionStrategies", "is a Kubernetes setting (Kueue's fair-sharing preemption)"),
    ("no-accounting-host", "metal-slurm", lambda c: c[SLURM].pop("accountingHost"), f"{SLURM}.accountingHost", "required key is missing"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("stack", "mistake", "key", "words"), [m[1:] for m in MISTAKES], ids=[m[0] for m in MISTAKES]
)
def test_a_mistake_is_one_problem_naming_its_key(
    stack: str, mistake: Callable[[Config], None], key: str, words: str
) -> None:  # fmt: skip
    config = copy.deepcopy(example(stack))
    mistake(config)
    with pytest.raises(ConfigError) as info:
        parse_config(config, "test")
    problems = info.value.problems
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{key}: ") and words in problems[0], problems[0]


def test_slurm_refuses_monitoring_and_reclaim_each_by_its_key() -> None:
    """Not "reclaimIdle needs cluster.monitoring.prometheus", which would lead to a setting Slurm ignores."""
    config = example("metal-slurm")
    config[CLUSTER]["monitoring"] = {"prometheus": "install"}
    config[TEAMS][0]["reclaimIdle"] = True
    with pytest.raises(ConfigError) as info:
        parse_config(config, "test")
    assert [p.split(": ")[0] for p in info.value.problems] == [
        f"{CLUSTER}.monitoring",
        f"{TEAMS}[0].reclaimIdle",
    ]
    config[CLUSTER].pop("monitoring")
    with pytest.raises(ConfigError) as info:
        parse_config(config, "test")
    assert len(info.value.problems) == 1 and "prometheus" not in info.value.problems[0]


def test_two_whole_gpu_pools_of_one_model_on_slurm_name_both_pools() -> None:
    config = example("metal-slurm")
    two_h100_pools(config)
    with pytest.raises(ConfigError) as info:
        parse_config(config, "test")
    assert [p.split(":")[1] for p in info.value.problems] == [
        "nodePools[0].gpuModel",
        "nodePools[1].gpuModel",
    ]


@pytest.mark.parametrize(
    ("stack", "mistake"),
    [
        (
            "metal",
            put(NP, 0, "gpusPerNode", value=16),
        ),  # more GPUs than the host has: the host's verify says so
        ("metal", put(TEAMS, 0, "quotas", "h100", value="16")),  # a number in quotes is the number
        ("dev", put(CLUSTER, "monitoring", value={"prometheus": "install", "grafana": True})),
        ("dev", put("gpufleet:versions", value={"kueueChart": "0.20.0", "kueueChartOverride": True})),
    ],
)
def test_what_is_rightly_accepted(stack: str, mistake: Callable[[Config], None]) -> None:
    config = copy.deepcopy(example(stack))
    mistake(config)
    parse_config(config, "test")


def many_mistakes(c: Config) -> None:
    """Unknown keys, bad values and cross-field mistakes in different places of one file."""
    c[CLUSTER]["monitorin"] = True  # unknown key
    c[NP][0]["cpusPerNode"] = 0  # a bad value
    c[NP][0]["cpusPerNod"] = 8  # another unknown key
    c[TEAMS][0]["weight"] = 0  # a bad value in another section
    same_host_twice(c)  # a cross-field rule (first pass)
    c[TEAMS][1]["lendingLimit"] = 40  # a cross-field rule (the pass on resolved facts)


def test_every_mistake_of_a_file_is_reported_at_once() -> None:
    config = example("metal")
    many_mistakes(config)
    with pytest.raises(ConfigError) as info:
        parse_config(config, "test")
    keys = [p.split(": ")[0] for p in info.value.problems]
    assert keys == [
        f"{CLUSTER}.monitorin",
        f"{NP}[0].cpusPerNode",
        f"{NP}[0].cpusPerNod",
        f"{TEAMS}[0].weight",
        f"{NP}[1].hosts[3]",
        f"{TEAMS}[1].lendingLimit",
    ], info.value.problems


def test_the_rules_of_both_passes_are_reported_at_once() -> None:
    """A problem of the first pass (a size) does not hide one the pass on catalog facts finds (a quota)."""
    config = example("metal")
    config[NP][0]["maxSize"] = 9
    config[TEAMS][1]["quotas"]["h100"] = 400
    with pytest.raises(ConfigError) as info:
        parse_config(config, "test")
    assert [p.split(": ")[0] for p in info.value.problems] == [f"{NP}[0].maxSize", f"{TEAMS}[1].quotas.h100"]


def test_a_value_left_out_to_check_the_rest_is_never_blamed_twice() -> None:
    """A bad value is left out (its default stands in) to run the rules on the rest; no rule may then report
    the key as missing, nor judge the rest by a mode the user did not choose."""
    config = example("metal-slurm")
    config[NP][0]["gpusPerNode"] = "eight"
    config[CLUSTER]["orchestrator"] = "Slurm"  # a mode switch: the rules wait for it
    with pytest.raises(ConfigError) as info:
        parse_config(config, "test")
    assert [p.split(": ")[0] for p in info.value.problems] == [
        f"{CLUSTER}.orchestrator",
        f"{NP}[0].gpusPerNode",
    ]


def test_the_command_line_prints_every_mistake_and_exits_2(tmp_path: Path) -> None:
    doc = yaml.safe_load((ROOT / "Pulumi.metal.yaml").read_text())
    many_mistakes(doc["config"])
    stack = tmp_path / "Pulumi.mistakes.yaml"
    stack.write_text(yaml.safe_dump(doc))
    done = subprocess.run([sys.executable, "-m", "invoke", "plan", "--stack", str(stack), "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.startswith(f"error: {stack}: 6 problems:") and "Traceback" not in done.stderr
