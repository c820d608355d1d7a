"""`invoke simulate`: a pod trace replayed against placement policies on a stack's cluster (or a node CSV),
with the report written beside it; with `dynamic`, jobs over time through the stack's queues against the naive
alternatives.

Everything the command line can get wrong (flag combinations, the trace, a policy name) is checked here and
raised as `ConfigError`, before any run starts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from statistics import mean
from typing import Any

from rich.console import Console
from rich.progress import Progress

from infra.errors import ConfigError, on_stop, writing
from infra.simulate.dynamic import stack_world
from infra.simulate.dynamic_report import print_comparison, to_json, write_dynamic_report
from infra.simulate.report import print_summary, print_twin_runs
from infra.simulate.stack import route, share_rule, stack_model
from infra.spec import ClusterSpec
from scheduler import sim
from scheduler.fgd.frag import ShareRule
from scheduler.fgd.model import MILLI
from scheduler.sim.dynamic.alternatives import names, run_comparison
from scheduler.sim.errors import TraceError
from scheduler.sim.protocol import describe_pod, unhostable_pods
from scheduler.sim.report import write_json, write_report
from scheduler.sim.timed_traces import read_timed_pods

# The real scheduler's replay (`--twin`) lives in the twin, a room above this one: the command passes it in.
TwinReplay = Callable[..., list[Any]]


@dataclass(frozen=True)
class Request:
    """What `invoke simulate` was asked: the trace, the cluster (a stack or a node CSV) and how to run."""

    pods: str
    stack: str
    nodes: str
    policy: str
    seeds: str
    json: str
    processes: int
    as_deployed: bool
    replicas: int
    strict: bool
    twin: bool
    extender_http: bool
    out: str
    dynamic: bool
    time_scale: float
    provision_delay: float


def simulate(
    req: Request,
    *,
    load: Callable[[str], ClusterSpec],
    console: Console,
    build: Path,
    twin_replay: TwinReplay | None = None,
) -> None:
    """Run what was asked: the placement replay, or with `dynamic` the comparison over time. `load` reads a
    stack by name (the command's own resolution of names and paths)."""
    if req.dynamic:
        simulate_over_time(req, load, console, build)
    else:
        simulate_placement(req, load, console, build, twin_replay)


def int_list(text: str, what: str) -> list[int]:
    """`--seeds 1,2,3` as integers; anything else is bad input naming the flag."""
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--{what}: expected comma-separated integers, got {text!r}") from None


def progress(bar: Any, job: Any, total: int) -> Callable[[Any], None]:
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


def twin_notes(runs: list[Any]) -> list[str]:
    """The report's lines for the real scheduler's replays (means over the seeds); with DRA claims, how many
    pods claimed and how many the allocator gave other GPUs than the simulator's first fit (summed)."""
    out = []
    for profile in ("MostAllocated", "FragmentationAware"):
        mine = [r for r in runs if r.result.policy == profile]
        if mine:
            claimed = sum(r.claimed for r in mine)
            devices = (
                f"; {sum(r.devices_differ for r in mine)} of {claimed} claiming pods got other GPUs than the "
                "simulator's first fit"
                if claimed
                else ""
            )
            out.append(
                f"through the real scheduler (twin), {profile}: unallocated GPU % @100 "
                f"{mean(r.result.unallocated(100) for r in mine):.2f}, failed pods "
                f"{mean(r.result.failed for r in mine):.1f}, {mean(r.pods_per_second for r in mine):.1f} pods/s"
                f"{devices}"
            )
    return out


def _check(req: Request) -> None:
    if not req.pods or bool(req.stack) == bool(req.nodes):
        raise ConfigError("give --pods FILE and exactly one of --stack NAME or --nodes FILE")
    if req.as_deployed and req.stack:
        raise ConfigError("--as-deployed maps an openb trace onto --nodes; --stack is always as deployed")
    if req.replicas and not req.as_deployed:
        raise ConfigError(
            "--replicas applies to --as-deployed (time-slicing replicas per GPU of the mapping); with --stack "
            "the replicas are the stack's own (nodePools[].sharing.timeSlicing.replicas)"
        )
    if req.twin and not req.stack:
        raise ConfigError(
            "--twin replays the cluster as a stack deploys it: give --stack NAME (a trace's own nodes would "
            "have to offer whole and time-sliced GPUs of the same GPUs at once, which no device plugin does)"
        )


def simulate_placement(
    req: Request,
    load: Callable[[str], ClusterSpec],
    console: Console,
    build: Path,
    twin_replay: TwinReplay | None,
) -> None:
    """The static replay: every policy x seed on the cluster, the summary printed, the report written."""
    _check(req)
    replicas = req.replicas or 2
    seed_list = int_list(req.seeds, "seeds") if req.seeds else list(sim.DEFAULT_SEEDS)
    notes: list[str] = []
    params: dict[str, dict[str, int]] = {}
    rule: ShareRule = "distributed" if req.as_deployed else "policy"
    try:
        workload = sim.read_pods(req.pods)
        if req.stack:
            spec = load(req.stack)
            model = stack_model(spec)
            name, cluster = spec.stack, model.cluster
            rule = share_rule(model)
            workload, routing = route(model, workload, spec)
            notes = routing.lines()
            params = {model.strategy: model.weights}
            # FGD-Extender reads extended resources with one replica count per GPU: it leaves out stacks whose
            # shares are claims (FGD-Extender-DRA replays those) or come in slices of several sizes
            sizes = sorted({int(m) for m in workload.gpu_milli[workload.gpu_milli < MILLI].tolist()})
            default = ["FGD", model.strategy]
            if rule != "first-fit" and len(sizes) <= 1:
                default.insert(1, "FGD-Extender")
            elif rule != "first-fit":
                notes.append(
                    f"FGD-Extender left out: the stack's shares come in {len(sizes)} slice sizes "
                    f"({', '.join(f'{m} milli-GPU' for m in sizes)}), and the extender's view has one per GPU"
                )
        else:
            name, cluster = Path(req.nodes).stem, sim.read_nodes(req.nodes)
            default = list(sim.ALL_POLICIES)
            if req.as_deployed:
                from scheduler.sim.deployed import as_deployed as map_trace

                try:
                    workload, report = map_trace(workload, replicas)
                except ValueError as exc:
                    raise ConfigError(f"--replicas: {exc}") from None
                notes = report.lines()
                default = ["FGD", "FGD-Extender", "MostAllocated", "LeastAllocated"]
        policies = [p.strip() for p in req.policy.split(",") if p.strip()] or default
        unknown = [p for p in policies if p.lower() not in {n.lower() for n in sim.REGISTRY}]
        if unknown:  # before any preamble: a typo is the first and only thing said
            raise sim.UnknownPolicyError(
                f"--policy: unknown policy {unknown[0]!r}; choose from {', '.join(sorted(sim.REGISTRY))}"
            )
        if req.extender_http:
            params = {**params, "FGD-Extender": {"http": True}}
        never = unhostable_pods(cluster, workload)
        if never and req.strict:
            from scheduler.sim.protocol import check_fits_somewhere

            check_fits_somewhere(cluster, workload)
        if never:
            notes.append(f"{len(never)} pods no node can ever host (counted as failed); first rows:")
            label = "routed to pools" if req.stack else "gpu_spec"  # a stack's routing rewrites the column
            notes += [f"  {describe_pod(workload, i, label)}" for i in never[:5]]
        for line in notes:
            console.print(line)
        if "FGD-Extender" in policies and len(workload.names) > 2000:
            console.print(
                f"FGD-Extender sends each of the {len(workload.names):,} pods through the extender's filter, "
                "prioritize verbs: a run takes a few times FGD's (docs/simulation.md); "
                "--policy FGD,... leaves it out"
            )
        total = len(policies) * len(seed_list)
        untouched = on_stop(f"nothing was written to {_folder(req, build, name)}")
        with untouched, Progress(console=console, transient=True) as bar:
            job = bar.add_task(f"{len(policies)} policies x {len(seed_list)} seeds", total=total)
            results = sim.run_many(
                cluster,
                workload,
                policies,
                seed_list,
                processes=req.processes or None,
                on_done=progress(bar, job, total),
                params=params,
                share_rule=rule,
                strict=req.strict,
            )
        twin_runs = []
        if req.twin and twin_replay is not None:
            profiles = ["MostAllocated", "FragmentationAware"]
            untouched = on_stop(f"nothing was written to {_folder(req, build, name)}")
            with untouched, Progress(console=console, transient=True) as bar:
                job = bar.add_task(
                    f"through the real scheduler: {len(profiles)} profiles x {len(seed_list)} seeds",
                    total=len(profiles) * len(seed_list),
                )
                twin_runs = twin_replay(
                    cluster, model.units, workload, profiles, seed_list, build / name / "sim" / "twin",
                    on_done=lambda _r: bar.advance(job), share_rule=rule, claims=model.claims,
                    gpu_models=model.gpu_models,
                )  # fmt: skip
    except (sim.TraceError, sim.UnknownPolicyError) as exc:
        raise ConfigError(str(exc)) from None
    _write(req, console, build, name, cluster, workload, results, twin_runs, notes, seed_list)


def _write(
    req: Request,
    console: Console,
    build: Path,
    name: str,
    cluster: Any,
    workload: Any,
    results: list[Any],
    twin_runs: list[Any],
    notes: list[str],
    seed_list: list[int],
) -> None:
    """The summary on the terminal; report.md, its plots and the JSON written."""
    if twin_runs:
        print_twin_runs(console, twin_runs, results, name)
        notes = [*notes, *twin_notes(twin_runs)]
    print_summary(console, name, cluster, workload, results)
    context = [
        f"cluster: {req.stack or req.nodes} ({cluster.size} nodes)",
        f"pods: {req.pods}",
        f"seeds: {seed_list}",
        *notes,
    ]
    gpus = int(cluster.num_gpu.sum())
    if gpus < 16:
        small = (
            f"only {gpus} GPUs: one pod moves the percentages by {100 / gpus:.0f} points or more, so the "
            "policies' differences here say little"
        )
        console.print(small)
        context.append(small)
    folder = _folder(req, build, name)
    title = f"{req.stack or Path(req.nodes).name}{' as deployed' if req.as_deployed else ''}, {Path(req.pods).name}"
    with on_stop(f"{folder} may hold part of the report: run the command again"), writing(folder):
        report = write_report(results, folder, title, context)
        for path in (report, folder / "unallocated.png", folder / "fragmentation.png"):
            print(f"wrote {path}")
        if req.json:
            write_json(results, Path(req.json))
            print(f"wrote {req.json}")
            if twin_runs:  # the real scheduler's runs, in the same form, beside the simulator's
                twin_json = Path(req.json).with_suffix(".twin.json")
                write_json([r.result for r in twin_runs], twin_json)
                print(f"wrote {twin_json}")


def _folder(req: Request, build: Path, name: str) -> Path:
    """Where the report goes: --out, else build/<stack or nodes file>/sim (sim-as-deployed)."""
    return Path(req.out) if req.out else build / name / ("sim-as-deployed" if req.as_deployed else "sim")


def simulate_over_time(
    req: Request, load: Callable[[str], ClusterSpec], console: Console, build: Path
) -> None:
    """`--dynamic`: the stack's policy over time against the alternatives, with and without autoscaling."""
    if not req.pods or not req.stack or req.nodes:
        raise ConfigError("--dynamic replays the stack's own policy: give --pods FILE and --stack NAME")
    if not req.time_scale > 0:
        raise ConfigError(f"--time-scale: must be a number > 0, got {req.time_scale:g}")
    seed = int_list(req.seeds, "seeds")[0] if req.seeds else 42
    spec = load(req.stack)
    try:
        trace = read_timed_pods(req.pods)
        made = stack_world(
            spec,
            trace,
            seed=seed,
            time_scale=req.time_scale,
            provision_s=req.provision_delay if req.provision_delay >= 0 else None,
            gpu_speed=True,
        )
    except TraceError as exc:
        raise ConfigError(str(exc)) from None
    world = made.world
    context = [
        f"stack: {spec.stack} ({world.cluster.size} nodes at maxSize, {int(world.cluster.num_gpu.sum())} GPUs)",
        f"trace: {req.pods} ({world.jobs.size} GPU jobs; {made.cpu_only_jobs} CPU-only pods left out), "
        f"time scale {req.time_scale:g}, seed {seed}",
        f"teams: {', '.join(q.name for q in world.queues)}; the stack's placement: {made.stack_policy}",
        *made.routing.lines()[1:],
    ]
    for line in context:
        console.print(line)
    approaches = names()
    total = 2 * len(approaches)
    folder = Path(req.out) if req.out else build / spec.stack / "sim-dynamic"
    with on_stop(f"nothing was written to {folder}"), Progress(console=console, transient=True) as bar:
        job = bar.add_task(f"{len(approaches)} approaches x with/without autoscaling", total=total)
        results = run_comparison(world, approaches, on_done=approach_done(bar, job, total))
    title = f"{spec.stack}: the promise over time, {Path(req.pods).name}"
    print_comparison(console, title, results, made.stack_approach, world.settings)
    with on_stop(f"{folder} may hold part of the report: run the command again"), writing(folder):
        named = f"{spec.stack}, {Path(req.pods).name}"
        for path in write_dynamic_report(
            results, folder, named, context, made.stack_approach, world.settings
        ):
            print(f"wrote {path}")
        if req.json:
            Path(req.json).write_text(
                to_json(results, {"lines": context}, made.stack_approach, world.settings)
            )
            print(f"wrote {req.json}")


def approach_done(bar: Any, job: Any, total: int) -> Callable[[str, bool, Any], None]:
    """The bar in a terminal; in a log, where Rich draws no bar, a line per finished approach run (the whole
    comparison takes about a minute)."""
    done = [0]

    def advance(name: str, scaled: bool, result: Any) -> None:
        done[0] += 1
        bar.advance(job)
        if not bar.console.is_terminal:
            scaling = "with autoscaling" if scaled else "at maxSize"
            print(f"[{done[0]}/{total}] {name} {scaling}: {result.seconds:.1f} s", flush=True)

    return advance
