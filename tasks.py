"""invoke tasks: thin wrappers that parse arguments, call a library function, print, and exit.

Exit codes: 0 ok, 1 a check found problems, 2 bad input (config, trace), 3 a missing tool or credentials.
User errors print one clear message and no traceback; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from invoke import Context, Exit, task

ROOT = Path(__file__).resolve().parent
BUILD = ROOT / "build"


def _parse_errors_exit_2() -> None:
    """invoke's own parse errors (`invoke plann`, `invoke plan --nosuch`) exit 2, the README's code for bad
    input, with a hint, instead of invoke's fixed exit 1 (first-use review MINOR 2). invoke loads this file
    before it parses the task part of the command line (Program.run: parse_collection, then parse_tasks), and
    Program.run prints an Exit's message and exits with its code; nothing else of invoke changes."""
    import difflib
    import re

    from invoke.exceptions import ParseError
    from invoke.program import Program

    original = Program.parse_tasks
    if getattr(original, "gpufleet", False):
        return

    def parse_tasks(self: Program) -> None:
        try:
            original(self)
        except ParseError as exc:
            said = str(exc)
            unknown = re.fullmatch(r"No idea what '(.+)' is!", said)
            hint = "`invoke --list` lists the tasks, `invoke --help TASK` a task's options"
            if unknown and not unknown.group(1).startswith("-") and self.collection is not None:
                close = difflib.get_close_matches(unknown.group(1), self.collection.task_names, n=1)
                if close:
                    hint = f"did you mean `invoke {close[0]}`? {hint}"
            raise Exit(f"error: {said} ({hint})", code=2) from None

    parse_tasks.gpufleet = True  # type: ignore[attr-defined]
    Program.parse_tasks = parse_tasks  # type: ignore[method-assign]


_parse_errors_exit_2()

_CLI = Path(sys.argv[0]).name in ("invoke", "inv") or sys.argv[0].endswith(("invoke/__main__.py", "-m"))
if hasattr(signal, "SIGPIPE") and _CLI:
    # `invoke plan | head -1` ends quietly, as any Unix tool does when its reader closes the pipe, instead of
    # a BrokenPipeError traceback and exit 1 (first-use review MINOR 2). Only on the command line: a process
    # that imports this file (the test suite) keeps Python's own SIGPIPE handling, under which a write to a
    # closed socket is an exception, not the end of the process.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)


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
    from infra.slurm.site import print_slurm_plan, uses_slurm

    if uses_slurm(spec):
        print_slurm_plan(spec, console())


@task(help={"pytest_args": "extra arguments for pytest, e.g. '-k spec -x'"})
def test(c: Context, pytest_args: str = "") -> None:
    """Lint (ruff), type-check (mypy), check import contracts, then run every test."""
    import time

    py = sys.executable
    started = time.monotonic()
    phases = [
        "reference data",
        "ruff check",
        "ruff format",
        "mypy",
        "import contracts",
        "twin toolchain",
        "pytest",
    ]

    def phase(name: str) -> None:  # a line per phase, so a long run says where it is (first-use review, 23.2)
        print(
            f"==> [{phases.index(name) + 1}/{len(phases)}] {name} ({time.monotonic() - started:.0f} s)",
            flush=True,
        )

    phase("reference data")
    # First (2 s), so a machine without the data hears it before minutes of lint: the pinned upstream reference
    # data (traces, published curves, CRDs, chart values), ../shared or GPUFLEET_SHARED offline, otherwise
    # fetched, verified against benchmarks/reference-data.json and cached.
    found = c.run(f"{py} benchmarks/reference_data.py", hide="out", warn=True)
    if found is None or found.exited != 0:
        raise Exit(
            "the tests' reference data is missing and could not be fetched (see above): set GPUFLEET_SHARED to "
            "a folder that holds it, or fill the cache once from a mirror with "
            "`python benchmarks/reference_data.py --mirror URL` (README, Quickstart)",
            code=2,
        )
    shared = found.stdout.strip()
    phase("ruff check")
    c.run(f"{py} -m ruff check .")
    phase("ruff format")
    c.run(f"{py} -m ruff format --check .")
    phase("mypy")
    c.run(f"{py} -m mypy infra scheduler")
    phase("import contracts")
    c.run(f"{Path(py).parent / 'lint-imports'}")
    phase("twin toolchain")
    _twin_toolchain(c, py)
    phase("pytest")
    c.run(f"{py} -m pytest {pytest_args}", pty=False, env={"GPUFLEET_SHARED": shared})


