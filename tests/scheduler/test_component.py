"""GpuScheduling under Pulumi mocks (the accepted boundary: no engine, no cluster), plus its pure ordering plan."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pulumi
import pytest
import yaml

from scheduler import SchedulerConfigError, compile
from scheduler.component import RELEASE, dependency_plan, object_key
from scheduler.kueue import as_stored
from tests.scheduler.examples import METAL, METAL_POOLS, PROD, PROD_POOLS


class Recorder(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.created: list[tuple[str, str, dict[str, Any]]] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.created.append((args.typ, args.name, dict(args.inputs)))
        outputs = dict(args.inputs)
        if args.typ == "kubernetes:helm.sh/v3:Release":
            outputs["status"] = {
                "name": args.inputs.get("name"),
                "namespace": "kueue-system",
                "status": "deployed",
            }
        if args.typ == "kubernetes:yaml/v2:ConfigGroup":
            outputs["resources"] = []
        return f"{args.name}-id", outputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        return {}, None


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    mocks = Recorder()
    pulumi.runtime.set_mocks(mocks, preview=False)
    yield mocks
    loop.close()
    asyncio.set_event_loop(None)


@pulumi.runtime.test
def test_installs_pinned_kueue_and_one_resource_per_compiled_object(recorder: Recorder) -> pulumi.Output:
    from scheduler.component import GpuScheduling

    component = GpuScheduling("sched", PROD, PROD_POOLS)

    def check(values: list[Any]) -> None:
        status, count = values
        assert status["status"] == "deployed"
        objects = compile(PROD, PROD_POOLS)
        assert count == len(objects)
        releases = [inputs for typ, _, inputs in recorder.created if typ == "kubernetes:helm.sh/v3:Release"]
        assert len(releases) == 1
        release = releases[0]
        assert release["chart"] == "oci://registry.k8s.io/kueue/charts/kueue"
        assert release["version"] == "0.19.2" and release["name"] == "kueue"
        assert release["namespace"] == "kueue-system"
        config = yaml.safe_load(release["values"]["managerConfig"]["controllerManagerConfigYaml"])
        assert config["waitForPodsReady"]["timeout"] == PROD.wait_for_pods_ready_timeout
        groups = {
            name: inputs for typ, name, inputs in recorder.created if typ == "kubernetes:yaml/v2:ConfigGroup"
        }
        assert set(groups) == {f"sched-{object_key(o)}" for o in objects}
        for obj in objects:
            assert groups[f"sched-{object_key(obj)}"]["objs"] == [as_stored(obj)]

    return pulumi.Output.all(component.kueue_status, component.object_count).apply(check)


@pulumi.runtime.test
def test_existing_platform_applies_the_secondary_scheduler(recorder: Recorder) -> pulumi.Output:
    from scheduler.component import GpuScheduling

    component = GpuScheduling("metal", METAL, METAL_POOLS)

    def check(_: Any) -> None:
        names = {name for typ, name, _ in recorder.created if typ == "kubernetes:yaml/v2:ConfigGroup"}
        assert "metal-deployment-gpufleet-scheduler-gpu-binpack" in names
        assert "metal-namespace-gpufleet-scheduler" in names

    return component.object_count.apply(check)


@pulumi.runtime.test
def test_fragmentation_aware_on_aws_applies_the_secondary_scheduler_and_the_extender(
    recorder: Recorder,
) -> pulumi.Output:
    """The EKS control plane takes no extenders, so on aws FragmentationAware applies the secondary scheduler,
    its configuration calling the extender at its sidecar, after the namespace it lives in."""
    from dataclasses import replace

    from infra.versions import EXTENDER_REPOSITORY
    from scheduler.component import GpuScheduling

    policy = replace(
        PROD, placement_strategy="FragmentationAware", extender_image=f"{EXTENDER_REPOSITORY}:0.1.0"
    )
    component = GpuScheduling("fa", policy, PROD_POOLS)

    def check(_: Any) -> None:
        created = {
            name: inputs for typ, name, inputs in recorder.created if typ == "kubernetes:yaml/v2:ConfigGroup"
        }
        (deployment,) = created["fa-deployment-gpufleet-scheduler-gpu-binpack"]["objs"]
        containers = [c["name"] for c in deployment["spec"]["template"]["spec"]["containers"]]
        assert containers == ["kube-scheduler", "extender"]
        (config,) = created["fa-configmap-gpufleet-scheduler-gpu-binpack-config"]["objs"]
        (entry,) = yaml.safe_load(config["data"]["config.yaml"])["extenders"]
        assert entry["urlPrefix"] == "http://127.0.0.1:8888"
        plan = {object_key(obj): deps for obj, deps in dependency_plan(compile(policy, PROD_POOLS))}
        assert "namespace-gpufleet-scheduler" in plan["deployment-gpufleet-scheduler-gpu-binpack"]

    return component.object_count.apply(check)


@pulumi.runtime.test
def test_bad_policy_fails_before_any_resource_exists(recorder: Recorder) -> pulumi.Output:
    from dataclasses import replace

    from scheduler.component import GpuScheduling

    with pytest.raises(SchedulerConfigError, match=r"gpufleet:teams\[0\]\.priority"):
        GpuScheduling("bad", replace(PROD, teams=(replace(PROD.teams[0], priority="nope"),)), PROD_POOLS)

    def check(_: Any) -> None:
        assert recorder.created == []

    return pulumi.Output.from_input(None).apply(check)


def test_dependency_plan_orders_kueue_objects_after_the_release_and_namespaces_first() -> None:
    plan = dependency_plan(compile(METAL, METAL_POOLS))
    keys = [object_key(obj) for obj, _ in plan]
    position = {key: i for i, key in enumerate(keys)}
    for obj, deps in plan:
        key = object_key(obj)
        assert all(position[d] < position[key] for d in deps if d != RELEASE), key  # only earlier objects
        assert (RELEASE in deps) == obj["apiVersion"].startswith("kueue.x-k8s.io/"), key
        namespace = obj["metadata"].get("namespace")
        if namespace in ("vision", "nlp", "gpufleet-scheduler"):
            assert f"namespace-{namespace}" in deps, key
    by_key = {object_key(o): d for o, d in plan}
    deployment = by_key["deployment-gpufleet-scheduler-gpu-binpack"]
    assert {"serviceaccount-gpufleet-scheduler-gpu-binpack", "configmap-gpufleet-scheduler-gpu-binpack-config",
            "rolebinding-gpufleet-scheduler-gpu-binpack-leader-election",
            "clusterrolebinding-gpu-binpack-kube-scheduler"} <= set(deployment)  # fmt: skip
    assert {"resourceflavor-h100", "cohort-gpufleet", "workloadpriorityclass-default"} <= set(
        by_key["clusterqueue-nlp"]
    )
    assert not any(
        d.startswith("namespace-") for d in by_key["clusterqueue-nlp"]
    )  # cluster-scoped: no namespace
    assert "namespace-nlp" in by_key["localqueue-nlp-default"]
    assert by_key["namespace-nlp"] == []


@pulumi.runtime.test
def test_provisioning_request_crd_is_installed_before_kueue(recorder: Recorder) -> pulumi.Output:
    """With provisioning requests on, the pinned ProvisioningRequest CRD is applied first: Kueue only starts
    its provisioning admission check controller if the CRD is served at startup."""
    from dataclasses import replace

    from scheduler.component import GpuScheduling

    url = "https://raw.githubusercontent.com/kubernetes/autoscaler/cluster-autoscaler-1.35.2/x.yaml"
    policy = replace(PROD, provisioning_requests=True, fair_sharing=False, provisioning_request_crd=url)
    component = GpuScheduling("sched", policy, PROD_POOLS)
    assert component.provisioning_crd is not None

    def check(_: Any) -> None:
        files = [
            (name, inputs) for typ, name, inputs in recorder.created if typ == "kubernetes:yaml/v2:ConfigFile"
        ]
        assert files == [("sched-provisioningrequest-crd", {"file": url})]
        names = [name for _, name, _ in recorder.created]
        assert names.index("sched-provisioningrequest-crd") < names.index("sched-kueue")

    return component.kueue_status.apply(check)
