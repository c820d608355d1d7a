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
    from scheduler.errors import SchedulerConfigError

    try:
        yield
    except (GpufleetError, SchedulerConfigError) as exc:
        raise Exit(f"error: {exc}", code=exc.exit_code) from None


STACK_HELP = "stack name (reads Pulumi.<stack>.yaml) or a path to a stack file; default: dev"


def stack_file(stack: str) -> Path:
    """A stack name (`dev` -> Pulumi.dev.yaml in the project) or a path to a stack file."""
    if stack.endswith(".yaml") or "/" in stack:
        return Path(stack)
    return ROOT / f"Pulumi.{stack}.yaml"


def load(stack: str):  # -> ClusterSpec (imported lazily: keeps `invoke --list` fast)
    from infra.stackfile import load_stack

    return load_stack(stack_file(stack))


def console():  # -> rich Console, wide enough for tables when output is not a terminal
    from rich.console import Console

    out = Console()
    return out if out.is_terminal else Console(width=160)


@task(
    help={
        "stack": STACK_HELP,
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


# ---- AWS: preflight and the Pulumi lifecycle (infra.preflight, infra.deploy) ----------------------------

BACKEND_HELP = (
    "Pulumi state backend URL (default: file://<project>/.pulumi-state); s3://, gs://, azblob://, https://"
)


@task(help={"stack": STACK_HELP})
def preflight(c: Context, stack: str = "dev") -> None:
    """Check instance offerings, vCPU quotas, AMI releases and capacity blocks on AWS before deploying."""
    from infra.preflight import print_findings, raise_on_errors, run_preflight

    with user_errors():
        spec = load(stack)
        findings = run_preflight(spec)
        print_findings(findings, console(), spec.stack)
        raise_on_errors(findings, spec.stack)


@task(help={"stack": STACK_HELP, "backend": BACKEND_HELP})
def deploy(c: Context, stack: str = "dev", backend: str = "") -> None:
    """Preflight, then create or update the stack (`pulumi up`), streaming resource changes."""
    from infra import deploy as lifecycle

    with user_errors():
        changes = lifecycle.deploy(load(stack), ROOT, backend or None, console())
    print(f"deployed stack {stack!r}: {changes}")


@task(help={"stack": STACK_HELP, "backend": BACKEND_HELP})
def preview(c: Context, stack: str = "dev", backend: str = "") -> None:
    """Show what `invoke deploy` would change, without changing anything."""
    from infra import deploy as lifecycle

    with user_errors():
        changes = lifecycle.preview(load(stack), ROOT, backend or None, console())
    print(f"preview of stack {stack!r}: {changes}")


@task(
    help={"stack": STACK_HELP, "backend": BACKEND_HELP, "yes": "confirm: destroy every resource of the stack"}
)
def destroy(c: Context, stack: str = "dev", backend: str = "", yes: bool = False) -> None:
    """Delete the stack's resources: in-cluster add-ons first, then node groups, cluster and network."""
    from infra import deploy as lifecycle
    from infra.errors import ConfigError

    with user_errors():
        spec = load(stack)
        if not yes:
            raise ConfigError(
                f"destroy deletes every resource of stack {stack!r}; rerun with --yes to confirm"
            )
        changes = lifecycle.destroy(spec, ROOT, backend or None, console())
    print(f"destroyed stack {stack!r}: {changes}")


@task(help={"stack": STACK_HELP, "backend": BACKEND_HELP, "show_secrets": "print secret outputs in clear"})
def outputs(c: Context, stack: str = "dev", backend: str = "", show_secrets: bool = False) -> None:
    """Print the stack's outputs (cluster name, endpoint, node groups, ...); secrets masked by default."""
    from infra import deploy as lifecycle

    with user_errors():
        values = lifecycle.outputs(load(stack), ROOT, backend or None)
    for key, out in sorted(values.items()):
        print(f"{key}: {'[secret]' if out.secret and not show_secrets else out.value}")


@task(
    help={
        "stack": STACK_HELP,
        "backend": BACKEND_HELP,
        "out": "where to write it (default: build/<stack>/kubeconfig)",
    }
)
def kubeconfig(c: Context, stack: str = "dev", backend: str = "", out: str = "") -> None:
    """Write the cluster's kubeconfig (owner-only permissions) and print how to use it."""
    from infra import deploy as lifecycle

    with user_errors():
        spec = load(stack)
        text = lifecycle.kubeconfig_text(lifecycle.outputs(spec, ROOT, backend or None), spec.stack)
    path = lifecycle.write_kubeconfig(text, Path(out) if out else BUILD / spec.stack / "kubeconfig")
    print(f"wrote {path}\nexport KUBECONFIG={path}")


@task(
    help={
        "stack": "an existing-platform stack (default: metal)",
        "check": "dry run: report what would change, change nothing",
        "limit": "only these hosts or groups (Ansible --limit pattern)",
        "reboot": "let the play reboot hosts whose driver changed (drained, in batches of one host group)",
    }
)
def metal(
    c: Context, stack: str = "metal", check: bool = False, limit: str = "", reboot: bool = False
) -> None:
    """Prepare the stack's bare-metal GPU hosts with Ansible: driver, container toolkit, fabric manager, verify."""
    import os
    import shlex
    import shutil

    import yaml

    from infra.errors import CheckFailed, ConfigError, ToolMissing
    from infra.metal_inventory import group_limits, playbook_command, render_inventory

    with user_errors():
        spec = load(stack)
        if spec.platform != "existing":
            raise ConfigError(
                f"stack {stack!r} is platform {spec.platform}; invoke metal prepares existing-cluster hosts"
            )
        groups = [
            {"name": p.name, "hosts": p.hosts, "gpuModel": p.gpu_model, "gpusPerNode": p.gpus_per_node}
            for p in spec.node_pools
        ]
        inventory = render_inventory(
            groups,
            spec.versions.nvidia_driver_branch,
            spec.versions.nvidia_container_toolkit,
            None,
            driver_version=spec.versions.nvidia_driver_version,
        )
        path = BUILD / spec.stack / "inventory.yml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(inventory, sort_keys=False))
        print(f"wrote {path}")
        resume = f"invoke metal --stack {spec.stack} --reboot"
        commands = [
            playbook_command(path, check, group, reboot=reboot, continue_command=resume)
            for group in group_limits(inventory, limit or None)
        ]
        local = Path(sys.executable).parent / "ansible-playbook"
        binary = str(local) if local.exists() else (shutil.which("ansible-playbook") or "")
        if not binary:
            raise ToolMissing(
                "ansible-playbook not found: pip install 'ansible-core>=2.19,<2.20' (see README)"
            )
        galaxy = Path(binary).with_name("ansible-galaxy")
        listed = c.run(f"{shlex.quote(str(galaxy))} collection list community.general", hide=True, warn=True)
        if listed is None or "community.general" not in listed.stdout:
            raise ToolMissing(
                "the playbook needs the community.general collection: "
                "ansible-galaxy collection install -r ansible/requirements.yml"
            )
        env = {"ANSIBLE_CONFIG": str(ROOT / "ansible" / "ansible.cfg")}
        # One host group after another: a failed group stops the rollout before the next one starts.
        for argv in commands:
            argv[0] = binary
            result = c.run(shlex.join(argv), env={**os.environ, **env}, warn=True, pty=False)
            if result is None or result.exited != 0:
                code = "?" if result is None else result.exited  # a failed Result is falsy: test for None
                raise CheckFailed(
                    f"the playbook failed for {argv[argv.index('--limit') + 1]} (exit {code}); "
                    "see its output and recap above; later host groups were not touched"
                )


@task(
    help={
        "stack": STACK_HELP,
        "out": "output folder (default: build/<stack>/manifests/)",
    }
)
def render(c: Context, stack: str = "dev", out: str = "") -> None:
    """Write the scheduling policy as YAML (one file per object + kustomization.yaml) for GitOps."""
    from infra.scheduling import scheduler_inputs
    from scheduler import compile as compile_policy
    from scheduler import kueue_values
    from scheduler import render as render_objects

    with user_errors():
        spec = load(stack)
        policy, pools = scheduler_inputs(spec)
        objects = compile_policy(policy, pools)
    folder = Path(out) if out else BUILD / spec.stack / "manifests"
    paths = render_objects(objects, folder, kueue_values=kueue_values(policy))
    print(f"wrote {len(objects)} objects ({len(paths)} files) to {folder}")