def _twin_toolchain(c: Context, py: str) -> None:
    """The e2e tier's toolchain (tests/twin): built from Go modules where missing, into the cache outside the
    clone. Without Go, or when a build fails, the e2e tests say so: they fail under CI=true, skip elsewhere."""
    import os
    import shutil

    if shutil.which("go") is None:
        print("twin toolchain: Go is not installed; the e2e tier (tests/twin) cannot run", file=sys.stderr)
        return
    print("twin toolchain: building what is missing (`invoke twin-build`)", flush=True)
    built = c.run(f"{py} -m twin.toolchain.build", warn=True, pty=False)
    if (built is None or built.exited != 0) and os.environ.get("CI", "").lower() == "true":
        raise Exit("twin toolchain: the build failed (see above)", code=1)


def _int_list(text: str, what: str) -> list[int]:
    from infra.errors import ConfigError

    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--{what}: expected comma-separated integers, got {text!r}") from None


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
    from rich.progress import Progress

    if dynamic:
        return _simulate_dynamic(pods, stack, nodes, json, out, time_scale, provision_delay, seeds)

    from infra.errors import ConfigError
    from infra.simulate.report import print_summary, print_twin_runs
    from scheduler import sim
    from scheduler.sim.protocol import describe_pod, unhostable_pods
    from scheduler.sim.report import write_json, write_report

    with user_errors():
        if not pods or bool(stack) == bool(nodes):
            raise ConfigError("give --pods FILE and exactly one of --stack NAME or --nodes FILE")
        if as_deployed and stack:
            raise ConfigError("--as-deployed maps an openb trace onto --nodes; --stack is always as deployed")
        if replicas and not as_deployed:
            raise ConfigError(
                "--replicas applies to --as-deployed (time-slicing replicas per GPU of the mapping); with --stack "
                "the replicas are the stack's own (nodePools[].sharing.timeSlicing.replicas)"
            )
        replicas = replicas or 2
        if twin and not stack:
            raise ConfigError(
                "--twin replays the cluster as a stack deploys it: give --stack NAME (a trace's own nodes would "
                "have to offer whole and time-sliced GPUs of the same GPUs at once, which no device plugin does)"
            )
        seed_list = _int_list(seeds, "seeds") if seeds else list(sim.DEFAULT_SEEDS)
        notes: list[str] = []
        params: dict[str, dict[str, int]] = {}
        deployed = bool(stack) or as_deployed
        try:
            workload = sim.read_pods(pods)
            if stack:
                from infra.simulate.stack import route, stack_model

                spec = load(stack)
                model = stack_model(spec)
                name, cluster = spec.stack, model.cluster
                workload, routing = route(model, workload, spec)
                notes = routing.lines()
                params = {model.strategy: model.weights}
                default = ["FGD", "FGD-Extender", model.strategy]
            else:
                name, cluster = Path(nodes).stem, sim.read_nodes(nodes)
                default = list(sim.ALL_POLICIES)
                if as_deployed:
                    from scheduler.sim.deployed import as_deployed as map_trace

                    try:
                        workload, report = map_trace(workload, replicas)
                    except ValueError as exc:
                        raise ConfigError(f"--replicas: {exc}") from None
                    notes = report.lines()
                    default = ["FGD", "FGD-Extender", "MostAllocated", "LeastAllocated"]
            policies = [p.strip() for p in policy.split(",") if p.strip()] or default
            unknown = [p for p in policies if p.lower() not in {n.lower() for n in sim.REGISTRY}]
            if unknown:  # before any preamble: a typo is the first and only thing said
                raise sim.UnknownPolicyError(
                    f"--policy: unknown policy {unknown[0]!r}; choose from {', '.join(sorted(sim.REGISTRY))}"
                )
            if extender_http:
                params = {**params, "FGD-Extender": {"http": True}}
            never = unhostable_pods(cluster, workload)
            if never and strict:
                from scheduler.sim.protocol import check_fits_somewhere

                check_fits_somewhere(cluster, workload)
            if never:
                notes.append(f"{len(never)} pods no node can ever host (counted as failed); first rows:")
                label = "routed to pools" if stack else "gpu_spec"  # a stack's routing rewrites the column
                notes += [f"  {describe_pod(workload, i, label)}" for i in never[:5]]
            for line in notes:
                console().print(line)
            if "FGD-Extender" in policies and len(workload.names) > 2000:
                console().print(
                    f"FGD-Extender sends each of the {len(workload.names):,} pods through the extender's filter, "
                    "prioritize and bind verbs: a run takes a few times FGD's (docs/simulation.md); "
                    "--policy FGD,... leaves it out"
                )
            total = len(policies) * len(seed_list)
            with Progress(console=console(), transient=True) as bar:
                job = bar.add_task(f"{len(policies)} policies x {len(seed_list)} seeds", total=total)
                results = sim.run_many(
                    cluster,
                    workload,
                    policies,
                    seed_list,
                    processes=processes or None,
                    on_done=_progress(bar, job, total),
                    params=params,
                    share_rule="distributed" if deployed else "policy",
                    strict=strict,
                )
            twin_runs = []
            if twin:
                from twin.replay import replay_stack

                profiles = ["MostAllocated", "FragmentationAware"]
                with Progress(console=console(), transient=True) as bar:
                    job = bar.add_task(
                        f"through the real scheduler: {len(profiles)} profiles x {len(seed_list)} seeds",
                        total=len(profiles) * len(seed_list),
                    )
                    twin_runs = replay_stack(
                        cluster, model.units, workload, profiles, seed_list, BUILD / name / "sim" / "twin",
                        on_done=lambda _r: bar.advance(job),
                    )  # fmt: skip
        except (sim.TraceError, sim.UnknownPolicyError) as exc:
            raise ConfigError(str(exc)) from None
    if twin_runs:
        print_twin_runs(console(), twin_runs, results, name)
        notes = [*notes, *twin_notes(twin_runs)]
    print_summary(console(), name, cluster, workload, results)
    context = [
        f"cluster: {stack or nodes} ({cluster.size} nodes)",
        f"pods: {pods}",
        f"seeds: {seed_list}",
        *notes,
    ]
    gpus = int(cluster.num_gpu.sum())
    if gpus < 16:
        small = (
            f"only {gpus} GPUs: one pod moves the percentages by {100 / gpus:.0f} points or more, so the "
            "policies' differences here say little"
        )
        console().print(small)
        context.append(small)
    folder = Path(out) if out else BUILD / name / ("sim-as-deployed" if as_deployed else "sim")
    title = f"{stack or Path(nodes).name}{' as deployed' if as_deployed else ''}, {Path(pods).name}"
    report = write_report(results, folder, title, context)
    for path in (report, folder / "unallocated.png", folder / "fragmentation.png"):
        print(f"wrote {path}")
    if json:
        write_json(results, Path(json))
        print(f"wrote {json}")
        if twin_runs:  # the real scheduler's runs, in the same form, beside the simulator's
            twin_json = Path(json).with_suffix(".twin.json")
            write_json([r.result for r in twin_runs], twin_json)
            print(f"wrote {twin_json}")


