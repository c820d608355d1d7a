"""The chart's visibility objects as the twin applies them: the aggregator reaches Kueue's visibility server on
127.0.0.1 through an `ExternalName: localhost` Service and the APIServices' port (k8s.io/apiserver v0.36.4
pkg/util/proxy/proxy.go:148-152), and nothing else in the chart changes."""

from __future__ import annotations

from pathlib import Path

from tests.kueue.conftest import Render
from twin.kueue import KueuePorts, local_configuration, manager_configuration
from twin.kueue_visibility import SERVICE, visibility_for_loopback

PORT = 31082


def test_the_visibility_service_is_an_external_name_for_localhost(render: Render) -> None:
    rendered = render("metal")
    objects = visibility_for_loopback(rendered, PORT)
    (service,) = [o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == SERVICE]
    assert service["spec"]["type"] == "ExternalName" and service["spec"]["externalName"] == "localhost"
    assert "selector" not in service["spec"]  # an ExternalName Service selects no pods


def test_every_visibility_apiservice_sends_to_the_loopback_port_and_keeps_the_charts_tls(
    render: Render,
) -> None:
    rendered = render("metal")
    services = {
        o["metadata"]["name"]: o for o in visibility_for_loopback(rendered, PORT) if o["kind"] == "APIService"
    }
    assert set(services) == {"v1beta1.visibility.kueue.x-k8s.io", "v1beta2.visibility.kueue.x-k8s.io"}
    for api in services.values():
        assert api["spec"]["service"] == {"name": SERVICE, "namespace": "kueue-system", "port": PORT}
        assert api["spec"]["insecureSkipTLSVerify"] is True  # the chart's without cert-manager


def test_nothing_else_in_the_chart_changes(render: Render) -> None:
    rendered = render("metal")
    objects = visibility_for_loopback(rendered, PORT)
    changed = [(o["kind"], o["metadata"]["name"]) for o, r in zip(objects, rendered, strict=True) if o != r]
    assert sorted(changed) == [
        ("APIService", "v1beta1.visibility.kueue.x-k8s.io"),
        ("APIService", "v1beta2.visibility.kueue.x-k8s.io"),
        ("Service", SERVICE),
    ]


def test_kueues_visibility_server_listens_on_loopback_only(render: Render) -> None:
    config = manager_configuration(render("metal"))
    local = local_configuration(config, KueuePorts(1, 2, 3, PORT), Path("/certs"))
    assert local["visibilityServer"] == {"bindAddress": "127.0.0.1", "bindPort": PORT}
    assert "visibilityServer" not in config  # the chart's: Kueue's default, 0.0.0.0:8082
