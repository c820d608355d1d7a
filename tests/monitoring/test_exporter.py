"""The dcgm-exporter each platform runs and the pod mapping gpufleet configures for it: what every stack renders
never combines with a broken behaviour, the behaviour table follows the pins, and the usage weights follow the
behaviour. What each behaviour serves is shown on a real Prometheus in test_reclaim_exporters.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.gpu_stack.gpu_operator import NODE_MONITORING_DCGM, gpu_operator_values
from infra.monitoring import exporter
from infra.monitoring.exporter import BROKEN, Deployment, Mapping, deployment_of
from infra.monitoring.usage import exporter_note, usage_metric
from infra.spec import ClusterSpec
from infra.stackfile import parse_config
from infra.versions import DCGM_EXPORTER_RELEASES, GPU_OPERATOR_DCGM_EXPORTER, Versions, exporter_release
from tests.conftest import EXAMPLE_STACKS, ROOT, load_example
from twin.monitoring_objects import dcgm_exporter_objects


def _without_time_slicing(stack: str) -> ClusterSpec:
    doc = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]
    for pool in doc["gpufleet:nodePools"]:
        pool.pop("sharing", None)
    return parse_config(doc, f"{stack}-whole")


def _versions(stack: str, **pins: str) -> ClusterSpec:
    doc = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]
    doc["gpufleet:versions"] = {**doc.get("gpufleet:versions", {}), **pins}
    return parse_config(doc, f"{stack}-pinned")


def _specs() -> list[tuple[str, ClusterSpec]]:
    return [
        *((s, load_example(s)) for s in EXAMPLE_STACKS),
        ("metal-without-time-slicing", _without_time_slicing("metal")),
        ("example-prod-without-time-slicing", _without_time_slicing("example-prod")),
    ]


def _rendered(spec: ClusterSpec) -> tuple[dict[str, Any], Deployment]:
    """The DaemonSet the GPU operator makes of the stack's values (as the twin models it), and what it runs."""
    (ds,) = [o for o in dcgm_exporter_objects(spec) if o["kind"] == "DaemonSet"]
    return ds, deployment_of(ds)


@pytest.mark.parametrize(("name", "spec"), _specs(), ids=lambda v: v if isinstance(v, str) else "")
def test_what_every_stack_renders_never_meets_a_broken_behaviour(name: str, spec: ClusterSpec) -> None:
    """Per-process values without a token or host PIDs read 0 for busy pods (R1); KUBERNETES_VIRTUAL_GPUS on
    4.5.2-4.8.1 drops free GPUs' series (R4). No stack renders either."""
    _, found = _rendered(spec)
    assert found.mapping is not None and found.mapping not in BROKEN, (name, found)
    assert found == exporter.deployment(spec)  # the values and the rendered DaemonSet say the same
    release = DCGM_EXPORTER_RELEASES[found.release]
    if found.virtual_gpus:
        assert release.keeps_free_gpus and release.per_process and found.api_token and found.host_pid


def test_aws_never_sets_virtual_gpus_while_the_exporter_is_older_than_4_5_3() -> None:
    """4.5.2-4.8.1 internal/pkg/transformation/kubernetes.go:246-297: with the variable, once a GPU of the node
    is held the counter's list is only the pods' copies (:292-294), so every free GPU loses its series; and
    there is no per-process value to gain. example-prod has a time-sliced pool and still gets one pod per GPU."""
    spec = load_example("example-prod")
    assert any(p.sharing.time_slicing for p in spec.node_pools)
    values = gpu_operator_values(spec)["dcgmExporter"]
    names = {e["name"] for e in values["env"]}
    assert exporter_release(values["version"]) == "4.5.2-4.8.1"
    assert not DCGM_EXPORTER_RELEASES["4.5.2-4.8.1"].keeps_free_gpus
    assert exporter.VIRTUAL_GPUS not in names and "hostPID" not in values and "enablePodUID" not in values
    assert exporter.deployed_mapping(spec) is Mapping.ONE_POD
    assert {"NVIDIA_RESOURCE_NAMES", "DCGM_REMOTE_HOSTENGINE_INFO"} <= names


