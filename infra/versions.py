"""The versions recipe: every chart, image, AMI release and tool version the toolkit deploys, pinned in one place.

Nothing floats to "latest": a newly published GPU AMI or chart has broken every GPU pod for users before, so an
upgrade is a reviewed change to this file (or to `gpufleet:versions` in a stack file), never a side effect of a
deploy. Per-Kubernetes-minor pins (AMI releases, cluster-autoscaler and kube-scheduler images) live in
`PER_MINOR`; the supported Kubernetes range is exactly the minors listed there, because the cluster-autoscaler
and kube-scheduler images must match the control plane's minor. A minor upstream has released but EKS does not
offer yet has its kube-scheduler patch and no EKS pins: existing clusters run it, aws stacks are refused it
(`EKS_KUBERNETES`).
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, field_validator
from pydantic.alias_generators import to_camel

from infra.images import pin_problem, resolve


@dataclass(frozen=True)
class MinorPins:
    """Pins that must move together with the Kubernetes minor version. The EKS pins are None for a minor EKS
    does not offer yet: there is no AMI release to name, and an autoscaler release is pinned with them."""

    kubernetes_patch: str  # upstream patch release: kube-scheduler image tag for the `existing` platform
    al2023_nvidia_ami_release: (
        str | None
    )  # EKS managed node group release_version (k8s patch - AMI build date)
    bottlerocket_nvidia_release: str | None  # Bottlerocket release_version for the *-nvidia variant
    cluster_autoscaler_image: (
        str | None
    )  # registry.k8s.io/autoscaling/cluster-autoscaler tag (same minor as k8s)

    @property
    def on_eks(self) -> bool:
        """Whether every pin an aws stack needs is there: EKS offers this minor and its AMIs are pinned."""
        return None not in (
            self.al2023_nvidia_ami_release,
            self.bottlerocket_nvidia_release,
            self.cluster_autoscaler_image,
        )


# Checked 2026-11-30. kube-scheduler: the 2026-08-20 upstream patch set (v1.36.4, v1.35.8, v1.34.11) and the
# final 1.33 patch (v1.33.13, 1.33 is end of life upstream). AL2023 NVIDIA: all four rows of amazon-eks-ami
# release v20260930 (format "<EKS k8s patch>-<YYYYMMDD>"); later AMI releases exist (v20261023, v20261031,
# v20261119) but their per-minor release versions were not confirmed. Bottlerocket: "<OS version>-<commit>",
# one OS release for every minor (1.65.0, 2026-09-03; 1.66.0 is out but its commit id was not confirmed).
# cluster-autoscaler: the 2026-07-22 patch set (kubernetes/k8s.io#9760).
# 1.37, checked 2026-12-05: kube-scheduler v1.37.2 is the newest 1.37 patch the Go module proxy serves
# (k8s.io/kubernetes v1.37.2). EKS does not list 1.37 (the EKS user guide's "Understand the Kubernetes version
# lifecycle on EKS"), so amazon-eks-ami and Bottlerocket publish no 1.37 release to pin, and no cluster-autoscaler
# 1.37 release could be confirmed: those pins stay None until EKS lists the minor.
PER_MINOR: dict[str, MinorPins] = {
    "1.33": MinorPins("v1.33.13", "1.33.13-20260930", "1.65.0-0be31b34", "v1.33.6"),
    "1.34": MinorPins("v1.34.11", "1.34.11-20260930", "1.65.0-0be31b34", "v1.34.5"),
    "1.35": MinorPins("v1.35.8", "1.35.8-20260930", "1.65.0-0be31b34", "v1.35.2"),
    "1.36": MinorPins("v1.36.4", "1.36.4-20260930", "1.65.0-0be31b34", "v1.36.1"),
    "1.37": MinorPins("v1.37.2", None, None, None),
}
SUPPORTED_KUBERNETES: tuple[str, ...] = tuple(PER_MINOR)
# The minors an aws stack may run: those EKS offers, whose AMI and autoscaler releases are pinned above.
EKS_KUBERNETES: tuple[str, ...] = tuple(minor for minor, pins in PER_MINOR.items() if pins.on_eks)
EKS_CHECKED = "2026-12-05"  # when EKS's list of minors was last compared with PER_MINOR
# This repository's release (pyproject.toml `project.version`; a test keeps them equal). Images built from this
# repository are deployed at the tag of the same release: .github/workflows/extender-image.yml pushes
# `<IMAGE_REGISTRY>/gpufleet-extender:<version>` for every `v<version>` git tag (docker/metadata-action semver).
PROJECT_VERSION = "0.1.0"
# Where this repository's images live: the registry and owner the image workflow pushes to (it reads this line
# and refuses to push when the repository's owner differs) and the stacks deploy from. A fork changes it here.
IMAGE_REGISTRY = "ghcr.io/gpufleet"
EXTENDER_REPOSITORY = f"{IMAGE_REGISTRY}/gpufleet-extender"
DEFAULT_KUBERNETES = "1.35"
# Kueue: the chart, the controller image and the twin's controller (TWIN_KUEUE) all run this release, and the
# scheduler's models of Kueue (validation, the dynamic engine, tests/scheduler/kueue_model.py) follow its source.
# Bumping it: docs/architecture.md, "Find your room".
KUEUE_VERSION = "0.19.2"
# Karpenter: the chart, the controller image, the CRDs the twin serves and the twin's Karpenter (the kwok provider
# on the same core, TWIN_KARPENTER_KWOK) all run this release.
KARPENTER_VERSION = "1.14.1"


class Versions(BaseModel):
    """`gpufleet:versions`: every key optional; unset keys take the pinned defaults below."""

    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True)

    # Node images (None: the pin for the cluster's Kubernetes minor from PER_MINOR).
    al2023_nvidia_ami_release: str | None = None
    bottlerocket_nvidia_release: str | None = None
    # NVIDIA stack. The driver branch is the one the AL2023 NVIDIA AMIs ship, so bare metal matches the cloud
    # (580 by default; since AMI v20260917 a 595 driver is also present, selected only for G7 instances).
    nvidia_driver_branch: str = "580"
    # Exact driver version bare-metal hosts install (Ansible `nvidia_driver_version`), so every host of a fleet
    # runs the same driver and Fabric Manager; raising it upgrades the hosts on the next `invoke metal --reboot`.
    # 580.95.05: a datacenter release of the 580 branch in NVIDIA's CUDA repositories.
    nvidia_driver_version: str = "580.95.05"
    nvidia_container_toolkit: str = "1.20.0"  # the toolkit GPU operator v26.7.0 deploys
    gpu_operator_chart: str = "v26.7.0"
    # Scheduling and autoscaling.
    kueue_chart: str = KUEUE_VERSION
    # Another Kueue than KUEUE_VERSION is refused unless this is true: the compiled objects (API version,
    # configuration defaults) and the twin are proven against KUEUE_VERSION only, and a Helm upgrade moves
    # Kueue's CRDs with the chart (they are chart templates).
    kueue_chart_override: bool = False
    cluster_autoscaler_chart: str = "9.59.0"
    cluster_autoscaler_image: str | None = None
    # The gpu-binpack scheduler's registry.k8s.io/kube-scheduler tag (None: the minor's patch from PER_MINOR), or
    # that tag with its digest (`v1.35.8@sha256:<digest>`): the tag must name the cluster's minor.
    kube_scheduler_image: str | None = None
    # placement.strategy: FragmentationAware: the scheduler extender's image. A tag of EXTENDER_REPOSITORY (this
    # repository's release), a tag with its digest, or a whole reference (`<name>@sha256:<digest>`, deployed
    # verbatim). Digests are not looked up: pin the one the image workflow reports (docs/spec.md, versions).
    extender_image: str = PROJECT_VERSION
    # Karpenter (cluster.autoscaler: karpenter): chart and controller image move together. The digest is the
    # 1.14.1 controller image recorded by the release's docs commit (aws/karpenter-provider-aws 1d927085).
    karpenter_chart: str = KARPENTER_VERSION
    karpenter_image_digest: str = "sha256:723130949e4cab989461ff07d1be4cd781d63515432494641b33c235f300ae23"
    # AWS add-ons.
    # eks-charts versions this chart with a leading "v". v0.5.31 ships image v0.5.21-eksbuild.9 (Aug 2026); a
    # later bump to v0.5.21-eksbuild.13 (eks-charts#1366) exists but its chart number was not confirmed.
    efa_device_plugin_chart: str = "v0.5.31"
    node_monitoring_agent_addon: str = "v1.6.6-eksbuild.1"
    # The EBS CSI driver add-on Prometheus' volume is provisioned by (infra.aws.addons.ebs_csi): driver v1.64.0
    # (kubernetes-sigs/aws-ebs-csi-driver tag v1.64.0, Aug 2026); preflight checks that EKS publishes this
    # build for the cluster's Kubernetes version.
    ebs_csi_driver_addon: str = "v1.64.0-eksbuild.1"
    # On aws dcgm-exporter reads that add-on's DCGM host engine (4.5.2 in v1.6.6), so it runs the exporter
    # release built on the same DCGM (NVIDIA/dcgm-exporter tag 4.5.2-4.8.1, hack/VERSION), not the GPU
    # operator chart's default; moves with node_monitoring_agent_addon (infra.gpu_stack.gpu_operator). What its
    # pod mapping does is in DCGM_EXPORTER_RELEASES below.
    eks_dcgm_exporter: str = "4.5.2-4.8.1-distroless"
    # Operations (docs/operations.md). kube-prometheus-stack 88.5.3 ships prometheus-operator v0.93.1,
    # Prometheus v3.14.0, Grafana chart 12.11.1, kube-state-metrics chart 8.4.0 (its Chart.yaml at the tag).
    kube_prometheus_stack_chart: str = "88.5.3"
    # The busybox image of that chart's CRD upgrade job (`crds.upgradeJob`, whose default tag is "latest");
    # its kubectl image defaults to the cluster's own version (registry.k8s.io/kubectl).
    kps_crd_job_busybox: str = "1.37.0"
    # NVIDIA NVSentinel: GPU fault detection, quarantine (cordon + taint), drain, un-quarantine on recovery.
    nvsentinel_chart: str = "v1.29.0"

    @field_validator("extender_image")
    @classmethod
    def _pinned_image(cls, pin: str) -> str:
        problem = pin_problem(pin, whole_reference=True)
        if problem:
            raise ValueError(problem)
        return pin

    @field_validator("kube_scheduler_image")
    @classmethod
    def _pinned_tag(cls, pin: str | None) -> str | None:
        problem = None if pin is None else pin_problem(pin, whole_reference=False)
        if problem:
            raise ValueError(problem)
        return pin

    def resolved(self, kubernetes_version: str) -> Versions:
        """A copy with every per-minor pin filled in for this Kubernetes minor."""
        pins = PER_MINOR[kubernetes_version]
        return self.model_copy(
            update={
                "al2023_nvidia_ami_release": self.al2023_nvidia_ami_release or pins.al2023_nvidia_ami_release,
                "bottlerocket_nvidia_release": (
                    self.bottlerocket_nvidia_release or pins.bottlerocket_nvidia_release
                ),
                "cluster_autoscaler_image": self.cluster_autoscaler_image or pins.cluster_autoscaler_image,
                "kube_scheduler_image": self.kube_scheduler_image or pins.kubernetes_patch,
            }
        )


@dataclass(frozen=True)
class ExporterRelease:
    """What one dcgm-exporter release's Kubernetes pod mapping does with `KUBERNETES_VIRTUAL_GPUS=true`
    (NVIDIA/dcgm-exporter internal/pkg/transformation/kubernetes.go, `PodMapper.Process`, at the tag). Without
    that variable every release listed keeps one pod per device, the last one the kubelet lists, and every free
    GPU's series (`toDeviceToPod`); `infra.monitoring.exporter` turns a release and a deployment into what its
    series mean."""

    keeps_free_gpus: bool  # a GPU no pod holds keeps its series while other GPUs of the node are held
    per_process: (
        bool  # GPU_UTIL and FB_USED of a pod are its own processes' (NVML), beside the device's series
    )
    source: str  # where, at the tag, with line numbers
    read: bool = True  # False: no copy of the tag was readable; the entry says what it is taken from


DCGM_EXPORTER_RELEASES: dict[str, ExporterRelease] = {
    # With the variable each held device's series is replaced by one copy per pod (the device's own value) and
    # `if len(newmetrics) > 0 { metrics[counter] = newmetrics }` drops every device no pod holds; no
    # per-process values (process_metrics.go does not exist at this tag).
    "4.5.2-4.8.1": ExporterRelease(
        keeps_free_gpus=False,
        per_process=False,
        source="4.5.2-4.8.1 internal/pkg/transformation/kubernetes.go:246-297 (copies :262-286, the list "
        "replaced :292-294); toDeviceToPod :756-778 (`<uuid>::<n>` maps the GPU, last pod wins)",
    ),
    # Commit fb5e3dc (#594): GPU_UTIL/FB_USED per pod from NVML's per-process accounting, PIDs mapped to pods
    # through /proc/<pid>/cgroup (pidmapper.go:45, needs the host's PID namespace) and pod UIDs from the API
    # server (createPodInfo :920-955, a pod informer only with an in-cluster token :109-119); a pod it cannot map
    # reads "0" (buildIdlePodValues :271-279); the device's own series stays beside them (:366); free GPUs keep
    # their series (:399-403).
    "4.5.3-4.8.2": ExporterRelease(
        keeps_free_gpus=True,
        per_process=True,
        source="4.5.3-4.8.2 internal/pkg/transformation/kubernetes.go:338-410 (per-process :360-369, copies "
        ":371-398, free GPUs kept :399-403), :201-279, :920-955; pidmapper.go:40-107; process_metrics.go:30-32",
    ),
    # The GPU operator v26.7.0's default. No copy of this tag was readable here (the dcgm-exporter snapshot ends
    # at 4.5.3-4.8.2 plus one commit, d5e5f51; the Go module proxy refuses the tag). Taken to behave as
    # 4.5.3-4.8.2, whose per-process mapping and free-GPU preservation it descends from; reclaim and the idle
    # alert check the one way that could be wrong (a busy GPU whose pods all read 0) on every release.
    "4.6.0-4.8.3": ExporterRelease(
        keeps_free_gpus=True,
        per_process=True,
        source="as 4.5.3-4.8.2 (not read at its tag)",
        read=False,
    ),
}
# The dcgm-exporter image each GPU operator chart deploys when `dcgmExporter.version` is not set: its
# deployments/gpu-operator/values.yaml `dcgmExporter.version` (v26.7.0: line 304). A test keeps the pinned chart
# (Versions.gpu_operator_chart) in this table.
GPU_OPERATOR_DCGM_EXPORTER: dict[str, str] = {"v26.7.0": "4.6.0-4.8.3-distroless"}


def exporter_release(image_tag: str) -> str:
    """A dcgm-exporter image tag without its image variant: `4.5.2-4.8.1-distroless` -> `4.5.2-4.8.1`."""
    return "-".join(image_tag.split("-")[:2])


# Chart repositories (the versions above are the only thing that changes between releases).
CHART_REPOS: dict[str, str] = {
    "gpu-operator": "https://helm.ngc.nvidia.com/nvidia",
    "kueue": "oci://registry.k8s.io/kueue/charts",
    "cluster-autoscaler": "https://kubernetes.github.io/autoscaler",
    "aws-efa-k8s-device-plugin": "https://aws.github.io/eks-charts",
    "kube-prometheus-stack": "https://prometheus-community.github.io/helm-charts",
    "nvsentinel": "oci://ghcr.io/nvidia",
    "karpenter": "oci://public.ecr.aws/karpenter",
    "karpenter-crd": "oci://public.ecr.aws/karpenter",  # Karpenter's CRDs, as their own chart
}


# The ProvisioningRequest CRD at the cluster-autoscaler's own release tag (the chart does not install it; Kueue
# needs it served before it starts). `version` is the autoscaler image tag, e.g. v1.35.2.
PROVISIONING_REQUEST_CRD = (
    "https://raw.githubusercontent.com/kubernetes/autoscaler/cluster-autoscaler-{version}/"
    "cluster-autoscaler/apis/config/crd/autoscaling.x-k8s.io_provisioningrequests.yaml"
)


def extender_image(versions: Versions) -> str:
    """The extender image the stack deploys for `versions.extender_image` (infra.images.resolve)."""
    return resolve(EXTENDER_REPOSITORY, versions.extender_image)


def provisioning_request_crd(autoscaler_image: str) -> str:
    return PROVISIONING_REQUEST_CRD.format(version=autoscaler_image.removeprefix("v"))


# ---- The twin's toolchain (twin, `invoke twin`): real components built from their Go modules ---------
# Each is built by the wrapper module in twin/toolchain/<wrapper>/ (its go.mod requires the same version:
# tests/foundation/test_versions_source.py) and cached outside the clone, keyed by version. Checked against the Go module proxy 2026-12-01.


@dataclass(frozen=True)
class GoBuild:
    """One twin component: a version, the wrapper module that builds it, and the programs it yields."""

    name: str
    version: str
    wrapper: str  # folder under twin/toolchain/ ("" when built from a copy of the module zip or data only)
    programs: tuple[str, ...]
    module: str  # the upstream module whose version this is (data files are read from its zip)
    note: str = ""


# etcd: the newest 3.6 patch the proxy serves; kubeadm maps Kubernetes 1.34-1.36 to etcd 3.6
# (cmd/kubeadm/app/constants SupportedEtcdVersion) and kwok v0.8.0 to 3.6.10 (pkg/kwokctl/components/etcd_version.go).
TWIN_ETCD = GoBuild("etcd", "v3.6.16", "etcd", ("etcd",), "go.etcd.io/etcd/server/v3")
# kwok: plays the kubelet for fake nodes (node heartbeats, pod phases).
TWIN_KWOK = GoBuild("kwok", "v0.8.0", "kwok", ("kwok",), "sigs.k8s.io/kwok")
# Kueue: the controller at the chart version the stacks deploy (Versions.kueue_chart; the proxy serves v0.19.2).
TWIN_KUEUE = GoBuild("kueue", f"v{KUEUE_VERSION}", "kueue", ("kueue",), "sigs.k8s.io/kueue")
# Helm renders the Kueue chart (from the Kueue module's charts/kueue) exactly as the stack's release would;
# v3.18.6 is the Helm the pulumi-kubernetes provider below embeds (its provider/go.mod).
TWIN_HELM = GoBuild("helm", "v3.18.6", "helm", ("helm",), "helm.sh/helm/v3")
# The Pulumi engine. The CLI may be newer than the Python SDK, never older (automation/_minimum_version.py);
# pyproject's pulumi pin stays at or below it. (The language host is not needed: the twin's programs are inline.)
TWIN_PULUMI = GoBuild("pulumi", "v3.274.1", "pulumi", ("pulumi",), "github.com/pulumi/pulumi/pkg/v3")
# pulumi-resource-kubernetes: the provider module has no tags of its own, only pseudo-versions, and the proxy
# serves only the one of release v4.25.0 (commit f47bc2d6f199, tag v4.25.0); the pulumi-kubernetes SDK pin in
# pyproject.toml is moved to the same release (v4.26.0 ... v4.32.0 pseudo-versions are refused, 403).
TWIN_PULUMI_KUBERNETES = GoBuild(
    "pulumi-kubernetes",
    "4.25.0",
    "",  # built from a copy of the provider's module zip (twin.toolchain.build), not a wrapper
    ("pulumi-resource-kubernetes",),
    "github.com/pulumi/pulumi-kubernetes/provider/v4",
    note="v4.0.0-20260115033456-f47bc2d6f199",
)


# The Prometheus operator kube-prometheus-stack 88.5.3 deploys (its CRDs serve gpufleet's monitors and rules on
# the twin; `invoke twin --monitoring` runs the operator itself).
TWIN_PROMETHEUS_OPERATOR = GoBuild(
    "prometheus-operator",
    "v0.93.1",
    "prometheus-operator",
    ("prometheus-operator",),
    "github.com/prometheus-operator/prometheus-operator",
)


# The monitoring chain `invoke twin --monitoring` runs, at the versions kube-prometheus-stack 88.5.3 deploys
# (its values.yaml image tags, ../crds/SOURCES.md): Prometheus v3.14.0 (published to the Go module proxy as
# v0.314.0: Prometheus 3.x tags map to v0.3XX.Y modules), Alertmanager v0.34.0 and kube-state-metrics v2.20.0 (the
# appVersion of the chart's kube-state-metrics 8.4.0 dependency, its Chart.yaml). Every test that evaluates a rule or a query uses
# this Prometheus, never Debian's 2.42.
TWIN_PROMETHEUS = GoBuild(
    "prometheus",
    "v0.314.0",
    "prometheus",
    ("prometheus", "promtool"),
    "github.com/prometheus/prometheus",
    note="v3.14.0",
)
# (Alertmanager is built from a copy of its module zip, not a wrapper: twin.toolchain.build._build_alertmanager.)
TWIN_ALERTMANAGER = GoBuild(
    "alertmanager", "v0.34.0", "", ("alertmanager",), "github.com/prometheus/alertmanager"
)
TWIN_KUBE_STATE_METRICS = GoBuild(
    "kube-state-metrics",
    "v2.20.0",
    "kube-state-metrics",
    ("kube-state-metrics",),
    "k8s.io/kube-state-metrics/v2",
)


# Karpenter's CRDs as the AWS provider ships them (the Karpenter version the stacks deploy): data only, read from
# the module zip (pkg/apis/crds), so the twin's API server validates the stack's NodePools and EC2NodeClasses.
TWIN_KARPENTER_CRDS = GoBuild(
    "karpenter-crds", f"v{KARPENTER_VERSION}", "", (), "github.com/aws/karpenter-provider-aws"
)
# Karpenter itself on Karpenter stacks' twins: the core's kwok cloud provider (sigs.k8s.io/karpenter/kwok, main.go:
# the core's operator and controllers with a provider whose "instances" are kwok Nodes), at the core the AWS
# provider of that release is built on (karpenter-provider-aws@v1.14.1 go.mod requires the core's v1.14.1 tag
# commit). The core's go.mod has no replace lines. Its data (the KWOKNodeClass CRD) comes from the module zip.
TWIN_KARPENTER_KWOK = GoBuild(
    "karpenter-kwok",
    f"v{KARPENTER_VERSION}",
    "karpenter-kwok",
    ("karpenter-kwok",),
    "sigs.k8s.io/karpenter",
)


# The CRDs of the job frameworks Kueue integrates (kueue_config.FRAMEWORKS) that a cluster gets from their
# operators: Kueue sets up an integration only when its API is served (kueue jobframework/setup.go, "No
# matching API in the server for job framework, deferring"), so the twin serves them and Kueue admits such
# jobs for real (no operator runs them: they create no pods). The stacks do not pin these operators; these are
# the newest releases the Go module proxy serves.
TWIN_TRAINING_OPERATOR_CRDS = GoBuild(
    "training-operator-crds", "v1.9.3", "", (), "github.com/kubeflow/training-operator"
)
TWIN_KUBERAY_CRDS = GoBuild("kuberay-crds", "v1.5.0", "", (), "github.com/ray-project/kuberay/ray-operator")
# JobSet's CRD at the release Kueue v0.19.2 is built against (its go.mod requires sigs.k8s.io/jobset v0.12.0).
TWIN_JOBSET_CRDS = GoBuild("jobset-crds", "v0.12.0", "", (), "sigs.k8s.io/jobset")


# The ProvisioningRequest CRD (autoscaling.x-k8s.io), served on twins of stacks with
# `scheduling.provisioningRequests`. The cluster-autoscaler's own modules are not served by the Go module proxy
# (every pseudo-version of its release tags is refused, 403), but its `apis` module is, at the commit Kueue
# v0.19.2 requires (kueue go.mod); that CRD's v1 schema is the one of autoscaler 1.35.2 (the two differ only in a
# controller-gen annotation and v1beta1's deprecation flag, kubernetes/autoscaler git diff of the file).
TWIN_PROVISIONING_CRD = GoBuild(
    "provisioningrequest-crd",
    "v0.0.0-20240830133931-adfbe7e45277",
    "",
    (),
    "k8s.io/autoscaler/cluster-autoscaler/apis",
)


def twin_kubernetes(minor: str) -> GoBuild:
    """The control plane (apiserver, controller-manager, scheduler, kubectl) at a minor's pinned patch."""
    version = PER_MINOR[minor].kubernetes_patch
    return GoBuild(
        "kubernetes",
        version,
        f"kube-{minor}",
        ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"),
        "k8s.io/kubernetes",
    )


# The minors the twin runs and `invoke twin-build` builds: the example stacks' (1.35; 1.36, where
# MutatingAdmissionPolicy v1 is served) and 1.37, the newest an existing cluster may run, which the e2e tier starts
# once (tests/twin/test_newest_minor.py).
TWIN_MINORS: tuple[str, ...] = ("1.35", "1.36", "1.37")
