"""Deploy, preview, destroy and read a stack through Pulumi's Automation API (the `invoke` tasks call these).

The project folder is the Pulumi workspace: `Pulumi.yaml` names the program and `Pulumi.<stack>.yaml` already
holds the stack's configuration, so nothing is generated. State goes to a local folder,
`file://<project>/.pulumi-state`, unless `--backend` names another (`s3://`, `gs://`, `azblob://`, a folder, or
Pulumi Cloud at `https://api.pulumi.com`); self-managed backends encrypt secrets with
`PULUMI_CONFIG_PASSPHRASE`. Every prerequisite is checked before the engine starts, in the order a user can
fix them: the spec (exit 2; a Slurm stack, which `invoke metal` applies, too), the Pulumi CLI, the passphrase, AWS credentials (exit 3), then preflight (exit 1).

`destroy` runs in phases so nothing in the cluster is left holding AWS resources when the cluster goes: first
Karpenter's NodePools and EC2NodeClasses (their instances are terminated while the controller still runs), then
the Helm releases (with everything that depends on them), then the remaining Kubernetes objects, then CRDs and
namespaces, then Prometheus' volume claims (its StatefulSet's, outside Pulumi's state) with a wait until the
storage driver has deleted their volumes, and only then the node groups, the cluster and the VPC. Load
balancers, their ENIs and volumes that in-cluster controllers created are therefore gone before the driver, the
nodes and the subnets they live in are deleted.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from infra.errors import CheckFailed, ConfigError, ToolMissing, on_stop, writing
from infra.processes import stops_reach_children
from infra.spec import ClusterSpec

if TYPE_CHECKING:
    from pulumi.automation import EngineEvent, OutputValue, Stack

STATE_DIR = ".pulumi-state"
SELF_MANAGED = ("file://", "s3://", "gs://", "azblob://")
ACCEPTED_BACKENDS = (
    "file://<folder>, s3://<bucket>, gs://<bucket>, azblob://<container>, https://api.pulumi.com"
)
INSTALL_HINT = "the Pulumi CLI is not installed (no `pulumi` on PATH): install it from https://www.pulumi.com/docs/install/"
PASSPHRASE_HINT = (
    "PULUMI_CONFIG_PASSPHRASE is not set: the self-managed state backend encrypts stack secrets with it; "
    "export PULUMI_CONFIG_PASSPHRASE (or PULUMI_CONFIG_PASSPHRASE_FILE)"
)
KUBECONFIG_OUTPUT = "kubeconfig"
PROJECT = "gpufleet"  # Pulumi.yaml `name`


# ---- prerequisites (pure or environment-only) ----------------------------------------------------------


def resolve_backend(backend: str | None, root: Path) -> str:
    """The state backend URL: the project's `.pulumi-state` folder by default; relative folders resolve in it."""
    if not backend:
        return f"file://{root / STATE_DIR}"
    if backend.startswith("file://"):
        folder = Path(backend.removeprefix("file://")).expanduser()
        return f"file://{folder if folder.is_absolute() else (root / folder)}"
    if backend.startswith(SELF_MANAGED) or backend.startswith("https://"):
        return backend
    raise ConfigError(f"--backend {backend!r}: not a Pulumi state backend URL; accepted: {ACCEPTED_BACKENDS}")


def require_cli() -> None:
    if shutil.which("pulumi") is None:
        raise ToolMissing(INSTALL_HINT)


def require_passphrase(backend_url: str) -> None:
    if backend_url.startswith(SELF_MANAGED) and not (
        os.environ.get("PULUMI_CONFIG_PASSPHRASE") or os.environ.get("PULUMI_CONFIG_PASSPHRASE_FILE")
    ):
        raise ToolMissing(PASSPHRASE_HINT)


def require_stack_file(spec: ClusterSpec, root: Path) -> None:
    """An aws stack's file must be the project's: the AWS provider reads its settings (`aws:region`) from the
    stack's Pulumi configuration. An existing-platform stack may live anywhere: the program runs inline from
    the spec already loaded, and its Kubernetes provider takes the kubeconfig explicitly."""
    if spec.platform == "existing":
        return
    if not (root / f"Pulumi.{spec.stack}.yaml").is_file():
        raise ConfigError(
            f"stack {spec.stack!r}: Pulumi reads Pulumi.{spec.stack}.yaml from the project folder; put the stack "
            "file there and pass --stack by name"
        )


def require_pulumi_stack(spec: ClusterSpec) -> None:
    """A Slurm stack has no Pulumi resources (no cluster objects to create): `invoke metal` applies it."""
    if spec.cluster.orchestrator == "slurm":
        raise ConfigError(
            f"stack {spec.stack!r} runs Slurm (gpufleet:cluster.orchestrator: slurm), which has no Pulumi "
            f"resources: apply it with `invoke metal --stack {spec.stack}` (docs/slurm.md)"
        )


