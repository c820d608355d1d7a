"""invoke tasks: thin wrappers that parse arguments, call a library function, print, and exit.

Exit codes: 0 ok, 1 a check found problems, 2 bad input (config, trace), 3 a missing tool or credentials.
User errors print one clear message and no traceback; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from invoke import Context, Exit, task

ROOT = Path(__file__).resolve().parent
BUILD = ROOT / "build"


def _parse_errors_exit_2() -> None:
    """invoke's own parse errors (`invoke plann`, `invoke plan --nosuch`) exit 2, the README's code for bad
    input, with a hint, instead of invoke's fixed exit 1; a command line that gives an option twice or names a
    second command is refused before invoke parses it (`infra.command_line`). invoke loads this file
    before it parses the task part of the command line (Program.run: parse_collection, then parse_tasks), and
    Program.run prints an Exit's message and exits with its code; nothing else of invoke changes."""
    from invoke.exceptions import ParseError
    from invoke.program import Program

    from infra.command_line import parse_error, refused

    original = Program.parse_tasks
    if getattr(original, "gpufleet", False):
        return

    def parse_tasks(self: Program) -> None:
        if self.collection is not None:
            contexts = {
                name: context
                for context in self.collection.to_contexts()
                for name in (context.name, *context.aliases)
            }
            reason = refused(self.core.unparsed, contexts)
            if reason:
                raise Exit(f"error: {reason}", code=2)
        try:
            original(self)
        except ParseError as exc:
            names = list(self.collection.task_names) if self.collection is not None else []
            stacks = [p.name[len("Pulumi.") : -len(".yaml")] for p in ROOT.glob("Pulumi.*.yaml")]
            raise Exit(f"error: {parse_error(str(exc), names, stacks)}", code=2) from None

    parse_tasks.gpufleet = True  # type: ignore[attr-defined]
    Program.parse_tasks = parse_tasks  # type: ignore[method-assign]


_parse_errors_exit_2()

_CLI = Path(sys.argv[0]).name in ("invoke", "inv") or sys.argv[0].endswith(("invoke/__main__.py", "-m"))
if hasattr(signal, "SIGPIPE") and _CLI:
    # `invoke plan | head -1` ends quietly, as any Unix tool does when its reader closes the pipe, instead of
    # a BrokenPipeError traceback and exit 1. Only on the command line: a process
    # that imports this file (the test suite) keeps Python's own SIGPIPE handling, under which a write to a
    # closed socket is an exception, not the end of the process.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
if _CLI:
    # SIGTERM and SIGHUP end a command the way Ctrl-C does: what it started is stopped on the way out, and it
    # exits 143 or 129 (user_errors), not silently with the signal's default action.
    from infra.errors import raise_on_stop_signals

    raise_on_stop_signals()


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn the toolkit's user-facing errors into a message and an exit code."""
    from infra.errors import STOPS, GpufleetError, stop_message
    from scheduler.errors import SchedulerConfigError
    from scheduler.explain.cluster import ClusterError

    try:
        yield
    except (GpufleetError, SchedulerConfigError, ClusterError) as exc:
        raise Exit(f"error: {exc}", code=exc.exit_code) from None
    except STOPS as stop:
        message, code = stop_message(stop)
        raise Exit(message, code=code) from None


STACK_HELP = "stack name (reads Pulumi.<stack>.yaml) or a path to a stack file; default: dev"


def stack_file(stack: str) -> Path:
    """A stack name (`dev` -> Pulumi.dev.yaml in the project) or a path to a stack file; a relative path that
    is not there but is in the project (`Pulumi.dev.yaml` typed in a subfolder of it) is the project's."""
    if stack.endswith(".yaml") or "/" in stack:
        path = Path(stack)
        return (
            ROOT / path if not path.is_absolute() and not path.exists() and (ROOT / path).is_file() else path
        )
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
    from infra.plan_report import report_plan

    with user_errors():
        spec = load(stack)
        report_plan(spec, Path(out) if out else BUILD / spec.stack, console())


