"""The task line as a user meets it: short flags that mean one thing, a readable list, quiet pipes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from invoke import Collection

import tasks
from tests.conftest import ROOT


def test_a_short_flag_means_the_same_long_option_in_every_task() -> None:
    """invoke derives short flags from the first free letter of each option (invoke docs, "Automatic short
    flags"), so left alone `-j` would be a switch in one task and take a file in another, `-o` would be --out
    here and --policy there. Across all tasks, a short flag names one long option."""
    meaning: dict[str, set[str]] = {}
    for context in Collection.from_module(tasks).to_contexts():
        for flag in context.flags.values():
            longs = [n for n in flag.names if len(n) > 1]
            for short in (n for n in flag.names if len(n) == 1):
                meaning.setdefault(short, set()).update(longs)
    clashes = {short: longs for short, longs in meaning.items() if len(longs) > 1}
    assert not clashes, clashes


def test_every_task_in_the_list_has_a_whole_sentence() -> None:
    """`invoke --list` shows each docstring's first line (invoke's Program.list_tasks), so that line is a whole
    sentence, not one stopped mid-way ("... and the monitoring side")."""
    listed = subprocess.run(
        [sys.executable, "-m", "invoke", "--list"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert listed.returncode == 0
    for name, body in Collection.from_module(tasks).tasks.items():
        first = (body.__doc__ or "").strip().splitlines()[0]
        assert first.endswith((".", ")")), (name, first)


def test_a_closed_pipe_ends_quietly() -> None:
    """`invoke plan ... | head -1` exits without a BrokenPipeError traceback: with SIGPIPE at its default action the process ends as Unix tools do when the reader goes away (POSIX
    write(2): EPIPE with SIGPIPE), and nothing is printed on stderr."""
    done = subprocess.run(
        f"{sys.executable} -m invoke --list | head -1; {sys.executable} -m invoke plan --stack example-prod | head -1",
        shell=True,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0
    assert done.stderr == "", done.stderr
    assert len(done.stdout.splitlines()) == 2


def test_invoke_parse_errors_are_bad_input_exit_2() -> None:
    """`invoke plann` and `invoke plan --nosuch` exit 2, the README's code for bad input (invoke's Program.run
    alone exits 1 on a ParseError), and a mistyped task name gets a suggestion."""
    for argv, said in (
        (["plann"], "error: No idea what 'plann' is! (did you mean `invoke plan`?"),
        (["plan", "--nosuch"], "error: No idea what '--nosuch' is! (`invoke --list` lists the tasks"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "invoke", *argv], cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 2, (argv, done.stderr)
        assert done.stderr.startswith(said), done.stderr
        assert "Traceback" not in done.stderr


def test_importing_the_tasks_keeps_pythons_sigpipe_handling() -> None:
    """The quiet-pipe rule is for the command line only: a process that imports tasks.py (this test suite)
    keeps SIGPIPE ignored, as Python sets it at start-up, so a write to a closed socket raises BrokenPipeError
    instead of killing the process (a suite that did so died silently in the extender's binder tests)."""
    import signal

    assert signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["render", "--stack", "dev", "--stack", "metal"], "--stack is given twice to `invoke render` (dev, then metal); invoke would have read `metal` as a second command"),
        (["plan", "--stack", "dev", "--stack", "render"], "--stack is given twice to `invoke plan` (dev, then render)"),
        (["plan", "--stack", "dev", "--stack", "example-prod"], "--stack is given twice to `invoke plan` (dev, then example-prod)"),
        (["plan", "--stack=dev", "-s", "metal"], "--stack is given twice"),
        (["metal", "--check", "--check"], "--check is given twice to `invoke metal`"),
        (["plan", "metal"], "`metal` after `invoke plan ...` would run a second command"),
        (["plan", "--stack", "dev", "metal", "--stack", "metal"], "`metal` after `invoke plan ...` would run a second command"),
    ],
)  # fmt: skip
def test_an_option_twice_or_a_second_command_runs_nothing(argv: list[str], said: str) -> None:
    """invoke reads the second value of an option given twice as the next task (`invoke render --stack dev
    --stack metal` ran a real `invoke metal` after the render), and runs every task named on one line. Both are
    refused with exit 2 and one line before any task runs: nothing is printed on stdout, nothing is written."""
    done = subprocess.run(
        [sys.executable, "-m", "invoke", *argv], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, (argv, done.stdout, done.stderr)
    assert done.stdout == ""
    assert done.stderr.startswith(f"error: {said}"), done.stderr
    assert "nothing was run" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_stack_file_named_from_a_subfolder_of_the_project_is_the_projects(tmp_path: Path) -> None:
    """invoke finds tasks.py from any folder of the clone; `--stack Pulumi.dev.yaml` typed in `docs/` means the
    project's file, as `--stack dev` does, not a file of docs/."""
    done = subprocess.run(
        [sys.executable, "-m", "invoke", "plan", "--stack", "Pulumi.dev.yaml", "--out", str(tmp_path)],
        cwd=ROOT / "docs", capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "plan.json").is_file()


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["plan", "dev"], "error: No idea what 'dev' is! (a stack is named with --stack: `--stack dev`;"),
        (
            ["plan", "-stack", "dev"],
            "error: No idea what 'dev' is! (a stack is named with --stack: `--stack dev`;",
        ),
        (["plan", "--stack"], "error: --stack needs a value (`invoke --list`"),
    ],
)
def test_a_stack_given_without_its_option_or_an_option_without_its_value_says_what_to_type(
    argv: list[str], said: str
) -> None:
    """invoke's own words name its internals (`Flag <Argument: stack (s)> needed value`) or only the token it
    did not expect: the line says what to type instead."""
    done = subprocess.run(
        [sys.executable, "-m", "invoke", *argv], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and done.stderr.startswith(said), done.stderr
