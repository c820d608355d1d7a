"""`invoke render` and `invoke metal` as users run them (metal's playbook runs are recorded, not run; its
collection check goes through invoke's MockContext)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from invoke import Exit, MockContext, Result

import tasks
from tests.conftest import ROOT

pytestmark = pytest.mark.xdist_group("build-metal")


def invoke(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_render_writes_one_file_per_object_and_kustomization(tmp_path: Path) -> None:
    result = invoke("render", "--stack", "example-prod", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    kustomization = yaml.safe_load((tmp_path / "kustomization.yaml").read_text())
    listed = kustomization["resources"]
    assert listed == sorted(listed) and len(listed) == len(set(listed))
    for name in listed:
        doc = yaml.safe_load((tmp_path / name).read_text())
        assert doc["kind"] and doc["metadata"]["name"]
    kinds = {yaml.safe_load((tmp_path / n).read_text())["kind"] for n in listed}
    assert {"ClusterQueue", "LocalQueue", "ResourceFlavor", "Namespace", "WorkloadPriorityClass"} <= kinds


def test_render_is_stable(tmp_path: Path) -> None:
    for out in ("a", "b"):
        assert invoke("render", "--stack", "metal", "--out", str(tmp_path / out)).returncode == 0
    first = {
        str(p.relative_to(tmp_path / "a")): p.read_text() for p in (tmp_path / "a").rglob("*") if p.is_file()
    }
    second = {
        str(p.relative_to(tmp_path / "b")): p.read_text() for p in (tmp_path / "b").rglob("*") if p.is_file()
    }
    assert first == second


def test_render_bad_stack_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    config = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())
    config["config"]["gpufleet:scheduling"] = {"waitForPodsReadyTimeout": "2m"}
    stack = tmp_path / "Pulumi.short.yaml"
    stack.write_text(yaml.safe_dump(config))
    result = invoke("render", "--stack", str(stack), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert "gpufleet:scheduling.waitForPodsReadyTimeout" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


TEAM_INPUT = {
    "a team named like another team's CPU queue": (
        {"name": "vision-cpu", "quotas": {}},
        "gpufleet:teams[2].name: 'vision-cpu' is the name of teams[0]'s CPU-only ClusterQueue (vision-cpu)",
    ),
    "a group that means everyone": (
        {"name": "audit", "quotas": {}, "groups": ["system:authenticated"]},
        "gpufleet:teams[2].groups[0]: 'system:authenticated' is a Kubernetes system group",
    ),
}


@pytest.mark.parametrize("task", ["plan", "render"])
@pytest.mark.parametrize("case", sorted(TEAM_INPUT))
def test_bad_team_input_is_refused_before_anything_renders(tmp_path: Path, task: str, case: str) -> None:
    """Refused by the spec rules (scheduler.checks) with the key path, in one line, exit 2: before this rule a
    team `vision-cpu` beside `vision` passed `invoke plan` and crashed `invoke render` with a traceback."""
    team, message = TEAM_INPUT[case]
    config = yaml.safe_load((ROOT / "Pulumi.metal.yaml").read_text())
    config["config"]["gpufleet:teams"].append(team)
    stack = tmp_path / "Pulumi.bad-team.yaml"
    stack.write_text(yaml.safe_dump(config))
    result = invoke(task, "--stack", str(stack), "--out", str(tmp_path / "out"))
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "out").exists()


class Plays:
    """The playbook runs `invoke metal` makes (`infra.metal.run.run_playbook`, here recorded instead of run), each
    as its shell line; every run exits with `exit`."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.exit = 0

    def __call__(self, argv: list[str], env: dict[str, str]) -> int:
        assert env["ANSIBLE_CONFIG"].endswith("ansible/ansible.cfg")
        self.lines.append(shlex.join(argv))
        return self.exit


@pytest.fixture
def plays(monkeypatch: pytest.MonkeyPatch) -> Plays:
    recorded = Plays()
    monkeypatch.setattr("infra.metal.run.run_playbook", recorded)
    return recorded


def _ctx(collection: str = "community.general 11.4.2") -> MockContext:
    return MockContext(run={re.compile(r".*ansible-galaxy collection list.*"): Result(stdout=collection)})