@task(help={"pytest_args": "extra arguments for pytest, e.g. '-k spec -x'"})
def test(c: Context, pytest_args: str = "") -> None:
    """Lint, type-check, check import contracts, then run every test, timing each phase (tests/phases.py).

    The twin's toolchain builds meanwhile where it is missing."""
    from tests.phases import run

    with user_errors():  # a stop: what it started is stopped, then one line and 130, 143 or 129
        run(c, pytest_args)


@task(
    help={
        "stack": "simulate the cluster as this stack deploys it (pools at maxSize, taints, GPU resources, "
        "Kueue flavors, the placement profile as sent)",
        "nodes": "or an openb-format node CSV (sn,cpu_milli,memory_mib,gpu,model)",
        "pods": "the workload: an openb pod CSV or cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec] CSV",
        "policy": "one policy or a comma-separated list (default: all; with --stack or --as-deployed: FGD, "
        "FGD-Extender and the deployed profile)",
        "seeds": "comma-separated seeds (default: 42..51)",
        "json": "also write every run (curves, failed pods, seconds) to this JSON file",
        "processes": "worker processes (default: one per CPU)",
        "as_deployed": "with --nodes: CPU-only pods off the GPU nodes, shares as one time-sliced replica",
        "replicas": "with --as-deployed: time-slicing replicas per GPU (default 2)",
        "strict": "a pod no node can ever host is an error (default: counted as failed and reported)",
        "twin": "with --stack: also replay through the real scheduler on a twin (the gpu-binpack profile, and "
        "FragmentationAware with the extender), next to the simulator's MostAllocated and FGD-Extender",
        "out": "folder for report.md and its plots (default: build/<stack or nodes file>/sim/, "
        "sim-as-deployed/ with --as-deployed)",
        "extender_http": "FGD-Extender through the extender's HTTP app, JSON bytes and all (default: its verbs "
        "called in-process, same placements, faster)",
        "dynamic": "with --stack: replay jobs over time (arrivals, durations, the stack's queues, preemption, the "
        "autoscaler) and compare the stack's policy with the naive alternatives (docs/simulation.md)",
        "time_scale": "with --dynamic: multiply the trace's times by this (e.g. 0.01 compresses 150 days to 36 "
        "hours; delays and timeouts stay real)",
        "provision_delay": "with --dynamic: seconds from scale-up to a Ready node (default per instance family)",
    },
    auto_shortflags=False,  # long options only: -j, -o meant different things per task
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
    as_deployed: bool = False,
    replicas: int = 0,
    strict: bool = False,
    twin: bool = False,
    extender_http: bool = False,
    out: str = "",
    dynamic: bool = False,
    time_scale: float = 1.0,
    provision_delay: float = -1.0,
) -> None:
    """Replay a pod trace against placement policies; prints a comparison and writes build/<name>/sim/."""
    from infra.simulate.run import Request
    from infra.simulate.run import simulate as run_simulation

    request = Request(pods=pods, stack=stack, nodes=nodes, policy=policy, seeds=seeds, json=json,
                      processes=processes, as_deployed=as_deployed, replicas=replicas, strict=strict, twin=twin,
                      extender_http=extender_http, out=out, dynamic=dynamic, time_scale=time_scale,
                      provision_delay=provision_delay)  # fmt: skip
    replay = None
    if twin and not dynamic:  # the real scheduler's replay: the twin's, a room above the simulator's
        from twin.replay import replay_stack

        replay = replay_stack
    with user_errors():
        run_simulation(request, load=load, console=console(), build=BUILD, twin_replay=replay)


