"""Existing clusters: nothing to check on AWS, only that the kubeconfig the stack names is there."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.preflight.helpers import run_task, stack_doc, write_stack


def metal_stack(tmp_path: Path, kubeconfig: Path) -> Path:
    doc = stack_doc("metal")
    doc["config"]["gpufleet:cluster"]["kubeconfig"] = str(kubeconfig)
    return write_stack(tmp_path, "metal-test", doc)


def _refused_server() -> str:
    """A loopback URL nothing listens on: the socket is bound to find a free port, then closed."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"https://127.0.0.1:{sock.getsockname()[1]}"


KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "{server}", insecure-skip-tls-verify: true}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: ctx, context: {{cluster: c, user: u}}}}]
current-context: ctx
"""


@pytest.mark.parametrize(
    ("case", "text", "context"),
    [
        ("refused", KUBECONFIG, None),
        ("no such context", KUBECONFIG, "nosuchctx"),
        ("not YAML", "clusters: [a: b: c\n", None),
    ],
)
def test_existing_cluster_preflight_fails_when_it_cannot_read_the_cluster(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    case: str,
    text: str,
    context: str | None,
) -> None:
    """A kubeconfig whose server refuses connections, a `kubeconfigContext` the file does not hold, and a
    kubeconfig that is not YAML are each an error naming gpufleet:cluster.kubeconfig, exit 1, not a warning and
    `preflight passed`: deploy stops on errors only (docs/deploy.md), so a warning would let it go ahead with
    nothing checked. No AWS credentials are needed for an existing cluster."""
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(text.format(server=_refused_server()))
    doc = stack_doc("metal")
    doc["config"]["gpufleet:cluster"]["kubeconfig"] = str(kubeconfig)
    if context:
        doc["config"]["gpufleet:cluster"]["kubeconfigContext"] = context
    result = run_task(capsys, "preflight", "--stack", str(write_stack(tmp_path, "metal-test", doc)))
    assert result.returncode == 1, (case, result.stdout, result.stderr)
    out = " ".join(result.stdout.split())
    assert "could not read the cluster" in out and "nothing to check on AWS" in out
    assert "preflight passed" not in result.stdout
    assert result.stderr.strip().startswith("error: preflight found")


def test_existing_cluster_without_kubeconfig_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_task(capsys, "preflight", "--stack", str(metal_stack(tmp_path, tmp_path / "missing")))
    assert result.returncode == 1
    assert "gpufleet:cluster.kubeconfig" in result.stdout
    assert result.stderr.strip().startswith("error: preflight found 1 error(s)")