def test_metal_renders_inventory_and_runs_the_playbook(plays: Plays) -> None:
    tasks.metal(_ctx(), stack="metal", check=True, limit="gpu-h100-01")
    command = plays.lines[-1]
    inventory = yaml.safe_load((ROOT / "build/metal/inventory.yml").read_text())
    groups = inventory["gpu_hosts"]["children"]
    assert set(groups) == {"h100", "l40s"}
    assert list(groups["h100"]["hosts"]) == ["gpu-h100-01", "gpu-h100-02", "gpu-h100-03", "gpu-h100-04"]
    assert groups["h100"]["vars"]["gpu_node_verify_expected_count"] == 8
    assert inventory["gpu_hosts"]["vars"]["nvidia_driver_branch"] == "580"
    assert inventory["gpu_hosts"]["vars"]["nvidia_driver_version"] == "580.95.05"
    assert "--check" in command and "gpu-hosts.yml" in command
    # One run per host group the limit reaches, narrowed by it: the play's serial batches are then
    # shares of one group, and a group the limit does not touch gets no run that would match nothing.
    runs = plays.lines
    assert len(runs) == 1 and "--limit 'h100:&gpu-h100-01'" in runs[0]
    assert "nvidia_driver_reboot_allowed" not in command
    assert "invoke metal --stack metal --reboot" in command  # printed when a reboot is pending


def test_metal_reboot_lets_the_play_reboot(plays: Plays) -> None:
    tasks.metal(_ctx(), stack="metal", reboot=True)
    assert '"nvidia_driver_reboot_allowed": true' in plays.lines[-1]


def test_metal_failed_playbook_exits_1(plays: Plays) -> None:
    plays.exit = 2
    with pytest.raises(Exit) as info:
        tasks.metal(_ctx(), stack="metal")
    assert info.value.code == 1 and "exit 2" in str(info.value.message)
    assert "later host groups were not touched" in str(info.value.message)


def test_metal_without_community_general_exits_3_before_running(plays: Plays) -> None:
    with pytest.raises(Exit) as info:
        tasks.metal(_ctx(collection=""), stack="metal")
    assert info.value.code == 3 and "requirements.yml" in str(info.value.message)
    assert not plays.lines
    # Galaxy may be unreachable where PyPI is not; the message names the venv's
    # own tools and the `ansible` release that ships the pinned collection (the Ansible tests take
    # community.general from that same wheel: tests/ansible/community_general.py).
    from tests.ansible.community_general import ANSIBLE_PACKAGE_VERSION

    pinned = yaml.safe_load((ROOT / "ansible/requirements.yml").read_text())["collections"][0]["version"]
    message = str(info.value.message)
    assert f"pip install ansible=={ANSIBLE_PACKAGE_VERSION} (it ships community.general {pinned})" in message
    assert f"{Path(sys.executable).parent}/ansible-galaxy collection install" in message


def test_metal_refuses_aws_stack() -> None:
    with pytest.raises(Exit) as info:
        tasks.metal(MockContext(), stack="dev")
    assert info.value.code == 2 and "existing" in str(info.value.message)


@pytest.mark.parametrize(
    ("limit", "groups"),
    [
        ("l40s", ["l40s"]),
        ("gpu-l40s-02", ["l40s"]),
        ("gpu-h100-01,gpu-l40s-03", ["h100", "l40s"]),
        ("gpu-*-01", ["h100", "l40s"]),
        ("all:!h100", ["l40s"]),
    ],
)
def test_metal_limit_reaches_any_host_group(limit: str, groups: list[str], plays: Plays) -> None:
    """`--limit l40s` (the second host group) or one of its hosts runs only the groups the limit reaches: a run
    of `h100:&l40s` would be refused by ansible-playbook ("Specified inventory, host pattern and/or --limit
    leaves us with no hosts to target", exit 1) and stop the rollout before the group it is meant for. The
    pattern is judged by Ansible's own InventoryManager (Ansible docs, "Patterns: targeting hosts and groups": `,` union, `*` wildcard,
    `:!` exclusion, `:&` intersection)."""
    tasks.metal(_ctx(), stack="metal", check=True, limit=limit)
    runs = plays.lines
    assert [re.search(r"--limit '([a-z0-9]+):&", run).group(1) for run in runs] == groups  # type: ignore[union-attr]