@task(
    help={
        "stack": STACK_HELP,
        "from-cluster": "read the cluster's finished Kueue Workloads and its GPU nodes (the only source)",
        "kubeconfig": "kubeconfig file (default: kubectl's); needs cluster-wide read of Workloads and nodes",
        "context": "kubeconfig context",
        "out": "folder for pods.csv and nodes.csv (default: build/<stack>/trace/)",
    },
    auto_shortflags=False,
)
def trace(
    c: Context, stack: str = "dev", from_cluster: bool = False, kubeconfig: str = "", context: str = "",
    out: str = "",
) -> None:  # fmt: skip
    """A cluster's finished GPU jobs and GPU nodes as a trace `invoke simulate` replays (docs/simulation.md)."""
    from scheduler.explain.cluster import ClusterError, Kubectl

    with user_errors():
        if not from_cluster:
            raise ClusterError("trace: give --from-cluster (the running cluster is the only source)", 2)
        from infra.simulate.from_cluster import export_trace

        spec = load(stack)
        folder = Path(out) if out else BUILD / spec.stack / "trace"
        print(export_trace(spec, Kubectl.of(kubeconfig=kubeconfig, context=context), folder))


# ---- The twin: the stack's cluster on real components (twin) ---------------------------------------


@task(
    help={
        "stack": STACK_HELP,
        "minor": "Kubernetes minor to run (default: the stack's kubernetesVersion; built: 1.35, 1.36, 1.37)",
        "nodes": "nodes per autoscaled pool: desired (default), min, max or a number",
        "bare": "control plane, nodes and Kueue only; do not deploy the stack's policy",
        "frameworks": "serve the CRDs of the job frameworks Kueue integrates (PyTorchJob and the Kubeflow "
        "training kinds, RayJob and RayCluster, JobSet; default on); --no-frameworks: a cluster without those "
        "operators, which starts faster",
        "run": "run this command in the twin (KUBECONFIG set, the twin's kubectl on PATH), then stop it; "
        "exit with the command's status",
        "monitoring": "also run the metrics chain: the Prometheus operator, Prometheus, Alertmanager, "
        "kube-state-metrics and a dcgm-exporter stand-in, scraping the twin (needs monitoring.prometheus)",
        "time-scale": "run the autoscaler stand-in's clock faster: its boot times and scale-down timers times "
        "this number, above 0 and at most 1 (default 1: as the cluster's autoscaler would)",
    },
    auto_shortflags=False,  # long options only: -r, -o, -b meant different things per task
)
def twin(
    c: Context,
    stack: str = "dev",
    minor: str = "",
    nodes: str = "desired",
    bare: bool = False,
    run: str = "",
    monitoring: bool = False,
    time_scale: str = "1",
    frameworks: bool = True,
) -> None:
    """Bring up the stack's cluster on real Kubernetes components as local processes (docs/twin.md)."""
    from twin.command import run_twin

    with user_errors():
        spec = load(stack)
        code, message = run_twin(stack_file(stack), spec, BUILD / spec.stack / "twin", minor=minor, nodes=nodes,
                                 bare=bare, run=run, monitoring=monitoring, time_scale=time_scale,
                                 frameworks=frameworks)  # fmt: skip
    if code:
        raise Exit(message or None, code=code)


@task(help={"minor": "build only this Kubernetes minor's control plane (default: every minor the twin runs)"})
def twin_build(c: Context, minor: str = "") -> None:
    """Build the twin's toolchain from Go modules into the cache outside the clone (what is missing only)."""
    from twin.toolchain.build import main as build_main

    with user_errors():
        build_main([minor] if minor else [])


# ---- AWS: preflight and the Pulumi lifecycle (infra.preflight, infra.deploy) ----------------------------

BACKEND_HELP = (
    "Pulumi state backend URL (default: file://<project>/.pulumi-state); s3://, gs://, azblob://, https://"
)


SKIP_REACHABILITY_HELP = (
    "this machine only previews (a CI pull-request runner): do not check that it can reach the API endpoint"
)


