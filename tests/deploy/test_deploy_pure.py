"""The pure parts of the Pulumi lifecycle: backend URLs, destroy order, progress lines, kubeconfig output."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import yaml
from pulumi.automation import OutputValue
from pulumi.automation.events import (
    DiagnosticEvent,
    EngineEvent,
    OpType,
    ResourcePreEvent,
    StepEventMetadata,
)

from infra.deploy import describe_event, destroy_phases, kubeconfig_text, resolve_backend, write_kubeconfig
from infra.errors import CheckFailed, ConfigError

ROOT = Path("/srv/project")


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (None, "file:///srv/project/.pulumi-state"),
        ("", "file:///srv/project/.pulumi-state"),
        ("file://state/prod", "file:///srv/project/state/prod"),
        ("file:///var/lib/pulumi", "file:///var/lib/pulumi"),
        ("s3://team-state?region=us-east-1", "s3://team-state?region=us-east-1"),
        ("gs://team-state", "gs://team-state"),
        ("azblob://state", "azblob://state"),
        ("https://api.pulumi.com", "https://api.pulumi.com"),
    ],
)
def test_resolve_backend(given: str | None, expected: str) -> None:
    assert resolve_backend(given, ROOT) == expected


def test_resolve_backend_home_folder() -> None:
    assert resolve_backend("file://~/state", ROOT) == f"file://{Path.home() / 'state'}"


@pytest.mark.parametrize("bad", ["ftp://x", "state", "/abs/folder", "http//x"])
def test_resolve_backend_refuses_other_urls(bad: str) -> None:
    with pytest.raises(
        ConfigError, match=r"not a Pulumi state backend URL; accepted: file://<folder>, s3://"
    ):
        resolve_backend(bad, ROOT)


def urn(kind: str, name: str) -> str:
    return f"urn:pulumi:prod::gpufleet::{kind}::{name}"


def resource(kind: str, name: str, **extra: object) -> dict[str, object]:
    return {"urn": urn(kind, name), "type": kind, "custom": True, **extra}


EXPORT = [
    {"urn": urn("pulumi:pulumi:Stack", "gpufleet-prod"), "type": "pulumi:pulumi:Stack", "custom": False},
    resource("pulumi:providers:aws", "default"),
    resource("pulumi:providers:kubernetes", "cluster"),
    resource("aws:ec2/vpc:Vpc", "vpc"),
    resource("aws:eks/cluster:Cluster", "cluster"),
    resource("aws:eks/nodeGroup:NodeGroup", "h100-train"),
    {"urn": urn("gpufleet:aws:Addons", "addons"), "type": "gpufleet:aws:Addons", "custom": False},
    resource("kubernetes:core/v1:Namespace", "gpu-operator"),
    resource("kubernetes:helm.sh/v3:Release", "gpu-operator"),
    resource("kubernetes:helm.sh/v3:Release", "cluster-autoscaler"),
    resource("kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition", "clusterqueues.kueue.x-k8s.io"),
    resource("kubernetes:kueue.x-k8s.io/v1beta1:ClusterQueue", "research"),
    resource("kubernetes:core/v1:ConfigMap", "read-only", external=True),
]


def test_destroy_phases_remove_in_cluster_resources_first() -> None:
    phases = destroy_phases(EXPORT)
    assert phases == [
        [
            urn("kubernetes:helm.sh/v3:Release", "gpu-operator"),
            urn("kubernetes:helm.sh/v3:Release", "cluster-autoscaler"),
        ],
        [urn("kubernetes:kueue.x-k8s.io/v1beta1:ClusterQueue", "research")],
        [
            urn("kubernetes:core/v1:Namespace", "gpu-operator"),
            urn(
                "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition", "clusterqueues.kueue.x-k8s.io"
            ),
        ],
    ]
    targeted = {u for phase in phases for u in phase}
    # AWS resources, providers, components and read-only resources are left to the final full destroy.
    for res in EXPORT:
        assert (res["urn"] in targeted) == (
            str(res["type"]).startswith("kubernetes:") and res["custom"] and not res.get("external")
        )


def test_destroy_phases_skip_empty_phases() -> None:
    assert destroy_phases([resource("aws:ec2/vpc:Vpc", "vpc")]) == []
    only_helm = [resource("kubernetes:helm.sh/v3:Release", "kueue")]
    assert destroy_phases(only_helm) == [[urn("kubernetes:helm.sh/v3:Release", "kueue")]]


def pre_event(op: OpType, kind: str, name: str) -> EngineEvent:
    meta = StepEventMetadata(op=op, urn=urn(kind, name), type=kind, provider="")
    return EngineEvent(sequence=1, timestamp=0, resource_pre_event=ResourcePreEvent(metadata=meta))


def test_progress_lines() -> None:
    assert describe_event(pre_event(OpType.CREATE, "aws:eks/cluster:Cluster", "gpufleet-prod")) == (
        "+ create   aws:eks/cluster:Cluster gpufleet-prod"
    )
    assert (
        describe_event(pre_event(OpType.DELETE, "aws:ec2/vpc:Vpc", "vpc")) == "- delete   aws:ec2/vpc:Vpc vpc"
    )
    assert describe_event(pre_event(OpType.SAME, "aws:ec2/vpc:Vpc", "vpc")) is None
    diag = DiagnosticEvent(message="creating node group failed\n", color="never", severity="error")
    assert describe_event(EngineEvent(sequence=2, timestamp=0, diagnostic_event=diag)) == (
        "! creating node group failed"
    )
    info = DiagnosticEvent(message="just chatter", color="never", severity="info")
    assert describe_event(EngineEvent(sequence=3, timestamp=0, diagnostic_event=info)) is None


def test_kubeconfig_output_as_text_or_object(tmp_path: Path) -> None:
    doc = {"apiVersion": "v1", "kind": "Config", "clusters": [{"name": "gpufleet-prod"}]}
    as_object = kubeconfig_text({"kubeconfig": OutputValue(doc, secret=True)}, "prod")
    assert yaml.safe_load(as_object) == doc
    as_text = kubeconfig_text({"kubeconfig": OutputValue("apiVersion: v1\n", secret=True)}, "prod")
    assert as_text == "apiVersion: v1\n"
    path = write_kubeconfig(as_object, tmp_path / "prod" / "kubeconfig")
    assert yaml.safe_load(path.read_text()) == doc
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_kubeconfig_missing_output_lists_what_exists() -> None:
    with pytest.raises(CheckFailed, match=r"no 'kubeconfig' output; outputs: clusterName, endpoint"):
        kubeconfig_text(
            {"endpoint": OutputValue("https://x", False), "clusterName": OutputValue("c", False)}, "p"
        )


def test_destroy_stops_with_one_line_when_the_cluster_does_not_answer(tmp_path: Path) -> None:
    """Releasing Prometheus' volumes reads the cluster before it goes; a cluster that does not answer stops the
    destroy with one line saying the cluster is still there, never a traceback."""
    import io
    import socket

    from rich.console import Console

    from infra.deploy import release_monitoring_volumes
    from tests.conftest import load_example

    with socket.socket() as sock:  # a loopback port nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))  # fmt: skip
    spec = load_example("metal")
    mon = spec.cluster.monitoring.model_copy(update={"prometheus": "install"})
    cluster = spec.cluster.model_copy(
        update={"monitoring": mon, "kubeconfig": str(kubeconfig), "kubeconfig_context": None}
    )
    with pytest.raises(CheckFailed) as stopped:
        release_monitoring_volumes(
            spec.model_copy(update={"cluster": cluster}), None, Console(file=io.StringIO())
        )  # type: ignore[arg-type]
    message = str(stopped.value)
    assert message.startswith("destroy of stack 'metal': could not release Prometheus' volumes (")
    assert "the cluster is still there" in message and "\n" not in message