def test_metal_limit_matching_no_host_is_refused(plays: Plays) -> None:
    """`--limit gpu_h100` (the group name of ansible/inventory/example.yml, not of the stack's inventory)
    matches no host: it is refused before any run, exit 2, naming the groups and hosts the stack does have."""
    with pytest.raises(Exit) as exited:
        tasks.metal(_ctx(), stack="metal", check=True, limit="gpu_h100")
    assert exited.value.code == 2
    err = str(exited.value.message)
    assert "--limit 'gpu_h100' matches no host" in err and "h100, l40s" in err and "gpu-l40s-03" in err
    assert not plays.lines


def test_docs_limit_examples_target_hosts_of_the_metal_stack(plays: Plays) -> None:
    """Every `invoke metal --stack metal --limit X` example in docs/bare-metal.md reaches at least one host of
    Pulumi.metal.yaml (not a group only ansible/inventory/example.yml has, such as `gpu_h100`)."""
    text = (ROOT / "docs/bare-metal.md").read_text()
    limits = re.findall(r"invoke metal --stack metal --limit (\S+)", text)
    assert len(limits) >= 2
    for limit in limits:
        plays.lines.clear()
        tasks.metal(_ctx(), stack="metal", check=True, limit=limit)
        assert plays.lines, limit


def test_metal_on_a_slurm_stack_prepares_the_gpu_hosts_then_runs_the_slurm_playbook(plays: Plays) -> None:
    """A Slurm stack: the driver play per host group first (a driver change drains the host's Slurm node, not a
    Kubernetes one), then playbooks/slurm-cluster.yml over an inventory whose roles read the rendered
    configuration; the pool's gpusPerNode, CPUs and RealMemory are what each GPU host must have."""
    tasks.metal(_ctx(), stack="metal-slurm", check=True)
    runs = plays.lines
    assert [("slurm-cluster.yml" in r, "gpu-hosts.yml" in r) for r in runs] == [
        (False, True), (False, True), (True, False)]  # fmt: skip
    assert all("--check" in r for r in runs)
    gpu = yaml.safe_load((ROOT / "build/metal-slurm/inventory.yml").read_text())
    assert gpu["gpu_hosts"]["vars"]["nvidia_driver_drain_enabled"] is True
    assert gpu["gpu_hosts"]["vars"]["nvidia_driver_drain_scheduler"] == "slurm"
    slurm = yaml.safe_load((ROOT / "build/metal-slurm/slurm-inventory.yml").read_text())
    assert slurm["slurm_accounting"]["hosts"] == {
        "slurm-db-01": {"slurm_controller_slurmdbd": True, "slurm_controller_slurmctld": False}}  # fmt: skip
    assert slurm["slurm_controllers"]["hosts"] == {
        "slurm-ctl-01": {"slurm_controller_slurmdbd": False, "slurm_controller_slurmctld": True}}  # fmt: skip
    assert slurm["slurm_nodes"]["children"]["slurm_h100"]["vars"] == {
        "slurm_node_expected_gpus": 8, "slurm_node_cpus": 192, "slurm_node_real_memory": 2048 * 1024 * 95 // 100}  # fmt: skip
    config = Path(slurm["all"]["vars"]["slurm_common_config_dir"])
    assert sorted(p.name for p in config.iterdir()) == [
        "cgroup.conf",
        "gpufleet-healthcheck",
        "gres.conf",
        "job_submit.lua",
        "sacctmgr.sh",
        "slurm.conf",
    ]


def test_metal_on_a_slurm_stack_with_bad_config_exits_2_and_runs_nothing(tmp_path: Path) -> None:
    """Bad input stops before any host is touched: the key path, exit 2, no playbook run."""
    doc = yaml.safe_load((ROOT / "Pulumi.metal-slurm.yaml").read_text())
    doc["config"]["gpufleet:slurm"]["partitions"]["a100"] = {"maxTime": "1:00:00"}
    stack = tmp_path / "Pulumi.bad-slurm.yaml"
    stack.write_text(yaml.safe_dump(doc))
    result = invoke("metal", "--stack", str(stack))
    assert result.returncode == 2, result.stderr
    assert "gpufleet:slurm.partitions.a100" in result.stderr and "Traceback" not in result.stderr
