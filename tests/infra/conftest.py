"""Pulumi mocks for the program tests: every resource's inputs are recorded; output-only properties are supplied.

The engine boundary is the only thing mocked: the program, its components and the pure builders run for real.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pulumi
import pytest

ACCOUNT = "123456789012"


@dataclass
class Recorded:
    typ: str
    name: str
    inputs: dict[str, Any]
    provider: str | None
    parent: str = ""  # URN
    dependencies: tuple[str, ...] = ()  # URNs of explicit and input dependencies
    urn: str = ""


def _outputs(args: pulumi.runtime.MockResourceArgs) -> dict[str, Any]:
    """Inputs echoed back, plus the output-only properties the program reads."""
    name, typ, out = args.name, args.typ, dict(args.inputs)
    arn = f"arn:aws:{typ.split(':')[1].split('/')[0]}:us-east-1:{ACCOUNT}:{name}"
    out.setdefault("arn", arn)
    if typ == "aws:eks/cluster:Cluster":
        out |= {
            "endpoint": f"https://{name}.gr7.us-east-1.eks.amazonaws.com",
            "certificateAuthority": {"data": "Q0EgREFUQQ=="},
            "identities": [
                {"oidcs": [{"issuer": f"https://oidc.eks.us-east-1.amazonaws.com/id/{name.upper()}"}]}
            ],
            "vpcConfig": {**out.get("vpcConfig", {}), "clusterSecurityGroupId": f"sg-{name}"},
        }
    elif typ == "aws:iam/openIdConnectProvider:OpenIdConnectProvider":
        out["arn"] = f"arn:aws:iam::{ACCOUNT}:oidc-provider/{out['url'].removeprefix('https://')}"
    elif typ == "aws:iam/role:Role":
        out["arn"] = f"arn:aws:iam::{ACCOUNT}:role/{name}"
        out.setdefault("name", name)
    elif typ == "aws:eks/nodeGroup:NodeGroup":
        out["resources"] = [{"autoscalingGroups": [{"name": f"eks-{out['nodeGroupName']}-uuid"}]}]
    elif typ == "aws:ec2/launchTemplate:LaunchTemplate":
        out["latestVersion"] = 1
    elif typ == "aws:ec2/placementGroup:PlacementGroup":
        out.setdefault("name", name)
    elif typ == "aws:sqs/queue:Queue":
        queue = out["name"]
        out |= {
            "arn": f"arn:aws:sqs:us-east-1:{ACCOUNT}:{queue}",
            "url": f"https://sqs.us-east-1.amazonaws.com/{ACCOUNT}/{queue}",
        }
    elif typ == "aws:cloudwatch/eventRule:EventRule":
        out.setdefault("name", f"{name}-rule")
    elif typ == "kubernetes:helm.sh/v3:Release":
        out["status"] = {"status": "deployed", "name": out.get("name", name)}
    return out


class Mocks(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.resources: list[Recorded] = []
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self._requests: dict[tuple[str, str], Any] = {}

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        request = self._requests.get((args.typ, args.name))
        parent = request.parent if request else ""
        deps = tuple(request.dependencies) if request else ()
        self.resources.append(Recorded(args.typ, args.name, dict(args.inputs), args.provider, parent, deps))
        return f"{args.name}-id", _outputs(args)

    def watch(self, monitor: Any) -> None:
        """Keep each registration request: MockResourceArgs lacks the parent and the dependencies."""
        register = monitor.RegisterResource

        def recording(request: Any) -> Any:
            self._requests[(request.type, request.name)] = request
            response = register(request)
            for r in self.resources:
                if (r.typ, r.name) == (request.type, request.name):
                    r.urn = response.urn
            return response

        monitor.RegisterResource = recording

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        self.calls.append((args.token, dict(args.args)))
        if args.token == "aws:ec2/getSubnet:getSubnet":
            subnet = args.args["id"]
            return {"id": subnet, "availabilityZone": f"us-east-1{subnet[-1]}"}, []
        return {}, []

    # -- queries for tests ------------------------------------------------------------------------------------
    def of_type(self, typ: str) -> list[Recorded]:
        return [r for r in self.resources if r.typ == typ]

    def one(self, typ: str, name: str) -> Recorded:
        found = [r for r in self.of_type(typ) if r.name == name]
        assert len(found) == 1, f"{typ} {name}: found {[r.name for r in self.of_type(typ)]}"
        return found[0]

    def types(self) -> set[str]:
        return {r.typ for r in self.resources}

    def children(self, parent: Recorded) -> list[Recorded]:
        return [r for r in self.resources if r.parent == parent.urn]


@pytest.fixture
def mocks() -> Iterator[Mocks]:
    """Fresh event loop and mocks per test (the Pulumi runtime keeps global state between programs)."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    m = Mocks()
    pulumi.runtime.set_mocks(m, project="gpufleet", stack="test", preview=False)
    m.watch(pulumi.runtime.settings.get_monitor())
    yield m
    loop.close()
    asyncio.set_event_loop(None)


def after_registration(check: Callable[[], Any]) -> pulumi.Output[Any]:
    """An Output that runs `check` once every resource the program created has been registered with the mocks."""

    async def run() -> Any:
        from pulumi.runtime.stack import wait_for_rpcs

        await wait_for_rpcs(await_all_outstanding_tasks=False)
        return check()

    return pulumi.Output.from_input(asyncio.ensure_future(run()))


def policy_doc(value: Any) -> dict[str, Any]:
    return json.loads(value) if isinstance(value, str) else value


def assert_scheduling_after(m: Mocks, gpu_operator: Recorded) -> None:
    """The scheduler component exists once, on the same provider, and Kueue waits for the GPU operator."""
    (component,) = [r for r in m.resources if r.typ == "gpufleet:scheduler:GpuScheduling"]
    kueue = [r for r in m.children(component) if r.typ == "kubernetes:helm.sh/v3:Release"]
    assert len(kueue) == 1 and gpu_operator.urn in kueue[0].dependencies
    assert kueue[0].provider == gpu_operator.provider
