"""The docs' shell examples run as written: every fenced `bash`/`sh` block of README.md and docs/*.md is read
command by command; those that need no cloud account, host, cluster or long-running twin run here against this
clone and print what the page says they print; every `invoke` line (the skipped ones too, and the commands quoted
in the prose) names a task, options and a stack that exist. The user pages carry no review ids, and the shipped
example stacks plan and render without a warning the user did not cause.

Not run here, and why (`SKIPPED`): the install and `invoke test` (this suite runs in that environment and is part
of that test); Pulumi against AWS (`deploy`, `preview`, ...), `preflight` on an AWS account; `invoke metal`,
Ansible and SSH (real hosts; tests/tasks/test_render_and_metal.py and tests/ansible run the playbooks without
them); `kubectl` and `invoke usage`/`reclaim` against a deployed cluster's API server or Prometheus
(tests/twin/test_docs_workloads.py, tests/twin/test_docs_teams.py and tests/monitoring/test_usage.py run them
on the twin and on a Prometheus on loopback); the twins (`invoke twin`, `twin-build`: tests/twin/test_twin.py, tests/twin/test_docs.py,
tests/slurm/test_slurm_twin.py); `sacct` (a Slurm cluster: tests/slurm/test_slurm_daemons.py).

The simulate examples run on a cut of the openb trace (its first 60 GPU nodes and 300 pods, in files of the
same names), so the page's command lines run verbatim in seconds instead of minutes; the full trace's numbers
are checked by tests/sim/test_benchmark_docs.py and the benchmarks.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from invoke import Collection
from invoke.exceptions import ParseError
from invoke.parser import Parser

import tasks
from tests.conftest import ROOT

pytestmark = pytest.mark.xdist_group("build-metal")

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
VENV_BIN = Path(sys.executable).parent
# The first words of a command that is not run here -> why.
SKIPPED = {
    "python3 -m venv": "the install: this suite runs in the environment it makes",
    "pip install": "the install: this suite runs in the environment it makes",
    "invoke test": "the whole suite, of which this test is part",
    "invoke deploy": "Pulumi against a cloud account or a cluster",
    "invoke preview": "Pulumi against a cloud account or a cluster",
    "invoke drain": "the API server of a deployed cluster (tests/twin/test_upgrade.py runs it on the twin)",
    "invoke destroy": "Pulumi against a cloud account or a cluster",
    "invoke outputs": "Pulumi state of a deployed stack",
    "invoke kubeconfig": "Pulumi state of a deployed stack",
    "invoke preflight": "an AWS account or a cluster",
    "invoke metal": "real hosts over SSH",
    "cd ansible": "Ansible Galaxy over the network",
    "ansible-galaxy collection install": "Ansible Galaxy over the network",
    "ansible-playbook": "real hosts over SSH",
    "invoke usage": "the Prometheus of a deployed cluster",
    "invoke reclaim": "the Prometheus and API server of a deployed cluster",
    "invoke trace": "the API server of a deployed cluster (tests/twin/test_cluster_trace.py runs it on the twin)",
    "kubectl": "the API server of a deployed cluster or a twin",
    "export KUBECONFIG": "a running twin",
    "invoke twin": "a long-running twin",
    "invoke twin-build": "the twin's toolchain build (40-55 minutes cold)",
    "sacct": "a Slurm cluster",
    "JOB=$(sbatch": "a Slurm cluster (tests/slurm/test_slurm_answers.py runs it on the Slurm twin)",
    "gpufleet-slurm": "a Slurm cluster (tests/slurm/test_slurm_answers.py runs it on the Slurm twin)",
}
RUN = (
    "invoke plan",
    "invoke render",
    "invoke simulate",
    "invoke --list",
    "TRACES=$(",
    "mkdir -p build/",
    "git show HEAD:Pulumi.",
    "invoke preview --stack example-prod --deployed",
)


@dataclass(frozen=True)
class Command:
    page: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.text}"


def shell_commands() -> list[Command]:
    """Every command of every fenced bash/sh block, in page order (`a && b` is two commands)."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for block in re.finditer(r"^```(bash|sh)\n(.*?)^```", text, re.M | re.S):
            first = text[: block.start()].count("\n") + 2
            for offset, line in enumerate(block.group(2).splitlines()):
                for part in line.split(" && "):
                    if part.strip() and not part.strip().startswith("#"):
                        found.append(Command(page.relative_to(ROOT).as_posix(), first + offset, part.strip()))
    return found