def prepare(spec: ClusterSpec, root: Path, backend: str | None, *, needs_aws: bool) -> str:
    """Check everything a Pulumi operation needs, cheapest first; return the backend URL."""
    require_pulumi_stack(spec)
    require_stack_file(spec, root)
    url = resolve_backend(backend, root)
    require_cli()
    require_passphrase(url)
    if needs_aws and spec.platform == "aws":
        from infra.preflight.run import spec_session

        spec_session(spec)
    return url


# ---- destroy order (pure) ------------------------------------------------------------------------------

HELM_TYPES = ("kubernetes:helm.sh/v3:Release", "kubernetes:helm.sh/v4:Chart", "kubernetes:helm.sh/v3:Chart")
# Karpenter's NodePools and EC2NodeClasses go before everything else, while its controller still runs: an
# EC2NodeClass is deleted only once Karpenter has terminated every instance launched from it.
FIRST_IN_CLUSTER = ("kubernetes:karpenter.sh/v1:NodePool", "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass")
LAST_IN_CLUSTER = (
    "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition",
    "kubernetes:core/v1:Namespace",
)


def destroy_phases(resources: list[dict[str, Any]]) -> list[list[str]]:
    """URNs to destroy, phase by phase, before the final full destroy (node groups, cluster, VPC).

    `resources` is the `deployment.resources` list of `pulumi stack export`. Providers, the stack itself,
    component resources and resources Pulumi only reads are never targeted: they hold nothing in the cluster.
    """
    first, helm, objects, last = [], [], [], []
    for res in resources:
        kind, urn = res.get("type", ""), res.get("urn", "")
        if not kind.startswith("kubernetes:") or res.get("external") or res.get("custom") is False:
            continue
        if kind in FIRST_IN_CLUSTER:
            first.append(urn)
        elif kind in HELM_TYPES:
            helm.append(urn)
        elif kind in LAST_IN_CLUSTER:
            last.append(urn)
        else:
            objects.append(urn)
    return [phase for phase in (first, helm, objects, last) if phase]


# ---- progress ------------------------------------------------------------------------------------------

SYMBOLS = {"create": "+", "update": "~", "delete": "-", "replace": "+-", "create-replacement": "+-"}


def describe_event(event: EngineEvent) -> str | None:
    """One line per resource step and per error, or None for events not worth a line."""
    if event.resource_pre_event is not None:
        meta = event.resource_pre_event.metadata
        op = meta.op.value
        if op in SYMBOLS:
            return f"{SYMBOLS[op]} {op:<8} {meta.type} {meta.urn.rsplit('::', 1)[-1]}"
    if event.res_op_failed_event is not None:
        meta = event.res_op_failed_event.metadata
        return f"! failed   {meta.type} {meta.urn.rsplit('::', 1)[-1]}"
    if event.diagnostic_event is not None and event.diagnostic_event.severity == "error":
        return f"! {event.diagnostic_event.message.strip()}"
    return None


def event_printer(console: Console) -> Callable[[EngineEvent], None]:
    def on_event(event: EngineEvent) -> None:
        line = describe_event(event)
        if line is not None:
            console.print(line, markup=False, highlight=False)

    return on_event


# ---- operations ----------------------------------------------------------------------------------------


def program(spec: ClusterSpec) -> Callable[[], None]:
    """The stack's program, inline: `infra.program.build` of the spec already loaded and checked.

    The same function `infra/__main__.py` runs for `pulumi up` in the project folder; inline, the Automation
    API serves it to the CLI itself (`--client`), so no Python language host is started and every override
    given on the command line (`--kubeconfig`) is the spec the program builds."""

    def run() -> None:
        import pulumi

        from infra.program import build

        for key, value in build(spec).items():
            pulumi.export(key, value)

    return run


def with_kubeconfig(spec: ClusterSpec, kubeconfig: str | None) -> ClusterSpec:
    """`--kubeconfig PATH` for an existing-platform stack: this cluster instead of `cluster.kubeconfig`; a
    Slurm stack is refused here, before any other question is asked (`destroy`'s --yes)."""
    require_pulumi_stack(spec)
    if not kubeconfig:
        return spec
    if spec.platform != "existing":
        raise ConfigError(
            f"--kubeconfig: stack {spec.stack!r} is platform {spec.platform}; its kubeconfig comes from the "
            "cluster the stack creates (only platform existing takes one)"
        )
    if not Path(kubeconfig).expanduser().is_file():
        raise ConfigError(f"--kubeconfig: {kubeconfig} is not a file")
    path = str(Path(kubeconfig).expanduser().resolve())
    return spec.model_copy(update={"cluster": spec.cluster.model_copy(update={"kubeconfig": path})})


