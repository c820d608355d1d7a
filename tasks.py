"""invoke tasks: thin wrappers that parse arguments, call a library function, print, and exit.

Exit codes: 0 ok, 1 a check found problems, 2 bad input (config, trace), 3 a missing tool or credentials.
User errors print one clear message and no traceback; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from invoke import Context, Exit, task

ROOT = Path(__file__).resolve().parent
BUILD = ROOT / "build"


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn the toolkit's user-facing errors into a message and an exit code."""
    from infra.errors import GpufleetError

    try:
        yield
    except GpufleetError as exc:
        raise Exit(f"error: {exc}", code=exc.exit_code) from None


def stack_file(stack: str) -> Path:
    """A stack name (`dev` -> Pulumi.dev.yaml in the project) or a path to a stack file."""
    if stack.endswith(".yaml") or "/" in stack:
        return Path(stack)
    return ROOT / f"Pulumi.{stack}.yaml"


def load(stack: str):  # -> ClusterSpec (imported lazily: keeps `invoke --list` fast)
    from infra.spec import load_stack

    return load_stack(stack_file(stack))


def console():  # -> rich Console, wide enough for tables when output is not a terminal
    from rich.console import Console

    out = Console()
    return out if out.is_terminal else Console(width=160)


@task(
    help={
        "stack": "stack name (reads Pulumi.<stack>.yaml) or a path to a stack file; default: dev",
        "out": "folder for plan.json and plan.md (default: build/<stack>/)",
    }
)
def plan(c: Context, stack: str = "dev", out: str = "") -> None:
    """Validate a stack and print what it would create and cost; writes plan.json and plan.md."""
    from infra.plan import build_plan
    from infra.plan_report import print_plan, write_plan

    with user_errors():
        spec = load(stack)
    the_plan = build_plan(spec)
    print_plan(the_plan, console())
    for path in write_plan(the_plan, Path(out) if out else BUILD / spec.stack):
        print(f"wrote {path}")


@task(help={"pytest_args": "extra arguments for pytest, e.g. '-k spec -x'"})
def test(c: Context, pytest_args: str = "") -> None:
    """Lint (ruff), type-check (mypy), check import contracts, then run every test."""
    py = sys.executable
    c.run(f"{py} -m ruff check .")
    c.run(f"{py} -m ruff format --check .")
    c.run(f"{py} -m mypy infra scheduler")
    c.run(f"{Path(py).parent / 'lint-imports'}")
    c.run(f"{py} -m pytest {pytest_args}", pty=False)