@task(help={"stack": STACK_HELP, "skip-reachability": SKIP_REACHABILITY_HELP}, auto_shortflags=False)
def preflight(c: Context, stack: str = "dev", skip_reachability: bool = False) -> None:
    """Check instance offerings, vCPU quotas, AMI releases and capacity blocks on AWS before deploying."""
    from infra.preflight import print_findings, raise_on_errors, run_preflight

    with user_errors():
        spec = load(stack)
        findings = run_preflight(spec, reachability=not skip_reachability)
        print_findings(findings, console(), spec.stack)
        raise_on_errors(findings, spec.stack)


KUBECONFIG_HELP = "platform existing: deploy to the cluster of this kubeconfig instead of cluster.kubeconfig"


@task(
    help={
        "stack": STACK_HELP,
        "backend": BACKEND_HELP,
        "kubeconfig": KUBECONFIG_HELP,
        "roll_running": "roll node groups even where jobs run (EKS evicts them); see invoke drain",
    }
)
def deploy(
    c: Context, stack: str = "dev", backend: str = "", kubeconfig: str = "", roll_running: bool = False
) -> None:
    """Preflight, then create or update the stack (`pulumi up`), streaming resource changes."""
    from infra import deploy as lifecycle
    from infra.upgrade import refuse_evictions

    with user_errors():
        spec = lifecycle.with_kubeconfig(load(stack), kubeconfig or None)
        gate = None if roll_running else (lambda facts: refuse_evictions(spec, facts, c.run))
        changes = lifecycle.deploy(spec, ROOT, backend or None, console(), gate=gate)
    print(f"deployed stack {spec.stack!r}: {changes}")


@task(
    help={
        "stack": STACK_HELP,
        "backend": BACKEND_HELP,
        "kubeconfig": KUBECONFIG_HELP,
        "deployed": "the stack file as last deployed: say only what would roll, offline (no Pulumi, no AWS)",
    }
)
def preview(
    c: Context, stack: str = "dev", backend: str = "", kubeconfig: str = "", deployed: str = ""
) -> None:
    """Show what `invoke deploy` would change and which pools would roll, without changing anything."""
    from infra import deploy as lifecycle
    from infra.rollout import rollout_facts, rollout_lines
    from infra.upgrade import preview_rollout

    def say_rollout(facts: dict) -> None:
        print("\n".join(rollout_lines(preview_rollout(spec, facts, c.run))))

    with user_errors():
        spec = lifecycle.with_kubeconfig(load(stack), kubeconfig or None)
        if deployed:
            say_rollout(rollout_facts(load(deployed)))
            return
        changes = lifecycle.preview(spec, ROOT, backend or None, console(), rollout=say_rollout)
    print(f"preview of stack {spec.stack!r}: {changes}")


@task(
    help={
        "stack": STACK_HELP,
        "pools": "comma-separated pools about to roll (invoke preview names them)",
        "bound": "seconds to wait for their running jobs (default 14400: 4 h); nothing is evicted after it",
        "release": "resume the ClusterQueues drain held, after the rollout",
    },
    auto_shortflags=False,
)
def drain(c: Context, stack: str = "dev", pools: str = "", bound: int = 14400, release: bool = False) -> None:
    """Hold new admissions to pools and wait for their running jobs to finish, so a rollout evicts none."""
    from infra import upgrade

    with user_errors():
        spec = load(stack)
        if release:
            kubectl = upgrade.StackKubectl(spec, c.run)
            kubectl.check()
            print(f"released: {', '.join(upgrade.release(kubectl)) or 'no ClusterQueue was held'}")
            return
        upgrade.drain(spec, [p for p in pools.split(",") if p], bound, c.run)


@task(
    help={
        "stack": STACK_HELP,
        "backend": BACKEND_HELP,
        "yes": "confirm: destroy every resource of the stack",
        "kubeconfig": KUBECONFIG_HELP,
    }
)
def destroy(
    c: Context, stack: str = "dev", backend: str = "", yes: bool = False, kubeconfig: str = ""
) -> None:
    """Delete the stack's resources: in-cluster add-ons first, then node groups, cluster and network."""
    from infra import deploy as lifecycle
    from infra.errors import ConfigError

    with user_errors():
        spec = lifecycle.with_kubeconfig(load(stack), kubeconfig or None)
        if not yes:
            raise ConfigError(
                f"destroy deletes every resource of stack {stack!r}; rerun with --yes to confirm"
            )
        changes = lifecycle.destroy(spec, ROOT, backend or None, console())
    print(f"destroyed stack {spec.stack!r}: {changes}")


