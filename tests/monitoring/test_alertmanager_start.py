"""The Alertmanager configuration gpufleet generates, run by the Alertmanager release the chart deploys
(v0.34.0, the toolchain's build): it starts while the receivers' Secret files do not exist yet (the mounts are
optional, so the kubelet leaves the folders empty), and the chart's Watchdog reaches the receiver the spec
names for it. An alert posted to its API is routed as Prometheus' would be."""

from __future__ import annotations

import json
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.monitoring.stack import alertmanager_config
from tests.monitoring.conftest import ops_spec
from tests.support import eventually

RECEIVERS = {
    "receivers": [
        {"name": "pager", "pagerduty": {"routingKey": {"secret": "alert-keys", "key": "pagerduty"}}},
        {"name": "heartbeat", "slack": {"webhookUrl": {"secret": "alert-keys", "key": "heartbeat"}}},
    ],
    "routes": {"critical": "pager"},
    "watchdog": "heartbeat",
}


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def alertmanager(tmp_path: Path, alertmanager_bin: str) -> Iterator[str]:
    """The generated configuration, with the secret files' folder present and empty (an optional Secret
    volume whose Secret does not exist yet)."""
    config = alertmanager_config(ops_spec(alertmanager=RECEIVERS).cluster.monitoring)
    assert config is not None
    config["templates"] = []  # the chart's template folder, empty in the pod too
    (tmp_path / "alertmanager.yaml").write_text(yaml.safe_dump(config))
    url = f"127.0.0.1:{_port()}"
    argv = [alertmanager_bin, f"--config.file={tmp_path / 'alertmanager.yaml'}", f"--storage.path={tmp_path / 'data'}",
            f"--web.listen-address={url}", "--cluster.listen-address="]  # fmt: skip
    with (tmp_path / "log").open("w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        eventually(
            lambda: _ok(f"http://{url}/-/ready") or proc.poll() is not None, "Alertmanager up", 30, 0.2
        )
        assert proc.poll() is None, (tmp_path / "log").read_text()[-2000:]
        yield f"http://{url}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def _post(url: str, alerts: list[dict[str, Any]]) -> None:
    body = json.dumps(alerts).encode()
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=10) as r:
        assert r.status == 200


def test_alertmanager_starts_without_its_secrets_and_the_watchdog_reaches_the_named_receiver(
    alertmanager: str,
) -> None:
    _post(f"{alertmanager}/api/v2/alerts", [
        {"labels": {"alertname": "Watchdog", "severity": "none"}},
        {"labels": {"alertname": "GpuFallenOffBus", "severity": "critical"}},
    ])  # fmt: skip

    def routed() -> dict[str, list[str]]:
        with urllib.request.urlopen(f"{alertmanager}/api/v2/alerts", timeout=10) as r:
            alerts = json.load(r)
        found = {a["labels"]["alertname"]: sorted(x["name"] for x in a["receivers"]) for a in alerts}
        return found if len(found) == 2 else {}

    assert eventually(routed, "both alerts routed") == {
        "Watchdog": ["heartbeat"],
        "GpuFallenOffBus": ["pager"],
    }


def test_a_watchdog_receiver_that_does_not_exist_is_a_config_error() -> None:
    from infra.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        ops_spec(alertmanager={**RECEIVERS, "watchdog": "deadman"})
    assert "watchdog: no receiver named 'deadman' (receivers: pager, heartbeat)" in "\n".join(
        refused.value.problems
    )