def _simulate_dynamic(
    pods: str,
    stack: str,
    nodes: str,
    json_path: str,
    out: str,
    time_scale: float,
    provision: float,
    seeds: str,
) -> None:
    """`invoke simulate --dynamic`: the stack's policy over time against the alternatives
    (scheduler.sim.dynamic.alternatives, infra.simulate.dynamic_report)."""
    from rich.progress import Progress

    from infra.errors import ConfigError
    from infra.simulate.dynamic import stack_world
    from infra.simulate.dynamic_report import print_comparison, to_json, write_dynamic_report
    from scheduler.sim.dynamic.alternatives import names, run_comparison
    from scheduler.sim.errors import TraceError
    from scheduler.sim.timed_traces import read_timed_pods

    with user_errors():
        if not pods or not stack or nodes:
            raise ConfigError("--dynamic replays the stack's own policy: give --pods FILE and --stack NAME")
        if not time_scale > 0:
            raise ConfigError(f"--time-scale: must be a number > 0, got {time_scale:g}")
        seed = _int_list(seeds, "seeds")[0] if seeds else 42
        spec = load(stack)
        try:
            trace = read_timed_pods(pods)
            made = stack_world(
                spec,
                trace,
                seed=seed,
                time_scale=time_scale,
                provision_s=provision if provision >= 0 else None,
            )
        except TraceError as exc:
            raise ConfigError(str(exc)) from None
    world = made.world
    context = [
        f"stack: {spec.stack} ({world.cluster.size} nodes at maxSize, {int(world.cluster.num_gpu.sum())} GPUs)",
        f"trace: {pods} ({world.jobs.size} GPU jobs; {made.cpu_only_jobs} CPU-only pods left out), "
        f"time scale {time_scale:g}, seed {seed}",
        f"teams: {', '.join(q.name for q in world.queues)}; the stack's placement: {made.stack_policy}",
    ]
    for line in context:
        console().print(line)
    approaches = names()
    total = 2 * len(approaches)
    with Progress(console=console(), transient=True) as bar:
        job = bar.add_task(f"{len(approaches)} approaches x with/without autoscaling", total=total)
        results = run_comparison(world, approaches, on_done=lambda *_: bar.advance(job))
    print_comparison(console(), f"{spec.stack}: the promise over time, {Path(pods).name}", results)
    folder = Path(out) if out else BUILD / spec.stack / "sim-dynamic"
    for path in write_dynamic_report(
        results, folder, f"{spec.stack}, {Path(pods).name}", context, made.stack_approach
    ):
        print(f"wrote {path}")
    if json_path:
        Path(json_path).write_text(to_json(results, {"lines": context}))
        print(f"wrote {json_path}")


