"""`invoke deploy | preview | destroy | outputs | kubeconfig` as a user runs them, without a Pulumi CLI.

Every prerequisite fails at once with one line and the right exit code, before the engine (or anything that
writes state) starts. Where a test needs a `pulumi` on PATH to get past the CLI check, the one on PATH is a
tripwire: it records that it was called, and each test asserts it never was.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from infra.deploy import INSTALL_HINT
from tests.preflight.conftest import isolate_aws_env
from tests.preflight.fakeaws import FakeAws
from tests.preflight.helpers import TaskResult, invoke, run_task, stack_doc, write_stack

LIFECYCLE = [
    ("deploy", "--stack", "dev"),
    ("preview", "--stack", "dev"),
    ("destroy", "--stack", "dev", "--yes"),
    ("outputs", "--stack", "dev"),
    ("kubeconfig", "--stack", "dev"),
]


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """Fake AWS keys, a passphrase, and a PATH without any `pulumi`."""
    isolate_aws_env(monkeypatch, tmp_path)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "test-only")
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    return monkeypatch


@pytest.fixture
def tripwire(env: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A `pulumi` on PATH that records being called; returns the record's path."""
    record = tmp_path / "pulumi-was-called"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "pulumi"
    exe.write_text(f'#!/bin/sh\necho "$@" >> {record}\nexit 97\n')
    exe.chmod(0o755)
    env.setenv("PATH", str(bindir))
    return record


def one_error_line(result: TaskResult | subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_missing_pulumi_cli_as_a_user_sees_it(env: pytest.MonkeyPatch) -> None:
    result = invoke("deploy", "--stack", "dev")  # a real process: exit code and stderr as the shell sees them
    assert result.returncode == 3
    assert one_error_line(result) == f"error: {INSTALL_HINT}"


@pytest.mark.parametrize("args", LIFECYCLE, ids=[a[0] for a in LIFECYCLE])
def test_missing_pulumi_cli_exits_3_with_install_hint(
    env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: tuple[str, ...]
) -> None:
    result = run_task(capsys, *args)
    assert result.returncode == 3
    line = one_error_line(result)
    assert line.startswith("error: the Pulumi CLI is not installed")
    assert "https://www.pulumi.com/docs/install/" in line


def test_missing_passphrase_exits_3(
    tripwire: Path, env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    env.delenv("PULUMI_CONFIG_PASSPHRASE")
    result = run_task(capsys, "preview", "--stack", "dev")
    assert result.returncode == 3
    assert one_error_line(result).startswith("error: PULUMI_CONFIG_PASSPHRASE is not set")
    assert not tripwire.exists()


def test_pulumi_cloud_backend_needs_no_passphrase_but_credentials(
    tripwire: Path, env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    env.delenv("PULUMI_CONFIG_PASSPHRASE")
    env.delenv("AWS_ACCESS_KEY_ID")
    result = run_task(capsys, "preview", "--stack", "dev", "--backend", "https://api.pulumi.com")
    assert result.returncode == 3
    assert one_error_line(result).startswith("error: AWS credentials not found: set AWS_PROFILE")
    assert not tripwire.exists()


@pytest.mark.parametrize("task", ["deploy", "preview", "destroy"])
def test_missing_aws_credentials_exits_3(
    tripwire: Path, env: pytest.MonkeyPatch, task: str, capsys: pytest.CaptureFixture[str]
) -> None:
    env.delenv("AWS_ACCESS_KEY_ID")
    env.delenv("AWS_SECRET_ACCESS_KEY")
    extra = ("--yes",) if task == "destroy" else ()
    result = run_task(capsys, task, "--stack", "dev", *extra)
    assert result.returncode == 3
    assert one_error_line(result).startswith("error: AWS credentials not found")
    assert not tripwire.exists()


def test_bad_config_exits_2_before_anything(
    tripwire: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = stack_doc("dev")
    doc["config"]["gpufleet:nodePools"][0]["maxSize"] = -1
    path = write_stack(tmp_path, "broken", doc)
    state = tmp_path / "state"
    result = run_task(capsys, "deploy", "--stack", str(path), "--backend", f"file://{state}")
    assert result.returncode == 2
    assert "gpufleet:nodePools[0].maxSize" in one_error_line(result)
    assert not state.exists()
    assert not tripwire.exists()


def test_stack_file_outside_the_project_exits_2(
    tripwire: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_stack(tmp_path, "elsewhere", stack_doc("dev"))
    result = run_task(capsys, "preview", "--stack", str(path))
    assert result.returncode == 2
    assert "Pulumi reads Pulumi.elsewhere.yaml from the project folder" in one_error_line(result)
    assert not tripwire.exists()


def test_bad_backend_url_exits_2(tripwire: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_task(capsys, "outputs", "--stack", "dev", "--backend", "ftp://state")
    assert result.returncode == 2
    assert "--backend 'ftp://state': not a Pulumi state backend URL; accepted:" in one_error_line(result)
    assert not tripwire.exists()


def test_destroy_needs_yes(tripwire: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_task(capsys, "destroy", "--stack", "dev")
    assert result.returncode == 2
    assert "rerun with --yes to confirm" in one_error_line(result)
    assert not tripwire.exists()


def test_deploy_runs_preflight_first_and_stops_on_errors(
    tripwire: Path, aws: FakeAws, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing seeded: no quotas, AMIs or reservations, so preflight fails and Pulumi is never started."""
    assert os.environ["AWS_ENDPOINT_URL"] == aws.url
    aws.seed_quota("L-1216C47A", 0)
    aws.seed_quota("L-DB2E81BA", 0)
    result = run_task(capsys, "deploy", "--stack", "dev")
    assert result.returncode == 1
    assert "Preflight for stack 'dev'" in result.stdout
    # two quotas, the GPU and system AMIs, the monitoring add-on, dev's Kubernetes minor (the account's EKS lists
    # no version), and this machine outside dev's publicCidrs
    assert one_error_line(result).startswith("error: preflight found 7 error(s) for stack 'dev'")
    assert "EKS does not list Kubernetes 1.35" in result.stdout
    assert not tripwire.exists()


def test_outputs_dash_h_is_help_not_show_secrets(tripwire: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`-h` is help, as for kubectl and pulumi; invoke's automatic short flag would make it `--show-secrets`,
    printing secrets to whoever asked for help."""
    result = run_task(capsys, "outputs", "-h")
    assert result.returncode == 0
    assert "--show-secrets" in result.stdout and "Usage:" in result.stdout
    assert not tripwire.exists()