def select_stack(spec: ClusterSpec, root: Path, backend_url: str) -> Stack:
    from pulumi import automation as auto

    if backend_url.startswith("file://"):
        Path(backend_url.removeprefix("file://")).mkdir(parents=True, exist_ok=True)
    work, settings = root, None
    if not (root / f"Pulumi.{spec.stack}.yaml").is_file():
        # A stack file outside the project (existing platform): a workspace of its own under build/, so the
        # engine's stack settings (its encryption salt) are written there, never beside someone's file.
        work = root / "build" / spec.stack / "pulumi"
        work.mkdir(parents=True, exist_ok=True)
        settings = auto.ProjectSettings(name=PROJECT, runtime="python")
    opts = auto.LocalWorkspaceOptions(
        work_dir=str(work), project_settings=settings, env_vars={"PULUMI_BACKEND_URL": backend_url}
    )
    return auto.create_or_select_stack(
        stack_name=spec.stack, project_name=PROJECT, program=program(spec), opts=opts
    )


def _engine(op: str, spec: ClusterSpec, action: Callable[[], Any]) -> Any:
    """Run one engine operation; its failures become one CheckFailed line (details were streamed above)."""
    from pulumi import automation as auto

    try:
        with stops_reach_children(), on_stop(_half_done(op, spec)):
            return action()
    except auto.ConcurrentUpdateError:
        raise CheckFailed(
            f"stack {spec.stack!r} is being updated by someone else; wait, or `pulumi cancel`"
        ) from None
    except auto.CommandError as exc:
        lines = [ln for ln in str(exc).splitlines() if ln.strip()]
        raise CheckFailed(
            f"pulumi {op} failed for stack {spec.stack!r}: {lines[-1] if lines else exc}"
        ) from None


def _half_done(op: str, spec: ClusterSpec) -> str:
    """What a stop during a Pulumi operation leaves: the CLI cancels it its own way."""
    if op in ("up", "destroy"):
        return (
            f"pulumi {op} was cancelled: resources it was changing finished or failed, the rest were not "
            f"touched; `invoke preview --stack {spec.stack}` shows what is left (`pulumi cancel` if the stack "
            "stays locked)"
        )
    return f"pulumi {op} was cancelled; it changes nothing"


def deployed_facts(spec: ClusterSpec, stack: Stack) -> dict[str, Any] | None:
    """The `rolloutFacts` output of the stack's last deploy (infra.rollout), or None before the first."""
    found = _engine("stack output", spec, stack.outputs).get("rolloutFacts")
    return dict(found.value) if found is not None and isinstance(found.value, dict) else None


def deploy(
    spec: ClusterSpec,
    root: Path,
    backend: str | None,
    console: Console,
    gate: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Preflight, then `pulumi up`; returns the changed-resource counts. A Kubernetes minor more than one
    above the deployed one (or below it) is refused first: EKS would refuse it half-way through. With the
    deployed facts, `gate` may refuse a rollout that would evict running work (infra.upgrade)."""
    url = prepare(spec, root, backend, needs_aws=True)
    from infra.preflight import print_findings, raise_on_errors, run_preflight
    from infra.rollout import minor_step_problem

    findings = run_preflight(spec)
    print_findings(findings, console, spec.stack)
    raise_on_errors(findings, spec.stack)
    stack = _engine("stack select", spec, lambda: select_stack(spec, root, url))
    facts = deployed_facts(spec, stack)
    step = minor_step_problem(facts["kubernetesVersion"], spec.cluster.kubernetes_version) if facts else None
    if step and spec.platform == "aws":
        raise ConfigError(step)
    if gate is not None and facts:
        gate(facts)
    result = _engine("up", spec, lambda: stack.up(on_event=event_printer(console), color="never"))
    wait_for_monitoring(spec, stack, console)
    return dict(result.summary.resource_changes or {})


@contextmanager
def cluster_kubeconfig(spec: ClusterSpec, stack: Stack) -> Iterator[tuple[str, str | None]]:
    """(kubeconfig path, context) of the stack's cluster: its kubeconfig output on aws (written owner-only to
    a folder removed afterwards), the stack's own on existing."""
    if spec.platform == "existing":
        yield str(Path(spec.cluster.kubeconfig or "").expanduser()), spec.cluster.kubeconfig_context
        return
    values = _engine("stack output", spec, stack.outputs)
    with tempfile.TemporaryDirectory() as folder:
        yield str(write_kubeconfig(kubeconfig_text(values, spec.stack), Path(folder) / "kubeconfig")), None