# No short flag for --show-secrets: invoke would give it `-h`, which everyone types for help.
@task(
    help={"stack": STACK_HELP, "backend": BACKEND_HELP, "show_secrets": "print secret outputs in clear"},
    auto_shortflags=False,
)
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
    },
    auto_shortflags=False,  # long options only: -r, -o, -b meant different things per task
)
def metal(
    c: Context, stack: str = "metal", check: bool = False, limit: str = "", reboot: bool = False
) -> None:
    """Prepare the stack's bare-metal GPU hosts with Ansible, and on a Slurm stack its Slurm cluster.

    Driver, container toolkit, fabric manager, verify (playbooks/gpu-hosts.yml); then on a Slurm stack MUNGE,
    slurmdbd, slurmctld, slurmd and the accounts (playbooks/slurm-cluster.yml)."""
    from infra.metal.run import prepare_hosts

    with user_errors():
        spec = load(stack)
        prepare_hosts(spec, BUILD / spec.stack, check=check, limit=limit, reboot=reboot, run=c.run)


@task(
    help={
        "stack": STACK_HELP,
        "out": "output folder (default: build/<stack>/manifests/)",
    }
)
def render(c: Context, stack: str = "dev", out: str = "") -> None:
    """Write the stack's objects as YAML for review or GitOps: scheduling policy, monitoring, Slurm config.

    The scheduling policy is one file per object plus kustomization.yaml; the monitoring side (alert rules,
    monitors, dashboards, chart values) goes in monitoring/.

    Under `cluster.autoscaler: karpenter` the NodePools and EC2NodeClasses go to <out>/karpenter/; a Slurm stack
    (`cluster.orchestrator: slurm`) gets slurm.conf, gres.conf, cgroup.conf and sacctmgr.sh in <out>/slurm/."""
    from infra.render import render_stack

    with user_errors():
        spec = load(stack)
        lines = render_stack(spec, Path(out) if out else BUILD / spec.stack / "manifests")
    for line in lines:
        print(line)


@task(
    help={
        "stack": STACK_HELP,
        "since": "the window: 90m, 24h, 7d, 2w (default 7d)",
        "until": "end of the window: ISO 8601 time or Unix timestamp (default: now)",
        "prometheus": "Prometheus URL (default http://localhost:9090, e.g. a kubectl port-forward; required "
        "when the stack has monitoring.prometheus: none)",
        "json": "print JSON instead of the table",
        "csv": "print CSV instead of the table",
        "price_file": "YAML/JSON map of pool name -> USD per GPU-hour (overrides catalog prices)",
        "out": "folder for the PNG plots (default: build/<stack>/usage/)",
        "sacct": "the sacct command for a Slurm stack (default: sacct on PATH; docs/slurm.md)",
    },
    auto_shortflags=False,  # long options only: -j, -o meant different things per task
)
def usage(
    c: Context,
    stack: str = "dev",
    since: str = "7d",
    until: str = "",
    prometheus: str = "",
    json: bool = False,
    csv: bool = False,
    price_file: str = "",
    out: str = "",
    sacct: str = "sacct",
) -> None:
    """GPU-hours per team and pool (allocated, used, idle), cost, quota use and queue waits, from Prometheus.

    On a Slurm stack (`cluster.orchestrator: slurm`): allocated GPU-hours and quota use from sacct."""
    from infra.errors import ConfigError
    from infra.monitoring.prices import gpu_hour_prices, read_price_file
    from infra.usage import report_usage

    with user_errors():
        if json and csv:
            raise ConfigError("give at most one of --json and --csv")
        spec = load(stack)
        prices = gpu_hour_prices(spec, read_price_file(Path(price_file)) if price_file else None)
        report_usage(spec, since=since, until=until, prices=prices, fmt="json" if json else "csv" if csv else "table",
                     console=console(), prometheus=prometheus, sacct=sacct,
                     plots=Path(out) if out else BUILD / spec.stack / "usage")  # fmt: skip


