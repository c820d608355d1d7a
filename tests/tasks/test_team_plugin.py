"""`kubectl gpufleet` as a user meets it before any cluster answers: the console script the package installs
(kubectl finds `kubectl-gpufleet` on PATH), and bad arguments or a missing kubectl as one line with the README's
exit codes. The answers themselves are checked on the twin (tests/twin/test_team_console.py)."""

from __future__ import annotations

import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from scheduler.explain import cli
from tests.conftest import ROOT


def plugin(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "scheduler.explain.cli", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip


def test_the_package_installs_the_kubectl_plugin() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, function = scripts["kubectl-gpufleet"].partition(":")
    main = getattr(importlib.import_module(module), function)
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["why"], "the following arguments are required: JOB"),
        (["queue", "--nosuch"], "unrecognized arguments: --nosuch"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args: list[str], said: str) -> None:
    done = plugin(*args)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and said in done.stderr, done.stderr


def test_no_kubectl_exits_3_naming_it() -> None:
    done = plugin("--kubectl", "/nonexistent/kubectl", "-n", "vision", "quota")
    assert done.returncode == 3 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        "kubectl gpufleet: kubectl not found (/nonexistent/kubectl): install it, or pass --kubectl PATH"
    )


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["eta"], "kubectl gpufleet: eta: give JOB or -f FILE (one of them)"),
        (["eta", "train", "-f", "job.yaml"], "kubectl gpufleet: eta: give JOB or -f FILE (one of them)"),
        (
            ["eta", "-f", "/nonexistent/job.yaml"],
            "kubectl gpufleet: -f /nonexistent/job.yaml: cannot read it as YAML",
        ),
    ],
)
def test_eta_takes_a_job_or_a_manifest(args: list[str], said: str) -> None:
    done = plugin("--kubectl", "/nonexistent/kubectl", *args)
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(said), done.stderr


def test_eta_of_a_manifest_that_is_not_one_object(tmp_path: Path) -> None:
    two = tmp_path / "two.yaml"
    two.write_text("kind: Job\n---\nkind: Job\n")
    done = plugin("--kubectl", "/nonexistent/kubectl", "eta", "-f", str(two))
    assert done.returncode == 2
    assert done.stderr.strip() == f"kubectl gpufleet: -f {two}: expected one Job object, found 2 documents"


def test_the_invoke_tasks_say_the_same() -> None:
    done = subprocess.run([sys.executable, "-m", "invoke", "why"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == 2 and "why" in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["-n", "vision", "--as-group", "vision-team", "why", "train"],
        ["why", "train", "-n", "vision", "--as-group", "vision-team"],
    ],
)
def test_flags_go_before_or_after_the_subcommand(argv: list[str]) -> None:
    """kubectl users write `kubectl gpufleet why JOB -n NS` as they write `kubectl get pods -n NS`."""
    args = cli.parser().parse_args(argv)
    assert (args.command, args.job, args.namespace, args.as_group) == (
        "why",
        "train",
        "vision",
        ["vision-team"],
    )
    assert cli.kubectl_of(args).flags == ("--as=kubectl-gpufleet", "--as-group=vision-team")