# ---- The twin: the stack's cluster on real components (twin) ---------------------------------------


@task(
    help={
        "stack": STACK_HELP,
        "minor": "Kubernetes minor to run (default: the stack's kubernetesVersion; built: 1.35, 1.36)",
        "nodes": "nodes per autoscaled pool: desired (default), min, max or a number",
        "bare": "control plane, nodes and Kueue only; do not deploy the stack's policy",
        "run": "run this command in the twin (KUBECONFIG set, the twin's kubectl on PATH), then stop it; "
        "exit with the command's status",
        "monitoring": "also run the metrics chain: the Prometheus operator, Prometheus, Alertmanager, "
        "kube-state-metrics and a dcgm-exporter stand-in, scraping the twin (needs monitoring.prometheus)",
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
) -> None:
    """Bring up the stack's cluster on real Kubernetes components as local processes (docs/twin.md)."""
    from twin import launch

    with user_errors():
        path = stack_file(stack)
        spec = load(stack)
        from infra.errors import ConfigError
        from infra.slurm.site import uses_slurm

        if uses_slurm(spec):
            _slurm_twin(spec, run=run, minor=minor, bare=bare, monitoring=monitoring, nodes=nodes)
            return
        if monitoring and not spec.cluster.monitoring.enabled:
            raise ConfigError(
                "--monitoring: gpufleet:cluster.monitoring.prometheus is none; set install or existing"
            )
        started = launch.start(
            path, spec, BUILD / spec.stack / "twin", minor=minor, nodes=nodes, bare=bare, run=run,
            monitoring=monitoring,
        )  # fmt: skip
    if run:
        code = started.process.wait()
        started.stop()
        if code:
            raise Exit(code=code)
        return
    code = launch.serve(started)
    if code:
        raise Exit(f"the twin stopped (exit {code}); logs in {started.folder / 'logs'}", code=1)


def _slurm_twin(spec: Any, *, run: str, minor: str, bare: bool, monitoring: bool, nodes: str) -> None:
    """`invoke twin` for a Slurm stack: the stack's Slurm cluster on loopback (twin.slurm), with its
    accounts; `--run CMD` runs where sbatch/squeue reach its controller, then stops it."""
    import subprocess

    from infra.errors import ConfigError
    from twin import launch
    from twin.slurm import start_twin, twin_environment

    kubernetes_only = [f"--{name}" for name, on in (("minor", minor), ("bare", bare), ("monitoring", monitoring),
                                                    ("nodes", nodes != "desired")) if on]  # fmt: skip
    if kubernetes_only:
        raise ConfigError(
            f"{', '.join(kubernetes_only)}: options of the Kubernetes twin; a Slurm stack's twin runs every host "
            "of its pools as configured"
        )
    held = launch._take_lock(spec.stack, launch.lock_path())
    try:
        cluster = start_twin(spec, BUILD / spec.stack / "twin")
        try:
            env = twin_environment(cluster)
            if run:
                code = subprocess.run(run, shell=True, env=env, check=False).returncode
                if code:
                    raise Exit(code=code)
                return
            print(
                f"Slurm twin is up: {len(cluster.hosts)} nodes, accounts {', '.join(t.name for t in spec.teams)}"
            )
            print(f"  export SLURM_CONF={env['SLURM_CONF']}")
            print(
                "  sinfo; sbatch --account=TEAM --gres=gpu:TYPE:N ...   (this user is in every team's account)"
            )
            print("Ctrl-C stops it.")
            try:
                while all(p.poll() is None for p in cluster.procs):
                    time.sleep(1)
                raise Exit(f"a Slurm daemon stopped; logs in {cluster.root / 'log'}", code=1)
            except KeyboardInterrupt:
                return
        finally:
            cluster.stop()
    finally:
        held.close()


@task(help={"minor": "build only this Kubernetes minor's control plane (default: every minor the twin runs)"})
def twin_build(c: Context, minor: str = "") -> None:
    """Build the twin's toolchain from Go modules into the cache outside the clone (what is missing only)."""
    from twin.toolchain.build import main as build_main

    with user_errors():
        build_main([minor] if minor else [])


def twin_notes(runs: list) -> list[str]:  # type: ignore[type-arg]
    """The report's lines for the real scheduler's replays (means over the seeds)."""
    from statistics import mean

    out = []
    for profile in ("MostAllocated", "FragmentationAware"):
        mine = [r for r in runs if r.result.policy == profile]
        if mine:
            out.append(
                f"through the real scheduler (twin), {profile}: unallocated GPU % @100 "
                f"{mean(r.result.unallocated(100) for r in mine):.2f}, failed pods "
                f"{mean(r.result.failed for r in mine):.1f}, {mean(r.pods_per_second for r in mine):.1f} pods/s"
            )
    return out


def _kubectl_failure(args: str, stderr: str, spec: Any) -> str:
    """One line for a failed kubectl call: its own message without client-go's klog lines (`E1201 12:00:00
    ... memcache.go:265] "Unhandled Error"`, the klog header format `Lmmdd hh:mm:ss.uuuuuu`), and what to do
    (first-use review MINOR 4)."""
    import re

    lines = [line for line in stderr.splitlines() if line.strip() and not re.match(r"^[IWEF]\d{4} ", line)]
    said = lines[-1].strip() if lines else (stderr.strip().splitlines() or ["no message"])[-1]
    if spec.cluster.kubeconfig:
        fix = f"check gpufleet:cluster.kubeconfig ({spec.cluster.kubeconfig}) reaches the cluster"
    else:
        fix = f"run `invoke kubeconfig --stack {spec.stack}` and export the KUBECONFIG it prints"
    return f"kubectl {args.split(' -o ')[0]} failed: {said}; {fix}"


def _progress(bar: Any, job: Any, total: int) -> Callable[[Any], None]:
    """The bar in a terminal; in a log (CI, a pipe), where Rich draws no bar, a line per finished run."""
    done = [0]

    def advance(result: Any) -> None:
        done[0] += 1
        bar.advance(job)
        if not bar.console.is_terminal:
            print(
                f"[{done[0]}/{total}] {result.policy} seed {result.seed}: {result.seconds:.1f} s, "
                f"unallocated GPU {result.unallocated():.1f} % at 100 % arrived",
                flush=True,
            )

    return advance


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


@task(help={"stack": STACK_HELP, "backend": BACKEND_HELP, "kubeconfig": KUBECONFIG_HELP})
def deploy(c: Context, stack: str = "dev", backend: str = "", kubeconfig: str = "") -> None:
    """Preflight, then create or update the stack (`pulumi up`), streaming resource changes."""
    from infra import deploy as lifecycle

    with user_errors():
        spec = lifecycle.with_kubeconfig(load(stack), kubeconfig or None)
        changes = lifecycle.deploy(spec, ROOT, backend or None, console())
    print(f"deployed stack {spec.stack!r}: {changes}")


@task(help={"stack": STACK_HELP, "backend": BACKEND_HELP, "kubeconfig": KUBECONFIG_HELP})
def preview(c: Context, stack: str = "dev", backend: str = "", kubeconfig: str = "") -> None:
    """Show what `invoke deploy` would change, without changing anything."""
    from infra import deploy as lifecycle

    with user_errors():
        spec = lifecycle.with_kubeconfig(load(stack), kubeconfig or None)
        changes = lifecycle.preview(spec, ROOT, backend or None, console())
    print(f"preview of stack {spec.stack!r}: {changes}")


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
    import os
    import shlex
    import shutil

    import yaml

    from infra.errors import CheckFailed, ConfigError, ToolMissing
    from infra.gpu_stack.gpu_operator import gpu_operator_values
    from infra.metal.inventory import PARENT_GROUP, group_limits, playbook_command, render_inventory

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
            kubeconfig=spec.cluster.kubeconfig,
            # The operator's device plugin asks the runtime for CDI devices; the host toolkit must agree.
            cdi_enabled=spec.cluster.driver_managed_by == "host"
            and bool(gpu_operator_values(spec)["cdi"]["enabled"]),
        )
        from infra.slurm.site import render_slurm, slurm_inventory, slurm_playbook_command, uses_slurm

        slurm = uses_slurm(spec)
        if slurm:  # no Kubernetes node to cordon before a driver change: Slurm drains its own (slurm_node)
            inventory[PARENT_GROUP]["vars"]["nvidia_driver_drain_enabled"] = False
        path = BUILD / spec.stack / "inventory.yml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(inventory, sort_keys=False))
        print(f"wrote {path}")
        resume = f"invoke metal --stack {spec.stack} --reboot"
        commands = [
            playbook_command(path, check, group, reboot=reboot, continue_command=resume)
            for group in group_limits(inventory, limit or None)
        ]
        if slurm:  # then Slurm: accounting and controllers first, the GPU hosts in drained batches
            render_slurm(spec, BUILD / spec.stack)
            slurm_path = BUILD / spec.stack / "slurm-inventory.yml"
            slurm_path.write_text(yaml.safe_dump(slurm_inventory(spec, BUILD / spec.stack), sort_keys=False))
            print(f"wrote {slurm_path} and the Slurm configuration in {BUILD / spec.stack / 'slurm'}")
            commands.append(slurm_playbook_command(slurm_path, check, limit or None))
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
                f"the playbook needs the community.general collection: {shlex.quote(str(galaxy))} collection "
                "install -r ansible/requirements.yml (from Ansible Galaxy), or, where only PyPI is reachable, "
                f"{shlex.quote(str(Path(binary).with_name('pip')))} install ansible==12.3.0 (it ships "
                "community.general 11.4.2)"
            )
        env = {"ANSIBLE_CONFIG": str(ROOT / "ansible" / "ansible.cfg")}
        # One host group after another: a failed group stops the rollout before the next one starts.
        for argv in commands:
            argv[0] = binary
            result = c.run(shlex.join(argv), env={**os.environ, **env}, warn=True, pty=False)
            if result is None or result.exited != 0:
                code = "?" if result is None else result.exited  # a failed Result is falsy: test for None
                what = argv[argv.index("--limit") + 1] if "--limit" in argv else "the Slurm hosts"
                raise CheckFailed(
                    f"the playbook {Path(argv[3]).name} failed for {what} (exit {code}); "
                    "see its output and recap above; later host groups were not touched"
                )


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
    from infra.scheduling import scheduler_inputs
    from scheduler import compile as compile_policy
    from scheduler import kueue_values
    from scheduler import render as render_objects

    with user_errors():
        spec = load(stack)
        policy, pools = scheduler_inputs(spec)
        objects = compile_policy(policy, pools)
    folder = Path(out) if out else BUILD / spec.stack / "manifests"
    from infra.slurm.site import SUBDIR as SLURM_DIR
    from infra.slurm.site import render_slurm, uses_slurm

    if uses_slurm(spec):  # no Kubernetes objects: the Slurm configuration and the sacctmgr script instead
        print(f"wrote {len(render_slurm(spec, folder))} Slurm files to {folder / SLURM_DIR}")
        return
    paths = render_objects(objects, folder, kueue_values=kueue_values(policy))
    print(f"wrote {len(objects)} objects ({len(paths)} files) to {folder}")
    from infra.monitoring.render import FOLDER, render_monitoring

    if monitoring := render_monitoring(spec, folder):
        print(f"wrote {len(monitoring)} monitoring file(s) to {folder / FOLDER}")

    from scheduler.checks import warnings

    for warning in warnings(pools):
        print(f"warning: {warning}")

    from infra.pools import uses_karpenter

    if uses_karpenter(spec):
        from infra.aws.karpenter.render import SUBDIR, render_karpenter

        written = render_karpenter(spec, folder)
        print(f"wrote {len(written) - 1} Karpenter objects to {folder / SUBDIR}")