def words(command: str) -> str:
    return command.removeprefix(".venv/bin/")


def skip_reason(command: Command) -> str | None:
    said = words(command.text)
    if said.startswith(RUN):
        return None
    reasons = [why for start, why in SKIPPED.items() if said.startswith(start)]
    assert reasons, f"{command}: neither run here nor skipped with a reason (SKIPPED, RUN)"
    return max(reasons, key=len)


def test_every_shell_example_is_run_or_skipped_for_a_reason() -> None:
    commands = shell_commands()
    assert len(commands) > 20
    ran = [c for c in commands if skip_reason(c) is None]
    assert {c.page for c in ran} >= {"README.md", "docs/simulation.md"}


def test_no_fenced_block_without_a_language_holds_a_command() -> None:
    """An unlabeled block that holds commands would escape the examples test: commands go in bash/sh blocks."""
    for page in PAGES:
        for block in re.findall(r"^```\n(.*?)^```", page.read_text(), re.M | re.S):
            assert not re.search(r"^(\.venv/bin/)?(invoke|kubectl|python3?|sacct) ", block, re.M), (
                page,
                block,
            )


# ---- every invoke line names what exists ----------------------------------------------------------------

CONTEXTS = Collection.from_module(tasks).to_contexts()
PLACEHOLDER = re.compile(r"NAME|FILE|HOSTS|PATTERN|CMD|<|\[|\||\.\.\.|…| M\b| N\b| F\b| T\b|PATH")


def inline_commands() -> list[Command]:
    """`invoke ...` quoted in the prose (not in fenced blocks), without placeholders."""
    found = []
    for page in PAGES:
        text = re.sub(
            r"^```.*?^```", lambda m: "\n" * m.group(0).count("\n"), page.read_text(), flags=re.M | re.S
        )
        for match in re.finditer(r"`((?:\.venv/bin/)?invoke [^`]+)`", text):
            if not PLACEHOLDER.search(match.group(1)):
                line = text[: match.start()].count("\n") + 1
                found.append(Command(page.relative_to(ROOT).as_posix(), line, match.group(1)))
    return found


def invoke_lines() -> list[Command]:
    return [c for c in [*shell_commands(), *inline_commands()] if words(c.text).startswith("invoke ")]


@pytest.mark.parametrize("command", invoke_lines(), ids=str)
def test_every_invoke_line_names_a_task_options_and_a_stack_that_exist(command: Command) -> None:
    argv = shlex.split(words(command.text), comments=True)
    argv = [a for a in argv if a != "&"]
    if ">" in argv:
        argv = argv[: argv.index(">")]
    if argv[1].startswith("-"):  # invoke's own options (`invoke --list`): no task to check
        return
    try:
        parsed = Parser(contexts=CONTEXTS).parse_argv(argv[1:])
    except ParseError as exc:
        raise AssertionError(f"{command}: {exc}") from None
    for context in parsed:
        stack = context.args["stack"].value if "stack" in context.args else None
        if stack and not stack.endswith(".yaml") and "/" not in stack:
            assert (ROOT / f"Pulumi.{stack}.yaml").is_file(), f"{command}: no stack {stack!r}"


