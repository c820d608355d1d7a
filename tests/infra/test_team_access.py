"""Team members reach an EKS cluster: each role of `teams[].roleArns` becomes one access entry in the team's
groups (the subjects of the namespace's RoleBindings), with no EKS access policy; bad roles are refused by the
spec rules, one line naming the key, exit 2."""

from __future__ import annotations

import copy
import subprocess
import sys
from typing import Any

import pulumi
import pytest
import yaml

from infra import build
from infra.errors import ConfigError
from infra.scheduling import scheduler_inputs
from infra.stackfile import parse_config
from scheduler.namespaces import role_bindings
from tests.conftest import ROOT, load_example
from tests.infra.conftest import Mocks, after_registration

ENTRY = "aws:eks/accessEntry:AccessEntry"
ASSOCIATION = "aws:eks/accessPolicyAssociation:AccessPolicyAssociation"


def _config(stack: str) -> dict[str, Any]:
    return copy.deepcopy(yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())["config"])


def _problems(config: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(config, "test")
    return info.value.problems


@pytest.mark.usefixtures("mocks")
@pulumi.runtime.test
def test_each_team_role_is_an_access_entry_in_the_groups_its_rolebindings_bind(mocks: Mocks) -> Any:
    spec = load_example("example-prod")
    declared = {arn: team for team in spec.teams for arn in team.role_arns}
    assert len(declared) == 2  # the example's two teams with roles

    def check(m: Mocks) -> None:
        entries = {e.inputs["principalArn"]: e for e in m.of_type(ENTRY)}
        admins = set(spec.cluster.admin_role_arns)
        assert set(entries) == set(declared) | admins
        for arn, team in declared.items():
            entry = entries[arn].inputs
            assert entry["type"] == "STANDARD"
            assert entry["clusterName"] == "gpufleet-prod"
            # the entry's groups are exactly the subjects of the team's compiled RoleBindings
            bound = {s["name"] for b in role_bindings(_team_policy(team.name)) for s in b["subjects"]}
            assert set(entry["kubernetesGroups"]) == bound == set(team.groups)
        # no access policy for a team role: only the admins get one
        assert {a.inputs["principalArn"] for a in m.of_type(ASSOCIATION)} == admins

    outputs = build(spec)
    return pulumi.Output.all(after_registration(lambda: check(mocks)), outputs)


def _team_policy(name: str) -> Any:
    policy, _pools = scheduler_inputs(load_example("example-prod"))
    (team,) = [t for t in policy.teams if t.name == name]
    return team


@pytest.mark.parametrize(
    ("mutate", "key", "words"),
    [
        (lambda t, c: t.update(roleArns=["ml-research"]), "teams[1].roleArns[0]", "not an IAM role ARN"),
        (
            lambda t, c: t.update(roleArns=["arn:aws:iam::123456789012:user/alice"]),
            "teams[1].roleArns[0]",
            "not an IAM role ARN",
        ),
        (lambda t, c: t.update(groups=[]), "teams[1].roleArns", "needs gpufleet:teams[1].groups"),
        (
            lambda t, c: t.update(roleArns=c["gpufleet:cluster"]["adminRoleArns"]),
            "teams[1].roleArns[0]",
            "already in gpufleet:cluster.adminRoleArns",
        ),
        (
            lambda t, c: t.update(roleArns=c["gpufleet:teams"][0]["roleArns"]),
            "teams[1].roleArns[0]",
            "already in gpufleet:teams[0].roleArns",
        ),
    ],
    ids=["not-an-arn", "a-user", "no-groups", "an-admin-role", "another-teams-role"],
)
def test_a_bad_team_role_is_refused_naming_its_key(mutate: Any, key: str, words: str) -> None:
    config = _config("example-prod")
    mutate(config["gpufleet:teams"][1], config)
    matching = [p for p in _problems(config) if f"gpufleet:{key}:" in p]
    assert matching and words in matching[0], matching


def test_roles_on_an_existing_cluster_point_to_its_identity_provider() -> None:
    config = _config("metal")
    config["gpufleet:teams"][0]["roleArns"] = ["arn:aws:iam::123456789012:role/ml-research"]
    (problem,) = [p for p in _problems(config) if "roleArns" in p]
    assert (
        problem.startswith("gpufleet:teams[0].roleArns: only on platform aws")
        and "docs/existing.md" in problem
    )


def test_plan_of_a_bad_role_exits_2_with_one_line(tmp_path: Any) -> None:
    doc = yaml.safe_load((ROOT / "Pulumi.example-prod.yaml").read_text())
    doc["config"]["gpufleet:teams"][1]["roleArns"] = ["ml-research"]
    stack = tmp_path / "Pulumi.bad.yaml"
    stack.write_text(yaml.safe_dump(doc))
    done = subprocess.run(
        [sys.executable, "-m", "invoke", "-r", str(ROOT), "plan", "--stack", str(stack), "--out", str(tmp_path)],
        capture_output=True, text=True, check=False, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if "roleArns" in line]
    assert len(lines) == 1 and "gpufleet:teams[1].roleArns[0]" in lines[0], done.stderr
