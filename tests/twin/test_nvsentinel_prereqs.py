"""The NVSentinel preflight on the twin, reading a real API server. The metal stack installs NVSentinel
(`selfHealing` defaults to `cordon` on existing clusters); the twin, like a fresh bare-metal cluster, serves no
cert-manager CRDs and has no StorageClass, so the check fails; with cert-manager's CRDs and a default
StorageClass it passes."""

from __future__ import annotations

from typing import Any

from infra.preflight.findings import Severity
from infra.preflight.kube import KubernetesReader
from infra.preflight.nvsentinel import check_nvsentinel_prerequisites
from infra.preflight.storage import DEFAULT_CLASS
from infra.stackfile import load_stack
from tests.conftest import ROOT
from tests.support import eventually
from tests.twin.kube import Kube


def _crd(plural: str, kind: str) -> dict[str, Any]:
    """The names cert-manager's CRDs serve (cert-manager.io/v1 Certificate, Issuer); the schema is left open:
    the check reads only whether the kinds are served."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.cert-manager.io"},
        "spec": {
            "group": "cert-manager.io",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    },
                }
            ],
        },
    }


STORAGE_CLASS = {
    "apiVersion": "storage.k8s.io/v1",
    "kind": "StorageClass",
    "metadata": {"name": "nvsentinel-local", "annotations": {DEFAULT_CLASS: "true"}},
    "provisioner": "rancher.io/local-path",
}


def test_without_cert_manager_or_a_default_storage_class_preflight_fails_then_passes(
    metal_twin: Kube,
) -> None:
    spec = load_stack(ROOT / "Pulumi.metal.yaml")
    reader = KubernetesReader(str(metal_twin.kubeconfig), None)
    before = check_nvsentinel_prerequisites(spec, reader)
    bad = [f.message for f in before if f.severity is Severity.ERROR]
    assert len(bad) == 2 and "cert-manager is not installed" in bad[0] and "no default StorageClass" in bad[1]
    assert all(
        f.fix.endswith("or set selfHealing: off (no GPU self-healing on this cluster)")
        for f in before
        if f.is_error
    )
    crds = [_crd("certificates", "Certificate"), _crd("issuers", "Issuer")]
    try:
        for obj in [*crds, STORAGE_CLASS]:
            created = metal_twin.create(obj)
            assert created.ok, created.err
        eventually(
            lambda: metal_twin.attempt("get", "certificates.cert-manager.io", "-A").ok, "the CRDs served"
        )
        after = check_nvsentinel_prerequisites(spec, reader)
        assert {f.severity for f in after} == {Severity.OK}, after
        assert any("nvsentinel-local" in f.message for f in after)
    finally:
        for obj in crds:
            metal_twin.attempt("delete", "crd", obj["metadata"]["name"], "--ignore-not-found")
        metal_twin.attempt("delete", "storageclass", "nvsentinel-local", "--ignore-not-found")
