"""`placement.strategy: FragmentationAware` from a stack file to the objects applied: the secondary scheduler
and the extender on both platforms, its configuration calling the extender, team GPU pods routed to it."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.aws.cluster import placement_config
from infra.errors import ConfigError
from infra.scheduling import scheduler_inputs
from infra.simulate.stack import placement_profile
from infra.spec import ClusterSpec
from infra.stackfile import parse_config
from infra.versions import EXTENDER_REPOSITORY, PROJECT_VERSION, extender_image
from scheduler import admission, compile
from scheduler.admission import DEFAULT_SCHEDULER, PODS
from scheduler.extender.manifests import CONTAINER, NAME, PORT, URL
from scheduler.labels import SECONDARY_SCHEDULER_NAME
from scheduler.placement import CONFIG_FILE
from scheduler.references import reference_problems
from scheduler.resources import covered_gpu_resources
from scheduler.validation import validate_objects
from tests.conftest import ROOT
from tests.extender.go_types import load_types
from tests.scheduler.examples import PROD, PROD_POOLS
from tests.scheduler.helpers import find, of_kind

WORKFLOW = ROOT / ".github" / "workflows" / "extender-image.yml"


def fragmentation_aware_config(stack: str, **versions: str) -> dict[str, Any]:
    config = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]
    scheduling = config.setdefault("gpufleet:scheduling", {})
    scheduling["placement"] = {**scheduling.get("placement", {}), "strategy": "FragmentationAware"}
    if versions:
        config["gpufleet:versions"] = {**config.get("gpufleet:versions", {}), **versions}
    return dict(config)


def fragmentation_aware_spec(stack: str) -> ClusterSpec:
    return parse_config(fragmentation_aware_config(stack), stack)


def scheduler_config(objects: list[dict[str, Any]]) -> dict[str, Any]:
    cm = find(objects, "ConfigMap", f"{SECONDARY_SCHEDULER_NAME}-config", "gpufleet-scheduler")
    return dict(yaml.safe_load(cm["data"][CONFIG_FILE]))


@pytest.fixture(scope="module")
def extender_type(shared_dir: Path) -> dict[str, Any]:
    doc = load_types(shared_dir, "config-v1-types.yaml", "config-v1-types.go")
    (t,) = [t for t in doc["types"] if t["name"] == "Extender"]
    return dict(t)


@pytest.mark.parametrize("stack", ["dev", "example-prod", "metal"])
def test_a_fragmentation_aware_stack_renders_the_extender_and_validates_strictly(
    stack: str, shared_dir: Path, extender_type: dict[str, Any]
) -> None:
    """On EKS (dev, example-prod) and on an existing cluster (metal) alike: the secondary scheduler and the
    extender are rendered, every object validates (CRD schemas made strict, `kubernetes-validate --strict` for
    core kinds) and references resolve. The configuration's `extenders[]` entry uses only the json keys of
    kubescheduler.config.k8s.io/v1 `Extender` (kubernetes v1.36.3 staging/src/k8s.io/kube-scheduler/config/v1/
    types.go) and at most one extender binds (pkg/scheduler/apis/config/validation: "only one extender can
    implement bind")."""
    spec = fragmentation_aware_spec(stack)
    policy, pools = scheduler_inputs(spec)
    objects = compile(policy, pools)
    assert validate_objects(objects, shared_dir / "crds", policy.kubernetes_version) == []
    assert reference_problems(objects, policy, pools) == []

    # The extender is a sidecar of each scheduler pod (one view per placement, loopback only): no Deployment,
    # Service or budget of its own.
    deployment = find(objects, "Deployment", SECONDARY_SCHEDULER_NAME, "gpufleet-scheduler")
    scheduler, sidecar = deployment["spec"]["template"]["spec"]["containers"]
    assert scheduler["name"] == "kube-scheduler" and sidecar["name"] == CONTAINER
    assert sidecar["image"] == f"{EXTENDER_REPOSITORY}:{spec.versions.extender_image}"
    assert sidecar["args"][sidecar["args"].index("--host") + 1] == "127.0.0.1"
    assert not [o for o in objects if o["metadata"]["name"] == NAME]

    config = scheduler_config(objects)
    (profile,) = config["profiles"]
    assert profile["schedulerName"] == SECONDARY_SCHEDULER_NAME
    (fit,) = profile["pluginConfig"]
    assert fit["args"]["scoringStrategy"]["type"] == "MostAllocated"  # NodeResourcesFit has no other name
    (entry,) = config["extenders"]
    assert set(entry) <= {f["json"] for f in extender_type["fields"]}
    assert entry["urlPrefix"] == URL == f"http://127.0.0.1:{PORT}"
    assert (entry["filterVerb"], entry["prioritizeVerb"]) == ("filter", "prioritize")
    assert "bindVerb" not in entry  # kube-scheduler binds every pod itself
    assert entry["weight"] > 0 and re.fullmatch(r"\d+(ms|s|m)", entry["httpTimeout"])
    assert entry["ignorable"] is True
    assert [m["name"] for m in entry["managedResources"]] == covered_gpu_resources(pools)
    assert all(m["ignoredByScheduler"] is False for m in entry["managedResources"])


@pytest.mark.parametrize("strategy", ["MostAllocated", "LeastAllocated"])
def test_other_strategies_deploy_no_extender(strategy: str) -> None:
    for stack in ("dev", "metal"):
        config = fragmentation_aware_config(stack)
        config["gpufleet:scheduling"]["placement"]["strategy"] = strategy
        policy, pools = scheduler_inputs(parse_config(config, stack))
        objects = compile(policy, pools)
        assert not [o for o in objects if o["metadata"]["name"] == NAME]
        assert bool(of_kind(objects, "Deployment")) is (stack == "metal")  # gpu-binpack only where needed


def test_team_gpu_pods_are_routed_to_the_secondary_scheduler_on_aws() -> None:
    """The EKS control plane's scheduler calls no extender (EKS API Reference, `KubeSchedulerConfigRequest`: only
    `nodeResourcesFit`), so on aws a GPU pod must name `gpu-binpack` too: the
    team-pod policy carries the rule that refuses one that does not (what the rule decides is the API server's:
    tests/twin/test_admission_rules.py), and from 1.36 the mutating policy sets the name on pods that leave it
    at the API server's default."""
    policy, pools = scheduler_inputs(fragmentation_aware_spec("dev"))
    assert policy.platform == "aws"
    rule = admission.GPU_PODS_USE_PACKING_SCHEDULER
    pods = find(compile(policy, pools), "ValidatingAdmissionPolicy", PODS)
    assert rule in [v["expression"] for v in pods["spec"]["validations"]]
    plain = find(compile(PROD, PROD_POOLS), "ValidatingAdmissionPolicy", PODS)
    assert rule not in [v["expression"] for v in plain["spec"]["validations"]]  # the control plane binds them

    newer = replace(policy, kubernetes_version="1.36", kube_scheduler_image_tag="v1.36.4")
    mutating = of_kind(compile(newer, pools), "MutatingAdmissionPolicy")
    assert DEFAULT_SCHEDULER in {p["metadata"]["name"] for p in mutating}


def test_the_eks_control_plane_keeps_most_allocated() -> None:
    """EKS's scheduler configuration (EKS API Reference: `KubeSchedulerConfigRequest` has one member,
    `nodeResourcesFit`; `ScoringStrategy.type` is `LeastAllocated | MostAllocated`) has no room for an extender
    or another strategy; FragmentationAware sends MostAllocated, so what the secondary scheduler does not bind
    stays packed."""
    spec = fragmentation_aware_spec("dev")
    plain = parse_config(yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"], "dev")
    assert placement_config(spec) == placement_config(plain)
    assert set(placement_config(spec)) == {"node_resources_fit"}
    assert placement_config(spec)["node_resources_fit"]["scoring_strategy"]["type"] == "MostAllocated"


def test_the_simulator_replays_the_secondary_schedulers_fallback_profile() -> None:
    """With FragmentationAware on aws the fallback profile is the secondary scheduler's, which weights
    time-sliced replicas like GPUs (scheduler.placement.scoring_resources), not the EKS one, which cannot."""
    strategy, params = placement_profile(fragmentation_aware_spec("dev"))
    assert strategy == "MostAllocated" and params["shared"] == params["gpu"]
    plain = parse_config(yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"], "dev")
    assert placement_profile(plain)[1]["shared"] == 0


def test_the_extender_image_is_the_release_the_workflow_pushes() -> None:
    """The pinned tag is this repository's version (pyproject.toml), which the image workflow pushes for the
    `v<version>` git tag (docker/metadata-action `type=semver,pattern={{version}}` drops the `v`), under the
    name its `image` step reads from infra/versions.py (tests/extender/test_image.py runs that step)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["version"] == PROJECT_VERSION
    assert ClusterSpec.model_fields["versions"].default.extender_image == PROJECT_VERSION
    assert (
        extender_image(ClusterSpec.model_fields["versions"].default)
        == f"{EXTENDER_REPOSITORY}:{PROJECT_VERSION}"
    )
    workflow = yaml.safe_load(WORKFLOW.read_text())
    job = workflow["jobs"]["publish"]  # the push job; pull requests only build (`check`)
    meta = next(s for s in job["steps"] if s.get("uses", "").startswith("docker/metadata-action@"))
    assert meta["with"]["images"] == "${{ steps.image.outputs.name }}"
    assert "type=semver,pattern={{version}}" in meta["with"]["tags"]
    assert 'tags: ["v*"]' in WORKFLOW.read_text()


@pytest.mark.parametrize(
    ("mutate", "path", "words"),
    [
        (lambda c: c["gpufleet:scheduling"]["placement"].update(strategy="FragmentAware"),
         "gpufleet:scheduling.placement.strategy", "FragmentationAware"),
        (lambda c: c.update({"gpufleet:versions": {"extenderImage": "latest"}}),
         "gpufleet:versions.extenderImage", "never latest"),
        (lambda c: c.update({"gpufleet:versions": {"extenderImage": "ghcr.io/x/y"}}),
         "gpufleet:versions.extenderImage", "is not a pinned image"),
    ],
)  # fmt: skip
def test_bad_values_name_their_key(mutate: Any, path: str, words: str) -> None:
    config = fragmentation_aware_config("dev")
    mutate(config)
    with pytest.raises(ConfigError) as info:
        parse_config(config, "dev")
    assert any(path in p and words in p for p in info.value.problems), info.value.problems


def test_the_compiler_refuses_an_unpinned_extender_image() -> None:
    """The scheduler's own input check (also run by infra's rules) for callers that build the policy."""
    from scheduler.errors import SchedulerConfigError

    policy = replace(PROD, placement_strategy="FragmentationAware")
    with pytest.raises(SchedulerConfigError, match=r"versions\.extenderImage"):
        compile(replace(policy, extender_image=f"{EXTENDER_REPOSITORY}:latest"), PROD_POOLS)
    with pytest.raises(SchedulerConfigError, match=r"versions\.extenderImage"):
        compile(policy, PROD_POOLS)  # none given


def _render(stack: Path, out: Path) -> subprocess.CompletedProcess[str]:
    """`invoke render` as a user runs it."""
    command = [sys.executable, "-m", "invoke", "render", "--stack", str(stack), "--out", str(out)]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_render_with_a_bad_strategy_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    config = {"config": copy.deepcopy(fragmentation_aware_config("dev"))}
    config["config"]["gpufleet:scheduling"]["placement"]["strategy"] = "Fragmented"
    stack = tmp_path / "Pulumi.bad.yaml"
    stack.write_text(yaml.safe_dump(config))
    result = _render(stack, tmp_path / "out")
    assert result.returncode == 2, result.stderr
    assert "gpufleet:scheduling.placement.strategy" in result.stderr
    assert "FragmentationAware" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_render_writes_the_extender(tmp_path: Path) -> None:
    config = {"config": fragmentation_aware_config("metal")}
    stack = tmp_path / "Pulumi.fa.yaml"
    stack.write_text(yaml.safe_dump(config))
    result = _render(stack, tmp_path / "out")
    assert result.returncode == 0, result.stderr
    docs = [yaml.safe_load(p.read_text()) for p in (tmp_path / "out").glob("*.yaml")]
    (deployment,) = [d for d in docs if d.get("kind") == "Deployment"]
    names = [c["name"] for c in deployment["spec"]["template"]["spec"]["containers"]]
    assert names == ["kube-scheduler", CONTAINER]


def test_the_extender_entry_in_the_docs_is_the_compiled_one() -> None:
    """docs/scheduling.md shows the `extenders[]` entry the prod example's secondary scheduler gets."""
    from tests.scheduler.test_docs import examples

    (documented,) = [e for e in examples() if e["kind"] == "KubeSchedulerConfiguration" and "extenders" in e]
    policy = replace(
        PROD, placement_strategy="FragmentationAware", extender_image=f"{EXTENDER_REPOSITORY}:0.1.0"
    )
    assert documented["extenders"] == scheduler_config(compile(policy, PROD_POOLS))["extenders"]