@task(
    help={
        "stack": STACK_HELP,
        "since": "the window: 90m, 24h, 7d, 2w (default 7d)",
        "until": "end of the window: ISO 8601 time or Unix timestamp (default: now)",
        "prometheus": "Prometheus URL (default http://localhost:9090, e.g. a kubectl port-forward)",
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
    prometheus: str = "http://localhost:9090",
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
    from infra.monitoring.prometheus import Prometheus
    from infra.monitoring.usage import build_report
    from infra.monitoring.usage_report import print_report, to_csv, to_json, write_plots

    with user_errors():
        if json and csv:
            raise ConfigError("give at most one of --json and --csv")
        spec = load(stack)
        prices = gpu_hour_prices(spec, read_price_file(Path(price_file)) if price_file else None)
        if spec.cluster.orchestrator == "slurm":  # no Prometheus of gpufleet's: Slurm's own accounting
            from infra.slurm import usage as slurm_usage

            slurm = slurm_usage.slurm_usage(spec, since, until, sacct, prices)
            if json or csv:
                print((slurm_usage.to_json if json else slurm_usage.to_csv)(slurm), end="")
            else:
                slurm_usage.print_usage(slurm, console())
            return
        report = build_report(spec, Prometheus(prometheus), since, until, prices)
    if json:
        print(to_json(report), end="")
    elif csv:
        print(to_csv(report), end="")
    else:
        print_report(report, console())
    plots = write_plots(report, Path(out) if out else BUILD / spec.stack / "usage")
    if plots:
        print(f"wrote {len(plots)} plots to {plots[0].parent}", file=sys.stderr)
    else:
        print("no plots: Prometheus has none of the report's metrics for this window", file=sys.stderr)


@task(
    help={
        "stack": STACK_HELP,
        "prometheus": "Prometheus URL (default http://localhost:9090)",
        "apply": "warn, then deactivate after the grace (needs gpufleet:cluster.monitoring.reclaimIdle: true)",
        "until": "evaluate idleness at this time (ISO 8601 or Unix timestamp; default: now)",
    },
    auto_shortflags=False,  # long options only: -j, -o meant different things per task
)
def reclaim(
    c: Context,
    stack: str = "dev",
    prometheus: str = "http://localhost:9090",
    apply: bool = False,
    until: str = "",
) -> None:
    """Warn, then deactivate in Kueue, the workloads of opted-in teams whose GPUs all stay idle (docs/operations.md)."""
    import io
    import json as jsonlib
    import shlex

    from infra.errors import ConfigError, ToolMissing
    from infra.monitoring.prometheus import Prometheus
    from infra.monitoring.reclaim import idle_and_gpu_pods, plan_reclaim, resolve_owners, team_policies
    from infra.monitoring.usage import parse_until

    with user_errors():
        spec = load(stack)
        if apply and not spec.cluster.monitoring.reclaim_idle:
            raise ConfigError(
                "gpufleet:cluster.monitoring.reclaimIdle is false: set it to true to let --apply act on workloads"
            )
        policies = team_policies(spec)
        if not policies:
            print("no team opts in (gpufleet:teams[].reclaimIdle): nothing to reclaim")
            return
        at = parse_until(until)
        idle, holding = idle_and_gpu_pods(Prometheus(prometheus), policies, at)
        found = c.run("kubectl version --client", hide=True, warn=True)
        if found is None or found.exited != 0:
            raise ToolMissing(
                "kubectl not found or not working: install it and point KUBECONFIG at the cluster"
            )
        # The stack's own cluster: an existing stack names its kubeconfig (and context); an AWS stack's is
        # written by `invoke kubeconfig` and exported by the user.
        env = (
            {"KUBECONFIG": str(Path(spec.cluster.kubeconfig).expanduser())} if spec.cluster.kubeconfig else {}
        )
        context = (
            f"--context {shlex.quote(spec.cluster.kubeconfig_context)} "
            if spec.cluster.kubeconfig_context
            else ""
        )

        def kubectl(args: str, stdin: str | None = None, missing_ok: bool = False) -> dict[str, Any] | None:
            stream = {} if stdin is None else {"in_stream": io.StringIO(stdin)}
            got = c.run(f"kubectl {context}{args}", hide=True, warn=True, env=env, **stream)
            if got is None or got.exited != 0:
                if missing_ok:
                    return None
                raise ToolMissing(_kubectl_failure(args, getattr(got, "stderr", ""), spec))
            return dict(jsonlib.loads(got.stdout or "{}"))

        def items(kind: str, ns: str) -> list[dict[str, Any]]:
            return list((kubectl(f"get {kind} -n {shlex.quote(ns)} -o json") or {}).get("items", []))

        def owner(ns: str, api_version: str, kind: str, name: str) -> dict[str, Any] | None:
            group, _, version = api_version.rpartition("/")
            what = f"{kind}.{version}.{group}" if group else kind
            return kubectl(
                f"get {shlex.quote(what)} {shlex.quote(name)} -n {shlex.quote(ns)} -o json", missing_ok=True
            )

        namespaces = [p.namespace for p in policies]
        pods = {ns: items("pods", ns) for ns in namespaces}
        workloads = {ns: items("workloads.kueue.x-k8s.io", ns) for ns in namespaces}
        owners = resolve_owners(
            [p for ns in namespaces for p in pods[ns]], [w for ns in namespaces for w in workloads[ns]], owner
        )
        decisions = plan_reclaim(policies, idle, holding, pods, workloads, owners, at)
        for d in decisions:
            print(d.line(apply))
            patch, event = d.patch(at), d.event(at)
            if apply and patch is not None:
                kubectl(
                    f"patch workloads.kueue.x-k8s.io {shlex.quote(d.workload)} -n {shlex.quote(d.namespace)} "
                    f"--type merge -p {shlex.quote(jsonlib.dumps(patch))} -o json"
                )
            if apply and event is not None:
                kubectl("create -f - -o json", stdin=jsonlib.dumps(event))
    counts = {a: sum(d.action == a for d in decisions) for a in ("warn", "deactivate", "clear", "skip")}
    summary = ", ".join(f"{n} {a}" for a, n in counts.items())
    print(f"{'applied' if apply else 'dry run (--apply to act)'}: {summary}")
