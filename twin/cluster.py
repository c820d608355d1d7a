"""Bringing the twin up and down: the order of the parts, and what each waits for.

1. the control plane (etcd, kube-apiserver, kube-controller-manager, the default kube-scheduler);
2. kwok and the stack's nodes (`twin.nodes`), waited for until Ready, and the stand-in for the GPU operator's
   device plugin, GFD and mig-manager (`twin.gpu_operands`), waited for until every GPU node advertises;
3. what the stack's cluster runs besides gpufleet's own objects, in the order the stack installs it: the CRDs
   of the Prometheus operator (`monitoring.prometheus`) and of Karpenter, the GPU operator's stand-in (its
   release), on aws the DaemonSets every EKS node runs (`twin.daemonsets`), on a Karpenter stack the real
   Karpenter with the stack's NodePools (`twin.karpenter`), on aws node groups the cluster-autoscaler stand-in
   (`twin.autoscaler`), the CRDs of the job frameworks Kueue integrates (unless `frameworks` is off: a cluster
   without those operators, whose CRDs cost the API server half its start-up), then Kueue from the stack's
   chart values with the real controller (`twin.kueue`);
4. unless `bare`: the stack's scheduling policy through the real Pulumi engine (`twin.lifecycle`), waited for
   until its admission policies act (`twin.policies_in_effect`) and the GPU nodes advertise what its
   device-plugin ConfigMap and node labels give, then
   the stack's own `gpu-binpack` scheduler with its real configuration, as its own ServiceAccount
   (`twin.secondary`), and the extender when placement is FragmentationAware.
Down is the reverse; processes are stopped by their own process groups.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.errors import CheckFailed
from infra.pools import needs_cluster_autoscaler, uses_karpenter
from infra.spec import ClusterSpec
from scheduler.labels import KUEUE_NAMESPACE
from twin import kueue as kueue_part
from twin.controlplane import ControlPlane, start_control_plane
from twin.dra import resource_slices
from twin.kubectl import Kubectl
from twin.kueue_visibility import visibility_available
from twin.kwok import start_kwok
from twin.nodes import NodeCount, TwinNode, twin_nodes
from twin.policies_in_effect import await_policies
from twin.processes import Supervisor, wait_until
from twin.standins import gpu_operator_standin
from twin.toolchain.build import Toolchain, locate

Say = Callable[[str], None]


def default_scheduler_plugins(spec: ClusterSpec) -> list[dict[str, Any]]:
    """On aws the managed control plane's scheduler runs the stack's NodeResourcesFit scoring, as EKS takes it
    (`infra.aws.scheduler_config`: the strategy and the weights EKS accepts); an existing cluster's default
    scheduler is not gpufleet's and keeps upstream's defaults."""
    if spec.platform != "aws":
        return []
    from infra.aws.scheduler_config import eks_scoring_resources
    from scheduler.model import fit_strategy

    placement = spec.scheduling.placement
    scoring = {
        "type": fit_strategy(placement.strategy),
        "resources": eks_scoring_resources(placement.weights),
    }
    return [{"name": "NodeResourcesFit", "args": {"scoringStrategy": scoring}}]


@dataclass
class TwinOptions:
    spec: ClusterSpec
    folder: Path
    minor: str = ""  # default: the stack's Kubernetes minor
    nodes: NodeCount = "desired"
    bare: bool = False
    api_port: int = 0  # 0: any free port; the launcher passes the port it forwards from the machine
    monitoring: bool = False  # the metrics chain on real components (`twin.monitoring`)
    time_scale: float = 1.0  # the autoscaler stand-in's durations (boot times, scale-down timers) times this
    # serve the CRDs of the job frameworks Kueue integrates (PyTorchJob and the training kinds, RayJob, JobSet)
    frameworks: bool = True

    @property
    def kubernetes_minor(self) -> str:
        return self.minor or self.spec.cluster.kubernetes_version


@dataclass
class Twin:
    options: TwinOptions
    say: Say = print
    tools: Toolchain | None = None
    plane: ControlPlane | None = None
    kubectl: Kubectl | None = None
    nodes: list[TwinNode] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    changes: dict[str, int] = field(default_factory=dict)
    autoscaler: Any = None
    operands: Any = None  # twin.gpu_operands.GpuOperands
    chain: Any = None  # twin.monitoring.MonitoringChain with `monitoring`
    sup: Supervisor = field(init=False)

    def __post_init__(self) -> None:
        self.options.folder.mkdir(parents=True, exist_ok=True)
        self.sup = Supervisor(self.options.folder)

    # ---- the parts -----------------------------------------------------------------------------------

    def _step(self, name: str, action: Callable[[], Any]) -> Any:
        start = time.monotonic()
        self.say(f"twin: {name} ...")
        result = action()
        self.timings[name] = round(time.monotonic() - start, 2)
        return result

    def up(self) -> Twin:
        opts = self.options
        minor = opts.kubernetes_minor
        tools = self.tools = locate(
            minor, self.say, monitoring=self.options.monitoring, karpenter=uses_karpenter(opts.spec)
        )
        try:
            self.plane = self._step(
                "control plane",
                lambda: start_control_plane(
                    tools,
                    self.sup,
                    opts.folder,
                    minor,
                    opts.api_port,
                    default_scheduler_plugins(opts.spec),
                    opts.spec.platform,
                ),
            )
            self.kubectl = Kubectl(tools["kubectl"], self.plane.admin)
            self._step("kwok nodes", self._nodes)
            self._step("GPU operands", self._gpu_operands)
            # In the order the stack installs them: the metrics stack's CRDs, the GPU operator, then Kueue
            # (whose chart creates a ServiceMonitor when metrics are on).
            if opts.spec.cluster.monitoring.enabled:
                self._step("monitoring CRDs", self._monitoring)
            if uses_karpenter(opts.spec):
                self._step("Karpenter CRDs", lambda: self._crds("karpenter-crds"))
            self._step("GPU operator stand-in", self._gpu_operator)
            if opts.spec.platform == "aws":
                self._step("node DaemonSets", self._daemonsets)
            if uses_karpenter(opts.spec):
                self._step("Karpenter", self._karpenter)
            if opts.frameworks:
                self._step("job framework CRDs", self._frameworks)
            if opts.spec.scheduling.provisioning_requests:
                # Kueue sets up its provisioning controller only if the CRD is served when it starts.
                self._step("ProvisioningRequest CRD", lambda: self._crds("provisioning-crds"))
            if opts.spec.platform == "aws" and needs_cluster_autoscaler(opts.spec):
                self._step("autoscaler stand-in", self._autoscaler)
            self._step("Kueue", self._kueue)
            if not opts.bare:
                self.changes = self._step("policy (pulumi up)", self.deploy)
                self._step("admission policies in effect", self._policies_in_effect)
                self._step("device plugin on the deployed config", lambda: self._gpus_settled(True))
                self._step("gpu-binpack scheduler", self._secondary)
            if opts.monitoring:
                self._step("monitoring chain", self._monitoring_chain)
        except BaseException:
            self.down()
            raise
        return self

    def _nodes(self) -> None:
        assert self.tools and self.plane and self.kubectl
        karpenter = uses_karpenter(self.options.spec)
        start_kwok(
            self.tools["kwok"], self.tools.data["stages"], self.plane.admin, self.sup, self.options.folder,
            by_annotation=karpenter,
        )  # fmt: skip
        # Karpenter's pools start empty: their nodes are the ones Karpenter launches.
        self.nodes = twin_nodes(self.options.spec, self.options.nodes, karpenter_nodes=not karpenter)
        self.kubectl.apply([n.manifest() for n in self.nodes])
        if slices := resource_slices(self.options.spec, self.nodes):  # DRA-shared pools' GPUs
            self.kubectl.apply(slices)
        names = {n.name for n in self.nodes}
        kubectl = self.kubectl

        def ready() -> bool:
            items = json.loads(kubectl.run("get", "nodes", "-o", "json"))["items"]
            done = {
                i["metadata"]["name"]
                for i in items
                if any(
                    c["type"] == "Ready" and c["status"] == "True" for c in i["status"].get("conditions", [])
                )
            }
            return names <= done

        wait_until(ready, f"{len(names)} nodes Ready", self.sup.processes[-1], 60)
        # The ServiceAccount admission plugin refuses pods until the controller-manager made `default`.
        wait_until(lambda: bool(kubectl.run("get", "sa", "default", "-n", "default", check=False)),
                   "the default ServiceAccount", None, 60)  # fmt: skip

    def _gpu_operands(self) -> None:
        """The device plugin, GFD and mig-manager's stand-in (`twin.gpu_operands`) with the operator's settings
        from the stack's GPU operator values: its MIG strategy and the plugin's default config."""
        import logging

        from infra.gpu_stack.gpu_operator import gpu_operator_values
        from twin.gpu_operands import GpuOperands

        assert self.plane
        values = gpu_operator_values(self.options.spec)
        handler = logging.FileHandler(self.options.folder / "logs" / "gpu-operands.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        logger = logging.getLogger("twin.gpu_operands")
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        self.operands = GpuOperands(
            self.plane.admin, values["mig"]["strategy"], values["devicePlugin"]["config"]["default"],
            self.options.time_scale,
        ).start()  # fmt: skip
        self._gpus_settled(False)

    def _gpus_settled(self, deployed: bool) -> None:
        assert self.kubectl and self.operands
        kubectl, operands = self.kubectl, self.operands
        wait_until(
            lambda: operands.settled(json.loads(kubectl.run("get", "nodes", "-o", "json"))["items"], deployed),
            "the GPU nodes' device plugin", None, 120,
        )  # fmt: skip

    def _kueue(self) -> None:
        """Kueue as every twin installs it (`twin.kueue.install`), with the stack's values; with the metrics
        chain every replica of its Deployment runs instead of the one manager. Waits for the visibility API,
        which the twin's clients read."""
        assert self.tools and self.plane and self.kubectl
        from infra.scheduling import scheduler_inputs
        from scheduler.kueue_config import kueue_values

        policy, _ = scheduler_inputs(self.options.spec)
        release = kueue_part.install(
            self.tools, self.plane, self.kubectl, self.sup, self.options.folder, kueue_values(policy),
            self.options.kubernetes_minor, start=not self.options.monitoring,
        )  # fmt: skip
        if self.options.monitoring:
            self._kueue_replicas(release)
        self.kueue_ports = release.ports
        kubectl = self.kubectl
        wait_until(lambda: visibility_available(kubectl), "Kueue's visibility API Available", None, 60)

    def _kueue_replicas(self, release: kueue_part.KueueRelease) -> None:
        """With the metrics chain, every replica of the chart's Deployment runs for real, each serving its
        /metrics at its pod's IP (leader election decides which one admits; both export the cache's gauges)."""
        assert self.tools and self.kubectl
        from twin.monitoring import pod_network_on_loopback

        pod_network_on_loopback()
        deployment = next(o for o in release.rendered if o["kind"] == "Deployment")
        selector = ",".join(f"{k}={v}" for k, v in deployment["spec"]["selector"]["matchLabels"].items())
        replicas = int(deployment["spec"].get("replicas", 1))
        kubectl = self.kubectl
        pods: list[dict[str, Any]] = []

        def scheduled() -> bool:
            out = kubectl.run("get", "pods", "-n", KUEUE_NAMESPACE, "-l", selector, "-o", "json")
            pods[:] = [p for p in json.loads(out)["items"] if p.get("status", {}).get("podIP")]
            return len(pods) >= replicas

        wait_until(scheduled, f"{replicas} Kueue pods with IPs", None, 120)
        chart_config = release.configuration
        metrics_port = str(chart_config.get("metrics", {}).get("bindAddress", ":8443")).rsplit(":", 1)[-1]
        for i, pod in enumerate(sorted(pods, key=lambda p: p["metadata"]["name"])[:replicas]):
            replica_ports = release.ports if i == 0 else kueue_part.new_ports()
            replica = kueue_part.local_configuration(chart_config, replica_ports, release.cert_dir)
            replica["metrics"] = {
                **replica["metrics"],
                "bindAddress": f"{pod['status']['podIP']}:{metrics_port}",
            }
            kueue_part.start_kueue(
                self.tools["kueue"], release.args, replica, release.kubeconfig, self.sup, self.options.folder,
                replica_ports, name=f"kueue-{i}",
            )  # fmt: skip

    def _monitoring_chain(self) -> None:
        assert self.tools and self.plane and self.kubectl
        from twin.monitoring import MonitoringChain

        admin = (self.plane.admin_cert.cert, self.plane.admin_cert.key)
        self.chain = MonitoringChain(
            self.options.spec, self.tools, self.kubectl, self.sup, self.options.folder,
            self.plane.server, self.plane.ca.cert_path, admin, self.say,
        ).up()  # fmt: skip

    def _monitoring(self) -> None:
        """A cluster with `monitoring.prometheus` has the Prometheus operator's CRDs and its namespace."""
        assert self.kubectl
        self._crds("monitoring-crds")
        namespace = self.options.spec.cluster.monitoring.namespace
        self.kubectl.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}])

    def _autoscaler(self) -> None:
        """aws node groups scale: the twin's stand-in for cluster-autoscaler (`twin.autoscaler`)."""
        import logging

        from twin.autoscaler import Autoscaler

        assert self.plane
        handler = logging.FileHandler(self.options.folder / "logs" / "autoscaler.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        logger = logging.getLogger("twin.autoscaler")
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        self.autoscaler = Autoscaler(self.options.spec, self.plane.admin, self.options.time_scale).start()

    def _karpenter(self) -> None:
        """The real Karpenter (the core's kwok provider, `twin.karpenter`) with the stack's NodePools, their
        KWOKNodeClasses and the do-not-disrupt policy (`twin.karpenter_objects`)."""
        assert self.tools and self.plane and self.kubectl
        from twin.karpenter import start_karpenter
        from twin.karpenter_objects import twin_karpenter_objects

        self._crds("karpenter-kwok-crds")
        self.kubectl.apply(twin_karpenter_objects(self.options.spec, self.options.time_scale))
        start_karpenter(
            self.tools["karpenter-kwok"], self.options.spec, self.plane.admin, self.sup, self.options.folder
        )

    def _frameworks(self) -> None:
        """The CRDs of the job frameworks Kueue integrates beyond the built-in kinds (PyTorchJob, MPIJob, ...,
        RayJob, RayCluster, JobSet), served before Kueue starts so it sets those integrations up."""
        self._crds("training-crds")
        self._crds("kuberay-crds")
        self._crds("jobset-crds")

    def _gpu_operator(self) -> None:
        assert self.kubectl
        self.kubectl.apply_crds_first(gpu_operator_standin(self.options.spec))

    def _daemonsets(self) -> None:
        """EKS's and the stack's per-node DaemonSets (`twin.daemonsets`), waited for until every pod is ready, so
        whatever runs next sees each node's overhead. With the metrics chain, the chain plays the exporter's
        DaemonSet in the GPU operator's own shape (`twin.monitoring_objects`, same name, other selector: a
        DaemonSet's selector cannot change), so it is left out here; it requests nothing either way."""
        assert self.kubectl
        from twin.daemonsets import node_daemonset_manifests
        from twin.monitoring_objects import EXPORTER

        manifests = [
            m for m in node_daemonset_manifests(self.options.spec)
            if not (self.options.monitoring and m["metadata"]["name"] == EXPORTER)
        ]  # fmt: skip
        self.kubectl.apply(manifests)
        kubectl, names = self.kubectl, {m["metadata"]["name"] for m in manifests}

        def ready() -> bool:
            items = json.loads(kubectl.run("get", "daemonsets", "-A", "-o", "json"))["items"]
            done = {
                d["metadata"]["name"]
                for d in items
                if d.get("status", {}).get("observedGeneration") == d["metadata"]["generation"]
                and d["status"].get("numberReady", 0) == d["status"].get("desiredNumberScheduled", 0)
            }
            return names <= done

        wait_until(ready, f"{len(names)} DaemonSets ready on every node", None, 120)

    def _crds(self, data: str) -> None:
        """CRDs of what the stack's cluster runs and the twin does not: the Prometheus operator's (a cluster with
        `monitoring.prometheus`), Karpenter's (`cluster.autoscaler: karpenter`), from their module zips at the
        versions the stack deploys, so the objects the stack creates for them are validated for real."""
        assert self.kubectl and self.tools
        files = [f for f in self.tools.data[data].glob("*.yaml") if f.name != "kustomization.yaml"]
        self.kubectl.apply_crd_files(files)

    def deploy(self) -> dict[str, int]:
        """The stack's policy through the real Pulumi engine (`twin.lifecycle`)."""
        assert self.tools and self.plane
        from twin.lifecycle import deploy, twin_spec

        spec = twin_spec(self.options.spec, self.plane.admin, self.options.kubernetes_minor)
        return deploy(spec, self.options.folder, self.tools, self.say)

    def _policies_in_effect(self) -> None:
        """The twin says it is up only once the API server applies the policies `pulumi up` created
        (`twin.policies_in_effect`): a test's first request meets the stack's rules, not a window without them."""
        assert self.kubectl
        await_policies(self.kubectl)

    def _secondary(self) -> None:
        assert self.tools and self.plane and self.kubectl
        from infra.scheduling import scheduler_inputs
        from twin.secondary import start_extender, start_secondary_scheduler

        policy, _ = scheduler_inputs(self.options.spec)
        if not policy.uses_secondary_scheduler:
            return
        if policy.placement_strategy == "FragmentationAware":
            start_extender(self.plane, self.kubectl, self.sup, self.options.folder)
        start_secondary_scheduler(self.tools, self.plane, self.kubectl, self.sup, self.options.folder)

    def down(self) -> None:
        if self.chain is not None:
            self.chain.down()
        if self.autoscaler is not None:
            self.autoscaler.stop()
        if self.operands is not None:
            self.operands.stop()
        self.sup.stop_all()

    def check(self) -> None:
        """Fail if a component has exited."""
        dead = self.sup.check_alive()
        if dead is not None:
            raise CheckFailed(f"the twin's {dead.name} exited:\n{dead.log_tail()}")
