"""The deployed pieces: the scheduler profile's extender entry and the extender's own objects."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from scheduler.extender.manifests import URL, extender_container
from scheduler.labels import GPU_RESOURCE, SHARED_GPU_RESOURCE
from scheduler.placement import with_extender
from tests.extender.go_types import load_types


@pytest.fixture(scope="module")
def extender_type(shared_dir: Path) -> dict[str, Any]:
    doc = load_types(shared_dir, "config-v1-types.yaml", "config-v1-types.go")
    (t,) = [t for t in doc["types"] if t["name"] == "Extender"]
    return t


def test_extender_entry_matches_the_scheduler_config_extender_type(extender_type) -> None:
    """kubescheduler.config.k8s.io/v1 Extender (kubernetes v1.36.3 config/v1/types.go): only its json keys,
    enableHTTPS spelled so, weight positive, httpTimeout a duration, managedResources {name, ignoredByScheduler},
    and no bindVerb: kube-scheduler binds every pod itself."""
    base = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [{"schedulerName": "gpu-binpack"}],
    }
    config = with_extender(base, URL, [GPU_RESOURCE, SHARED_GPU_RESOURCE])
    assert base.get("extenders") is None  # the input profile is left alone
    (entry,) = config["extenders"]
    allowed = {f["json"] for f in extender_type["fields"]}
    assert set(entry) <= allowed
    assert {
        "urlPrefix",
        "filterVerb",
        "prioritizeVerb",
        "weight",
        "httpTimeout",
        "managedResources",
        "ignorable",
    } <= set(entry)
    assert entry["weight"] > 0
    assert "bindVerb" in allowed and "bindVerb" not in entry
    assert re.fullmatch(r"\d+(ms|s|m)", entry["httpTimeout"])
    assert entry["ignorable"] is True and entry["nodeCacheCapable"] is True
    assert [m["name"] for m in entry["managedResources"]] == [GPU_RESOURCE, SHARED_GPU_RESOURCE]
    assert not any(e.get("bindVerb") for e in config["extenders"])
    assert entry["urlPrefix"] == "http://127.0.0.1:8888"  # the sidecar, on the scheduler pod's loopback


def test_the_sidecar_probes_by_exec_and_listens_on_loopback_only() -> None:
    """The kubelet's httpGet probes dial the pod IP (kubernetes.io "Configure Liveness, Readiness and Startup
    Probes": host defaults to the pod IP), where a loopback-only server does not listen: exec probes instead."""
    container = extender_container("ghcr.io/gpufleet/gpufleet-extender:0.1.0", trace="/etc/x/pods.csv")
    assert container["args"][container["args"].index("--host") + 1] == "127.0.0.1"
    for kind in ("livenessProbe", "readinessProbe"):
        assert "httpGet" not in container[kind]
        assert container[kind]["exec"]["command"][:4] == ["python", "-m", "scheduler.extender", "--probe"]
    assert "ports" not in container


@pytest.mark.parametrize(
    "image", ["ghcr.io/gpufleet/gpufleet-extender", "ghcr.io/gpufleet/gpufleet-extender:latest"]
)
def test_unpinned_image_is_refused(image: str) -> None:
    with pytest.raises(ValueError, match="extender image"):
        extender_container(image)


def test_fragmentation_aware_adds_the_extender_to_the_secondary_scheduler() -> None:
    """The secondary scheduler's rendered configuration names the extender; every object validates."""
    from scheduler.extender.manifests import fragmentation_aware
    from scheduler.placement import CONFIG_FILE, secondary_scheduler
    from scheduler.resources import covered_gpu_resources
    from tests.scheduler.examples import PROD, PROD_POOLS

    base = secondary_scheduler(PROD, PROD_POOLS)
    objects = fragmentation_aware(
        base, covered_gpu_resources(PROD_POOLS), "ghcr.io/gpufleet/gpufleet-extender:0.1.0"
    )
    assert [o["kind"] for o in objects[: len(base)]] == [o["kind"] for o in base]
    (cm,) = [o for o in objects if o["kind"] == "ConfigMap"]
    config = yaml.safe_load(cm["data"][CONFIG_FILE])
    (entry,) = config["extenders"]
    assert entry["urlPrefix"] == URL and entry["ignorable"] is True
    assert {m["name"] for m in entry["managedResources"]} == set(covered_gpu_resources(PROD_POOLS))
    assert config["profiles"][0]["schedulerName"] == "gpu-binpack"
    assert "extenders" not in yaml.safe_load(
        next(o for o in base if o["kind"] == "ConfigMap")["data"][CONFIG_FILE]
    )  # the input is left alone
    for obj in objects:
        kubernetes_validate.validate(obj, PROD.kubernetes_version, strict=True)


def test_the_sidecar_learns_from_the_pools_whose_gpus_it_models() -> None:
    """The compiled sidecar names the whole-GPU and time-sliced pools (``--pools``), never a MIG pool, whose
    pods are CPU-only to it; the extender's own parser reads the list back."""
    import dataclasses

    from scheduler.compiler import compile
    from scheduler.extender.manifests import CONTAINER
    from tests.scheduler.examples import PROD, PROD_POOLS

    policy = dataclasses.replace(PROD, placement_strategy="FragmentationAware",
                                 extender_image="ghcr.io/gpufleet/gpufleet-extender:0.1.0")  # fmt: skip
    (deployment,) = [o for o in compile(policy, PROD_POOLS) if o["kind"] == "Deployment"
                     and o["metadata"]["name"] == "gpu-binpack"]  # fmt: skip
    (sidecar,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == CONTAINER]
    named = sidecar["args"][sidecar["args"].index("--pools") + 1].split(",")
    sharing = {p.name: p.sharing for p in PROD_POOLS}
    assert named and {sharing[p] for p in named} <= {"exclusive", "timeSlicing"}
    assert {p for p, how in sharing.items() if how in ("exclusive", "timeSlicing")} == set(named)
    assert any(how == "mig" for how in sharing.values())  # the example has one to leave out


def test_placement_shadow_runs_the_sidecar_in_shadow_mode_and_needs_the_extender() -> None:
    """`placement.shadow: true` reaches the sidecar as `--shadow` through the stack's own compile path; with
    another strategy there is no extender to run in shadow, and the stack file is refused naming the key."""
    import yaml as _yaml

    from infra.errors import ConfigError
    from infra.scheduling import scheduler_inputs
    from infra.stackfile import parse_config
    from scheduler.compiler import compile
    from scheduler.extender.manifests import CONTAINER
    from tests.conftest import ROOT as _ROOT

    config = _yaml.safe_load((_ROOT / "Pulumi.metal.yaml").read_text())["config"]
    config["gpufleet:scheduling"] = {"placement": {"strategy": "FragmentationAware", "shadow": True}}
    policy, pools = scheduler_inputs(parse_config(config, "metal"))
    (deployment,) = [o for o in compile(policy, pools) if o["kind"] == "Deployment"
                     and o["metadata"]["name"] == "gpu-binpack"]  # fmt: skip
    (sidecar,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == CONTAINER]
    assert "--shadow" in sidecar["args"]
    config["gpufleet:scheduling"] = {"placement": {"shadow": True}}
    with pytest.raises(ConfigError, match=r"gpufleet:scheduling\.placement: shadow: true .*'MostAllocated'"):
        parse_config(config, "metal")
