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


def _int_list(text: str, what: str) -> list[int]:
    from infra.errors import ConfigError

    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--{what}: expected comma-separated integers, got {text!r}") from None


@task(
    help={
        "stack": "simulate the cluster of this stack (every pool at maxSize)",
        "nodes": "or an openb-format node CSV (sn,cpu_milli,memory_mib,gpu,model)",
        "pods": "the workload: an openb pod CSV or cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec] CSV",
        "policy": "one policy or a comma-separated list (default: all)",
        "seeds": "comma-separated seeds (default: 42..51)",
        "json": "also write every run (curves, failed pods, seconds) to this JSON file",
        "processes": "worker processes (default: one per CPU)",
    }
)
def simulate(
    c: Context,
    pods: str = "",
    stack: str = "",
    nodes: str = "",
    policy: str = "",
    seeds: str = "",
    json: str = "",
    processes: int = 0,
) -> None:
    """Replay a pod trace against placement policies; prints a comparison and writes build/<name>/sim/."""
    from rich.progress import Progress
    from rich.table import Table

    from infra.errors import ConfigError
    from scheduler import sim
    from scheduler.sim.report import summarize, write_json, write_report

    with user_errors():
        if not pods or bool(stack) == bool(nodes):
            raise ConfigError("give --pods FILE and exactly one of --stack NAME or --nodes FILE")
        policies = [p.strip() for p in policy.split(",") if p.strip()] or list(sim.ALL_POLICIES)
        seed_list = _int_list(seeds, "seeds") if seeds else list(sim.DEFAULT_SEEDS)
        try:
            if stack:
                from infra.simulation import cluster_from_spec

                spec = load(stack)
                name, cluster = spec.stack, cluster_from_spec(spec)
            else:
                name, cluster = Path(nodes).stem, sim.read_nodes(nodes)
            workload = sim.read_pods(pods)
            with Progress(console=console(), transient=True) as bar:
                job = bar.add_task(
                    f"{len(policies)} policies x {len(seed_list)} seeds", total=len(policies) * len(seed_list)
                )
                results = sim.run_many(
                    cluster,
                    workload,
                    policies,
                    seed_list,
                    processes=processes or None,
                    on_done=lambda _r: bar.advance(job),
                )
        except (sim.TraceError, sim.UnknownPolicyError) as exc:
            raise ConfigError(str(exc)) from None
    table = Table(
        title=f"{name}: {cluster.size} nodes, {int(cluster.num_gpu.sum())} GPUs; {workload.size} pods"
    )
    for col in ("policy", "unallocated GPU % @100", "frag amount %", "failed pods", "s/run"):
        table.add_column(col, justify="left" if col == "policy" else "right")
    for s in summarize(results):
        table.add_row(
            s.policy,
            f"{s.unallocated_mean:.2f} ± {s.unallocated_std:.2f}",
            f"{s.frag_amount_mean:.2f}",
            f"{s.failed_mean:.1f}",
            f"{s.seconds_mean:.2f}",
        )
    console().print(table)
    context = [f"cluster: {stack or nodes} ({cluster.size} nodes)", f"pods: {pods}", f"seeds: {seed_list}"]
    report = write_report(results, BUILD / name / "sim", f"Simulation of {name}", context)
    print(f"wrote {report}")
    if json:
        write_json(results, Path(json))
        print(f"wrote {json}")