def test_existing_clusters_with_time_slicing_give_the_exporter_what_per_process_values_need() -> None:
    """GPU operator v26.7.0: `enablePodUID` mounts the exporter's token and grants it read access to pods
    (controllers/object_controls.go:1885-1898, :458-462), `hostPID` the host's PID namespace (:1851-1853);
    4.5.3-4.8.2 needs the first for pod UIDs (kubernetes.go:109-119, :920-955) and the second to read
    /proc/<pid>/cgroup of the GPU's processes (pidmapper.go:45)."""
    spec = load_example("metal")
    values = gpu_operator_values(spec)["dcgmExporter"]
    assert {e["name"]: e["value"] for e in values["env"]}[exporter.VIRTUAL_GPUS] == "true"
    assert values["enablePodUID"] is True and values["hostPID"] is True
    assert "version" not in values  # the chart's default exporter, which the table knows
    ds, found = _rendered(spec)
    pod = ds["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is True and pod["hostPID"] is True
    assert pod["containers"][0]["image"].endswith(f":{GPU_OPERATOR_DCGM_EXPORTER['v26.7.0']}")
    assert found.mapping is Mapping.PER_PROCESS


def test_without_time_slicing_no_cluster_asks_for_host_pids() -> None:
    """Whole GPUs and MIG instances have one pod each: one pod per GPU is exact there, so the exporter keeps
    the operator's defaults (no token, its own PID namespace)."""
    for stack in ("metal", "example-prod"):
        spec = _without_time_slicing(stack)
        values = gpu_operator_values(spec)["dcgmExporter"]
        assert "hostPID" not in values and "enablePodUID" not in values
        assert exporter.deployed_mapping(spec) is Mapping.ONE_POD


def test_the_table_drives_the_configuration() -> None:
    """A stack pinning an exporter whose release keeps free GPUs and reports per process gets per-process values
    on aws too; one the table does not know gets one pod per GPU; a cluster whose own GPU operator runs the
    exporter is not configured by gpufleet at all."""
    newer = _versions("example-prod", eksDcgmExporter="4.5.3-4.8.2-distroless")
    assert exporter.deployed_mapping(newer) is Mapping.PER_PROCESS
    assert gpu_operator_values(newer)["dcgmExporter"]["hostPID"] is True
    unknown = _versions("example-prod", eksDcgmExporter="9.9.9-9.9.9-distroless")
    assert exporter.deployed_mapping(unknown) is Mapping.ONE_POD
    chart = _versions("metal", gpuOperatorChart="v99.1.0")
    assert exporter.deployed_mapping(chart) is Mapping.ONE_POD
    metal = yaml.safe_load((ROOT / "Pulumi.metal.yaml").read_text())["config"]
    metal["gpufleet:cluster"]["addons"] = {"gpuOperator": "existing"}
    assert exporter.deployment(parse_config(metal, "metal-own-operator")) is None


def test_the_pins_are_in_the_behaviour_table(shared_dir: Path) -> None:
    """Every exporter a stack deploys by default has an entry: the EKS pin, and the one the pinned GPU operator
    chart deploys (its values.yaml `dcgmExporter.version`)."""
    versions = Versions()
    assert exporter_release(versions.eks_dcgm_exporter) in DCGM_EXPORTER_RELEASES
    chart = yaml.safe_load((shared_dir / "crds/gpu-operator/values.yaml").read_text())
    assert GPU_OPERATOR_DCGM_EXPORTER[versions.gpu_operator_chart] == chart["dcgmExporter"]["version"]
    assert exporter_release(chart["dcgmExporter"]["version"]) in DCGM_EXPORTER_RELEASES
    addon_engine = NODE_MONITORING_DCGM[versions.node_monitoring_agent_addon.split("-eksbuild")[0]]
    assert exporter_release(addon_engine) == exporter_release(versions.eks_dcgm_exporter)
    unread = [r for r, e in DCGM_EXPORTER_RELEASES.items() if not e.read]
    assert all("not read" in DCGM_EXPORTER_RELEASES[r].source for r in unread)


@pytest.mark.parametrize(
    ("found", "mapping"),
    [
        (Deployment("4.5.3-4.8.2", True, True, True), Mapping.PER_PROCESS),
        (Deployment("4.5.3-4.8.2", True, True, False), Mapping.UNMAPPED_ZERO),  # UIDs, but no host PIDs
        (Deployment("4.5.3-4.8.2", True, False, True), Mapping.UNMAPPED_ZERO),  # host PIDs, no UIDs
        (Deployment("4.6.0-4.8.3", True, False, False), Mapping.UNMAPPED_ZERO),  # the operator's default (R1)
        (Deployment("4.5.2-4.8.1", True, False, False), Mapping.DEVICE_COPY),  # R4
        (Deployment("4.5.2-4.8.1", False, False, False), Mapping.ONE_POD),
        (Deployment("4.6.0-4.8.3", False, True, True), Mapping.ONE_POD),
        (Deployment("1.0.0-1.0.0", True, True, True), None),
    ],
)
def test_a_deployment_gets_the_behaviour_of_its_release(found: Deployment, mapping: Mapping | None) -> None:
    assert found.mapping is mapping


def test_a_daemonset_says_what_it_runs() -> None:
    ds = {"spec": {"template": {"spec": {
        "automountServiceAccountToken": False,
        "containers": [{"image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless",
                        "env": [{"name": "KUBERNETES_VIRTUAL_GPUS", "value": "true"}]}]}}}}  # fmt: skip
    assert deployment_of(ds) == Deployment("4.6.0-4.8.3", True, False, False)
    ds["spec"]["template"]["spec"] |= {"automountServiceAccountToken": True, "hostPID": True}
    assert deployment_of(ds).mapping is Mapping.PER_PROCESS


def test_time_sliced_usage_is_weighted_as_the_behaviour_needs() -> None:
    """Per-process values are each pod's share and one pod per GPU carries the GPU's value once: neither is
    weighted again. Copies of the GPU's value on every sharing pod would count it `replicas` times."""
    assert exporter.used_share(Mapping.PER_PROCESS, 4) == 1.0
    assert exporter.used_share(Mapping.ONE_POD, 4) == 1.0
    assert exporter.used_share(Mapping.DEVICE_COPY, 4) == 0.25
    prod = load_example("example-prod")
    shared = next(p.name for p in prod.node_pools if p.sharing.time_slicing)
    assert usage_metric(prod, shared).used_weight == 1.0
    note = exporter_note(prod, [shared])
    assert note is not None and "4.5.2-4.8.1" in note and "split between teams follows that pod" in note
    assert exporter_note(load_example("metal"), ["l40s"]) is None  # per-process: each pod's own share