@task(
    help={
        "stack": STACK_HELP,
        "prometheus": "Prometheus URL (default http://localhost:9090)",
        "apply": "warn, then deactivate after the grace (needs gpufleet:cluster.monitoring.reclaimIdle: true)",
        "until": "evaluate idleness at this time (ISO 8601 or Unix timestamp; default: now)",
        "json": "print every decision (action, workload, pods, reason) and the counts as JSON",
    },
    auto_shortflags=False,  # long options only: -j, -o meant different things per task
)
def reclaim(
    c: Context,
    stack: str = "dev",
    prometheus: str = "http://localhost:9090",
    apply: bool = False,
    until: str = "",
    json: bool = False,
) -> None:
    """Warn, then deactivate in Kueue, the workloads of opted-in teams whose GPUs all stay idle (docs/operations.md)."""
    from infra.monitoring.workloads import as_json, reclaim_idle, summary

    say = (lambda _line: None) if json else print
    with user_errors():
        decisions = reclaim_idle(
            load(stack), prometheus=prometheus, apply=apply, until=until, run=c.run, say=say
        )
    if json:
        print(as_json(decisions, apply))
    elif decisions is None:
        print("no team opts in (gpufleet:teams[].reclaimIdle): nothing to reclaim")
    else:
        print(summary(decisions, apply))


TEAM_HELP = {
    "namespace": "the team's namespace (default: the kubeconfig context's)",
    "kubeconfig": "kubeconfig file (default: kubectl's)",
    "context": "kubeconfig context",
    "as-group": "impersonate a member of this group (kubectl --as-group), e.g. to see what the team sees",
    "stack": "a Slurm stack (cluster.orchestrator: slurm): answer from Slurm's commands instead (docs/teams.md)",
}
TEAM_EVENTS_HELP = "record each answer as an Event on its Workload (default: yes; --no-events to skip)"
ACCOUNT_HELP = "on a Slurm stack: the team's account (default: the one team you are a user of)"


def _team_kubectl(kubeconfig: str, context: str, as_group: str):  # -> scheduler.explain.cluster.Kubectl
    from scheduler.explain.cluster import Kubectl

    return Kubectl.of(kubeconfig=kubeconfig, context=context, groups=(as_group,) if as_group else ())


def _slurm(
    stack: str, account: str = "", **kubernetes: str
):  # -> scheduler.slurm.answers.reader.Slurm | None
    """The Slurm reader when `stack` is a Slurm stack; None without --stack (the Kubernetes answers). Bad input
    (a Kubernetes stack, Kubernetes options on a Slurm stack, --account without one) exits 2 naming the key."""
    from infra.errors import ConfigError
    from scheduler.slurm.answers.reader import Slurm

    if not stack:
        if account:
            raise ConfigError(
                "--account is for a Slurm stack (--stack); on Kubernetes a team is its --namespace"
            )
        return None
    spec = load(stack)
    if spec.cluster.orchestrator != "slurm":
        raise ConfigError(
            f"--stack {stack}: runs on Kubernetes, whose answers come from your kubeconfig: drop --stack"
        )
    given = [f"--{k.replace('_', '-')}" for k, v in kubernetes.items() if v]
    if given:
        raise ConfigError(f"{', '.join(given)}: Kubernetes options, not for Slurm stack {spec.stack}")
    return Slurm()