# ---- the ones that run ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_traces(shared_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the reference data whose openb trace is cut to its first 60 GPU nodes and 300 pods (the other
    files as they are), for GPUFLEET_SHARED."""
    root = tmp_path_factory.mktemp("shared")
    (root / "traces").mkdir()
    (root / "traces/alibaba-gpu-v2023").mkdir()
    for source in (shared_dir / "traces/alibaba-gpu-v2023").iterdir():
        target = root / "traces/alibaba-gpu-v2023" / source.name
        rows = {"openb_node_list_gpu_node.csv": 60, "openb_pod_list_default.csv": 300}.get(source.name)
        if rows:
            target.write_text("".join(source.read_text().splitlines(keepends=True)[: rows + 1]))
        else:
            target.symlink_to(source)
    return root


def run_block(commands: list[Command], shared: Path) -> subprocess.CompletedProcess[str]:
    """Commands as one bash script (variables carry from line to line), with this environment's programs for
    `.venv/bin/` and `invoke`, from the clone."""
    script = "set -e\n" + "\n".join(c.text.replace(".venv/bin/", f"{VENV_BIN}/") for c in commands)
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT),
           "GPUFLEET_SHARED": str(shared), "COLUMNS": "160"}  # fmt: skip
    return subprocess.run(
        ["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def pages_to_run() -> dict[str, list[Command]]:
    """The runnable commands by page, in page order: a reader runs a page's blocks in one shell, so a later
    block may use what an earlier one set (`$TRACES`)."""
    out: dict[str, list[Command]] = {}
    for command in shell_commands():
        if skip_reason(command) is None:
            out.setdefault(command.page, []).append(command)
    return out


# What each page's examples must print, as the page describes it.
SHOWN = {
    "README.md": [r"^Plan for stack 'dev': cluster gpufleet-dev \(aws us-west-2", r"^Node pools", r"^Teams",
                  r"^GPUs: 0 at minimum, 2 at maximum; monthly cost \$", r"^wrote .*build/dev/plan\.md$"],
    "docs/simulation.md": [r"^wrote .*/report\.md$", r"^wrote .*/unallocated\.png$"],
    # the committed stack against itself: the runbook's preview, with nothing changed yet
    "docs/deploy.md": [r"^no node group or NodePool rolls$"],
}  # fmt: skip


@pytest.mark.parametrize("page", list(pages_to_run()))
def test_the_examples_run_and_print_what_the_page_shows(page: str, small_traces: Path) -> None:
    commands = pages_to_run()[page]
    done = run_block(commands, small_traces)
    assert done.returncode == 0, f"{commands[0]}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    assert "warning" not in (done.stdout + done.stderr).lower(), done.stdout + done.stderr
    for shown in SHOWN[page]:
        assert re.search(shown, done.stdout, re.M), (shown, done.stdout[-2000:])


# ---- the pages themselves --------------------------------------------------------------------------------

REVIEW_IDS = re.compile(
    r"\b(BLOCKER|MAJOR|MINOR) \d+\b|\((?:[AmMNOF]\d{1,2})(?:, ?[AmMNOF]\d{1,2})*\)|first-use|review finding"
)


def test_user_pages_carry_no_review_ids() -> None:
    for page in PAGES:
        for number, line in enumerate(page.read_text().splitlines(), 1):
            assert not REVIEW_IDS.search(line), f"{page.relative_to(ROOT)}:{number}: {line}"


@pytest.mark.parametrize("stack", ["dev", "example-prod", "example-karpenter", "metal", "metal-slurm"])
def test_the_example_stacks_plan_and_render_without_a_warning(stack: str, tmp_path: Path) -> None:
    """A warning on a shipped example is one the user did not cause (the quickstart's `dev` ended with one about
    a default CPU allowance): the examples set what such a warning reads."""
    for command in ("plan", "render"):
        done = subprocess.run([sys.executable, "-m", "invoke", command, "--stack", stack, "--out", str(tmp_path)],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        said = (done.stdout + done.stderr).lower()
        assert "warning" not in said and "exceed" not in said, said[-1500:]
