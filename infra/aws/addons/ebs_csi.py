"""Storage Prometheus' volume binds to on EKS: the EBS CSI driver add-on, its IAM, and a default gp3 class.

An EKS cluster has no driver that provisions EBS volumes until the `aws-ebs-csi-driver` add-on is installed
(EKS User Guide, "Store Kubernetes volumes with Amazon EBS"), and clusters of Kubernetes 1.30 and later have no
default StorageClass. A claim without a class, like the volumeClaimTemplate of Prometheus, then stays Pending
for ever. Whenever the stack installs Prometheus it therefore installs the add-on and a default class.

The class is gpufleet's own, not the chart's `defaultStorageClass` (aws-ebs-csi-driver v1.64.0
charts/aws-ebs-csi-driver/templates/ebs-csi-default-sc.yaml), because that one sets no parameters: it would
create unencrypted volumes. Ours asks for gp3 (`type`, pkg/driver/constants.go:43 at v1.64.0) and encryption
(`encrypted`, :64) with the account's default EBS key, binds when the pod is scheduled (the volume lands in the
pod's zone) and deletes the volume with its claim, so a destroyed stack leaves no volume billed.

The controller's ServiceAccount `ebs-csi-controller-sa` in `kube-system` assumes an IRSA role with AWS's
managed `AmazonEBSCSIDriverPolicyV2`, the policy the driver's install guide names at v1.64.0 (docs/install.md:
"AWS maintains a managed policy version of the example policy ... service-role/AmazonEBSCSIDriverPolicyV2").
It scopes the driver to volumes it created (tagged `ebs.csi.aws.com/cluster: true`), which is all Prometheus'
claim needs.
"""

from __future__ import annotations

from typing import Any

from infra.spec import ClusterSpec

ADDON = "aws-ebs-csi-driver"
NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "ebs-csi-controller-sa"
POLICY = "service-role/AmazonEBSCSIDriverPolicyV2"
PROVISIONER = "ebs.csi.aws.com"
STORAGE_CLASS = "gp3"
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"


def installs_ebs_csi(spec: ClusterSpec) -> bool:
    """On aws whenever the stack installs Prometheus, the one claim the stack itself makes."""
    return spec.platform == "aws" and spec.cluster.monitoring.prometheus == "install"


def default_storage_class() -> dict[str, Any]:
    """The cluster's default StorageClass: encrypted gp3 from the EBS CSI driver, bound in the pod's zone."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": STORAGE_CLASS,
            "annotations": {DEFAULT_CLASS_ANNOTATION: "true"},
            "labels": {"app.kubernetes.io/managed-by": "gpufleet"},
        },
        "provisioner": PROVISIONER,
        "parameters": {"type": "gp3", "encrypted": "true"},
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
        "allowVolumeExpansion": True,
    }