def wait_for_monitoring(spec: ClusterSpec, stack: Stack, console: Console) -> None:
    """After `up`: the operator-made Prometheus and Alertmanager pods Ready, or CheckFailed saying why not
    (`infra.monitoring.readiness`)."""
    from infra.monitoring.readiness import READY_TIMEOUT_S, wait_ready, watched
    from infra.preflight.kube import KubernetesReader

    if not watched(spec):
        return
    console.print(f"waiting up to {READY_TIMEOUT_S // 60} min for Prometheus and Alertmanager to be Ready")
    with cluster_kubeconfig(spec, stack) as (path, context):
        wait_ready(spec, KubernetesReader(path, context))


def release_monitoring_volumes(spec: ClusterSpec, stack: Stack, console: Console) -> None:
    """Before the cluster goes: Prometheus' claims deleted and their volumes gone (`infra.monitoring.volumes`)."""
    from infra.monitoring.volumes import RELEASE_TIMEOUT_S, KubernetesVolumes, release_volumes

    if spec.cluster.monitoring.prometheus != "install":
        return
    console.print(f"destroy: Prometheus' volumes, waiting up to {RELEASE_TIMEOUT_S // 60} min for the driver")
    with cluster_kubeconfig(spec, stack) as (path, context):
        try:
            release_volumes(spec, KubernetesVolumes(path, context))
        except CheckFailed:
            raise
        except Exception as exc:  # any client or connection failure: one line, the cluster still stands
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise CheckFailed(
                f"destroy of stack {spec.stack!r}: could not release Prometheus' volumes ({reason}); the cluster "
                f"is still there: `invoke destroy --stack {spec.stack} --yes` again once it answers"
            ) from None


def preview(
    spec: ClusterSpec,
    root: Path,
    backend: str | None,
    console: Console,
    rollout: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """`pulumi preview`; first, with the deployed facts, `rollout` says what would roll (infra.rollout)."""
    url = prepare(spec, root, backend, needs_aws=True)
    stack = _engine("stack select", spec, lambda: select_stack(spec, root, url))
    facts = deployed_facts(spec, stack)
    if rollout is not None and facts:
        rollout(facts)
    result = _engine("preview", spec, lambda: stack.preview(on_event=event_printer(console), color="never"))
    return {op.value if hasattr(op, "value") else str(op): n for op, n in result.change_summary.items()}


def destroy(spec: ClusterSpec, root: Path, backend: str | None, console: Console) -> dict[str, Any]:
    """In-cluster resources phase by phase (see the module docstring), then everything else."""
    url = prepare(spec, root, backend, needs_aws=True)
    stack = _engine("stack select", spec, lambda: select_stack(spec, root, url))
    on_event = event_printer(console)

    def remaining() -> list[list[str]]:
        # Read again before every phase: a phase's dependents (everything that waits for the nodes' labels,
        # say) may already have gone with an earlier one, and targeting a URN that is gone is an error.
        return destroy_phases((stack.export_stack().deployment or {}).get("resources", []))

    i, previous = 0, None
    while phases := remaining():
        i += 1
        targets = phases[0]
        if targets == previous:
            raise CheckFailed(
                f"destroy of stack {spec.stack!r} left {len(targets)} in-cluster resource(s) in place"
            )
        previous = targets
        console.print(f"destroy phase {i}: {len(targets)} in-cluster resource(s) and their dependents")
        phase = partial(
            stack.destroy, target=targets, target_dependents=True, on_event=on_event, color="never"
        )
        _engine("destroy", spec, phase)
    release_monitoring_volumes(spec, stack, console)
    console.print("destroy: node groups, cluster, network and the rest")
    result = _engine("destroy", spec, lambda: stack.destroy(on_event=on_event, color="never"))
    return dict(result.summary.resource_changes or {})


def outputs(spec: ClusterSpec, root: Path, backend: str | None) -> dict[str, OutputValue]:
    url = prepare(spec, root, backend, needs_aws=False)
    stack = _engine("stack select", spec, lambda: select_stack(spec, root, url))
    values: dict[str, OutputValue] = _engine("stack output", spec, stack.outputs)
    return values


def kubeconfig_text(values: dict[str, OutputValue], stack: str) -> str:
    """The kubeconfig output as YAML text (the program may export it as a string or as an object)."""
    import yaml

    if KUBECONFIG_OUTPUT not in values:
        have = ", ".join(sorted(values)) or "none (has `invoke deploy` run?)"
        raise CheckFailed(f"stack {stack!r} has no {KUBECONFIG_OUTPUT!r} output; outputs: {have}")
    value = values[KUBECONFIG_OUTPUT].value
    return value if isinstance(value, str) else yaml.safe_dump(value, sort_keys=False)


def write_kubeconfig(text: str, path: Path) -> Path:
    """Write with owner-only permissions: the file holds cluster credentials."""
    with writing(path.parent):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(text)
        path.chmod(0o600)
    return path