@task(help={**TEAM_HELP, "account": ACCOUNT_HELP}, auto_shortflags=False)
def quota(
    c: Context,
    namespace: str = "",
    kubeconfig: str = "",
    context: str = "",
    as_group: str = "",
    stack: str = "",
    account: str = "",
) -> None:
    """A team's GPU quota per pool: guarantee, use, borrowing, lending, and the cohort's free GPUs (docs/teams.md)."""
    from scheduler.explain import commands
    from scheduler.slurm.answers import commands as slurm_commands

    with user_errors():
        slurm = _slurm(
            stack, account, namespace=namespace, kubeconfig=kubeconfig, context=context, as_group=as_group
        )
        if slurm:
            print(slurm_commands.quota(slurm, account))
            return
        print(commands.quota(_team_kubectl(kubeconfig, context, as_group), namespace))


@task(help={**TEAM_HELP, "events": TEAM_EVENTS_HELP, "account": ACCOUNT_HELP}, auto_shortflags=False)
def queue(
    c: Context,
    namespace: str = "",
    kubeconfig: str = "",
    context: str = "",
    as_group: str = "",
    events: bool = True,
    stack: str = "",
    account: str = "",
) -> None:
    """A team's waiting jobs in Kueue's order, with each one's reason and what would let it start (docs/teams.md)."""
    from scheduler.explain import commands
    from scheduler.slurm.answers import commands as slurm_commands

    with user_errors():
        slurm = _slurm(
            stack, account, namespace=namespace, kubeconfig=kubeconfig, context=context, as_group=as_group
        )
        if slurm:
            print(slurm_commands.queue(slurm, account))
            return
        print(commands.queue(_team_kubectl(kubeconfig, context, as_group), namespace, record=events))


@task(help={"job": "a Job (or other job kind) name, or a Workload name; on a Slurm stack a job id", **TEAM_HELP,
            "events": TEAM_EVENTS_HELP}, auto_shortflags=False)  # fmt: skip
def why(
    c: Context,
    job: str,
    namespace: str = "",
    kubeconfig: str = "",
    context: str = "",
    as_group: str = "",
    events: bool = True,
    stack: str = "",
) -> None:
    """One job's story: its reason, place in line, admission checks, preemptions and nodes (docs/teams.md)."""
    from scheduler.explain import commands
    from scheduler.slurm.answers import commands as slurm_commands

    with user_errors():
        slurm = _slurm(stack, namespace=namespace, kubeconfig=kubeconfig, context=context, as_group=as_group)
        if slurm:
            print(slurm_commands.why(slurm, job))
            return
        print(commands.why(_team_kubectl(kubeconfig, context, as_group), job, namespace, record=events))


@task(help={"job": "a waiting Job (or other job kind) name, or a Workload name; on a Slurm stack a job id",
            "filename": "a Job manifest not yet submitted: when it would start (a dry run)",
            **TEAM_HELP, "events": TEAM_EVENTS_HELP}, auto_shortflags=False)  # fmt: skip
def eta(
    c: Context,
    job: str = "",
    filename: str = "",
    namespace: str = "",
    kubeconfig: str = "",
    context: str = "",
    as_group: str = "",
    events: bool = True,
    stack: str = "",
) -> None:
    """When a waiting job starts: p50 and p90 from the simulator on the live state; Slurm: squeue --start."""
    from scheduler.explain import cli, when
    from scheduler.explain.cluster import ClusterError
    from scheduler.slurm.answers import commands as slurm_commands

    with user_errors():
        if bool(job) == bool(filename):
            raise ClusterError("eta: give JOB or --filename FILE (one of them)", 2)
        slurm = _slurm(stack, namespace=namespace, kubeconfig=kubeconfig, context=context, as_group=as_group,
                       filename=filename)  # fmt: skip
        if slurm:
            print(slurm_commands.eta(slurm, job))
            return
        kubectl = _team_kubectl(kubeconfig, context, as_group)
        if filename:
            print(when.eta_manifest(kubectl, cli.manifest(filename), namespace))
        else:
            print(when.eta(kubectl, job, namespace, record=events))
