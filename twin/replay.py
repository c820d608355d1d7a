"""Placement replayed through the real scheduler (`invoke simulate --twin`).

A replay twin is the twin's control plane and kwok with no stack: the trace's nodes as kwok nodes (GPU feature
discovery's labels, time-sliced GPUs as `nvidia.com/gpu.shared` replicas, as the simulator's as-deployed
mapping has them), the stack's `gpu-binpack` kube-scheduler with its real profile, and for FragmentationAware
the extender (its real entry point, with the trace as its expected workload: `--trace`, `--replicas`), on the
loopback address the profile calls.

The simulator's protocol drives it unchanged (`scheduler.sim.run_one`: the seed's order, inflation to 1.3x the
GPU capacity, nodes in the seed's rank): :class:`TwinPolicy` places each pod by creating it in the twin and
waiting until the real scheduler has bound it (or marked it Unschedulable), then reads which node it got. The
twin's nodes carry the seed's ranked names (`scheduler.sim.protocol.seed_order`, as the paper artifact creates
its nodes): the extender takes the first by name among FGD's equal nodes, which is then the simulator's first
in rank; under the trace's own names it broke those ties another way, and the replays parted from there. Which
GPU a time-sliced replica takes is the device plugin's rule (`distributed`), as in the as-deployed replay; the
simulator's metrics are computed from those placements, so the two replays are compared on one measure.

A pool whose shares are DRA claims (`sharing: dra-shares`) is replayed on Kubernetes 1.36, whose scheduler
allocates claims with consumable capacity (DRAConsumableCapacity, beta and on by default in 1.36): its nodes
advertise no GPU resource but publish the NVIDIA DRA driver's ResourceSlice (`twin.dra`), and each pod routed
there is created with a ResourceClaim of its own asking the shares the stack replay gives it (a whole GPU: all
of a device's shares, one device per GPU). :class:`TwinPolicy` reads back the node and the devices the
allocator gave; the simulator's metrics still take the GPU from its own first-fit rule, and the policy counts
the pods whose devices differ from it. FragmentationAware runs the extender with `--dra-shares`, as deployed.

With ``kueue`` (a replay of claims only) every pod goes through the real Kueue first (`twin.replay_kueue`): it
carries a queue-name label, Kueue's webhook gates it, and the scheduler sees it once Kueue has admitted it and
counted its shares; its claim is then made from a ResourceClaimTemplate, the only kind Kueue counts.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import ssl
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from infra.errors import ConfigError, Interrupted
from infra.versions import KUEUE_VERSION
from scheduler.dra import API
from scheduler.fgd.frag import ShareRule
from scheduler.fgd.model import MILLI, Cluster, Workload
from scheduler.sim.policies.base import Batch, Policy
from scheduler.sim.policies.fgd_extender import node_object, pod_object
from scheduler.sim.protocol import trace_name
from twin import netns
from twin.kwok import start_kwok
from twin.nodes import KWOK_LABEL, KWOK_VALUE
from twin.processes import Supervisor, free_port, http_ok, https_ok, wait_until
from twin.replay_kueue import ADMISSION_GATE
from twin.toolchain.build import locate

PROFILES = ("MostAllocated", "FragmentationAware")
NAMESPACE = "team-sim"  # the simulator's pod objects' namespace
EXTENDER_PORT = 8888
MINOR = "1.35"
DRA_MINOR = "1.36"  # consumable capacity (several claims on one device) is on by default from 1.36
CLAIM = "gpu"  # the pod's name for its claim (spec.resourceClaims[].name)
# where the replay's ResourceClaims are, as the custom-objects client names them: group, version, namespace, plural
CLAIMS_AT = (*API.split("/"), NAMESPACE, "resourceclaims")


def scheduler_config(profile: str, dra_shares: bool = False) -> dict[str, Any]:
    """The gpu-binpack configuration the stacks deploy (scheduler.placement.scheduler_config_file), for a
    cluster with time-sliced GPUs: MostAllocated with the GPU weight on both GPU resources, every feasible node
    scored, plus the extender for FragmentationAware; with ``dra_shares`` the extender manages no resource by
    name, so the scheduler calls it for the pods that claim shares too (scheduler.extender.manifests)."""
    from scheduler.extender.manifests import URL
    from scheduler.model import PoolView, SchedulingPolicy
    from scheduler.placement import scheduler_config_file, with_extender
    from scheduler.resources import covered_gpu_resources

    pools = [
        PoolView("whole", "", 1, 1, {}, ()),
        PoolView("shared", "", 1, 1, {}, (), sharing="timeSlicing", time_slicing_replicas=2),
    ]
    policy = SchedulingPolicy(placement_strategy=profile, platform="existing", kueue_version=KUEUE_VERSION)  # type: ignore[arg-type]
    config = scheduler_config_file(policy, pools)
    if profile == "FragmentationAware":
        config = with_extender(config, URL, [] if dra_shares else covered_gpu_resources(pools))
    return config


def local_run(config: dict[str, Any], kubeconfig: Path) -> dict[str, Any]:
    """``config`` as a process beside the replay twin's API server runs it: its kubeconfig (kube-scheduler
    ignores ``--kubeconfig`` once ``--config`` is given), a higher client rate, and no leader election (one
    replica, and the lease's namespace does not exist here)."""
    out = dict(config)
    out["clientConnection"] = {"kubeconfig": str(kubeconfig), "qps": 200, "burst": 400}
    out["leaderElection"] = {"leaderElect": False}
    return out


def replay_nodes(
    cluster: Cluster, units: dict[str, int], claims: frozenset[str] = frozenset()
) -> list[dict[str, Any]]:
    """Kwok nodes of the simulator's stack cluster (`gpu_model` is the pool's name, and its pool label): a
    whole-GPU pool's nodes advertise `nvidia.com/gpu`, a sharing pool's only `nvidia.com/gpu.shared` (GPUs x
    units), as the device plugin does with renameByDefault (a node never offers both); a pool of DRA
    ``claims`` neither (its GPUs are the devices of its ResourceSlice)."""
    from scheduler.labels import GPU_RESOURCE, POOL_LABEL, SHARED_GPU_RESOURCE

    out = []
    rows = zip(
        cluster.names, cluster.cpu_milli, cluster.memory_mib, cluster.num_gpu, cluster.gpu_model, strict=True
    )
    for i, (name, cpu, mem, gpus, model) in enumerate(rows):
        per_gpu = units.get(str(model), 1)
        node = node_object(str(name), int(cpu), int(mem), int(gpus), str(model), per_gpu)
        gone = (
            (GPU_RESOURCE, SHARED_GPU_RESOURCE)
            if str(model) in claims
            else (GPU_RESOURCE,)
            if per_gpu > 1
            else ()
        )
        for key in ("allocatable", "capacity"):
            for resource in gone:
                node["status"][key].pop(resource, None)
        node["metadata"]["labels"][POOL_LABEL] = str(model)
        node["metadata"]["labels"][KWOK_LABEL] = KWOK_VALUE
        node["metadata"]["labels"]["kubernetes.io/hostname"] = str(name)
        node["metadata"]["annotations"] = {"kwok.x-k8s.io/node": "fake"}
        node["status"]["allocatable"]["pods"] = node["status"]["capacity"]["pods"] = "10000"
        node["status"]["addresses"] = [{"type": "InternalIP", "address": f"10.240.{i // 250}.{i % 250 + 1}"}]
        out.append(node)
    return out


Devices = dict[str, tuple[str, int]]  # pool -> its GPUs' product name and memory (MiB), for the slices


def catalog_devices(gpu_models: dict[str, str]) -> Devices:
    """Each pool's GPU, from its GPU model in the catalog."""
    from infra import catalog

    return {
        pool: (catalog.GPU_MODELS[m].product, catalog.GPU_MODELS[m].memory_gib * 1024)
        for pool, m in gpu_models.items()
        if m in catalog.GPU_MODELS
    }


def replay_slices(
    cluster: Cluster, units: dict[str, int], claims: frozenset[str], devices: Devices
) -> list[dict[str, Any]]:
    """The DRA driver's ResourceSlice of every node of a pool of ``claims`` (``devices``: each pool's GPU
    product and memory; a claim here asks shares only, so neither decides a placement)."""
    from twin.dra import node_slice

    out = []
    for name, gpus, pool in zip(cluster.names, cluster.num_gpu, cluster.gpu_model, strict=True):
        if str(pool) in claims:
            product, memory_mib = devices[str(pool)]
            out.append(node_slice(str(name), int(gpus), product, memory_mib, units[str(pool)]))
    return out


def pod_claim(pod: dict[str, Any], shares: int, count: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """``pod`` asking its GPUs through a ResourceClaim of its own (named after it) instead of a GPU resource,
    and that claim: ``count`` devices, ``shares`` shares of each."""
    from scheduler.dra import resource_claim

    name = pod["metadata"]["name"]
    return _claiming(pod, {"name": CLAIM, "resourceClaimName": name}), resource_claim(
        NAMESPACE, name, shares, count
    )


def pod_templated(pod: dict[str, Any], template: str) -> dict[str, Any]:
    """``pod`` asking its GPUs through a claim made from ``template`` instead of a GPU resource."""
    return _claiming(pod, {"name": CLAIM, "resourceClaimTemplateName": template})


def _claiming(pod: dict[str, Any], claim: dict[str, str]) -> dict[str, Any]:
    from scheduler.labels import GPU_RESOURCE, SHARED_GPU_RESOURCE

    containers = []
    for c in pod["spec"]["containers"]:
        res = c.get("resources") or {}
        limits = {
            k: v for k, v in (res.get("limits") or {}).items() if k not in (GPU_RESOURCE, SHARED_GPU_RESOURCE)
        }
        containers.append({**c, "resources": {**res, "limits": limits, "claims": [{"name": CLAIM}]}})
    return {**pod, "spec": {**pod["spec"], "containers": containers, "resourceClaims": [claim]}}


def claim_devices(claim: dict[str, Any]) -> list[str] | None:
    """The devices an allocated claim got, in its results' order; None while it has no allocation."""
    from scheduler.dra import DRIVER

    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        return None
    return [r["device"] for r in allocation["devices"]["results"] if r["driver"] == DRIVER]


# ---- inside the twin's namespace -----------------------------------------------------------------------


def schedulable_nodes(kubectl: Any) -> set[str]:
    """Nodes the scheduler can place on: Ready, and no longer carrying the NoSchedule/NoExecute taints the node
    lifecycle controller puts on a node until it is (`node.kubernetes.io/not-ready`). Placing before then would
    replay against part of the cluster."""
    items = json.loads(kubectl.run("get", "nodes", "-o", "json"))["items"]
    return {
        i["metadata"]["name"]
        for i in items
        if any(c["type"] == "Ready" and c["status"] == "True" for c in i["status"].get("conditions", []))
        and not [t for t in i["spec"].get("taints") or [] if t["effect"] in ("NoSchedule", "NoExecute")]
    }


def session(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpufleet-replay-twin")
    parser.add_argument("--nodes", required=True, help="JSON list of Node objects")
    parser.add_argument("--profile", choices=PROFILES, required=True)
    parser.add_argument("--trace", default="")
    parser.add_argument("--extender-shadow", action="store_true", help="run the extender with --shadow")
    parser.add_argument("--scheduler-config", default="", help="a KubeSchedulerConfiguration (JSON) to run")
    parser.add_argument(
        "--slices", default="", help="JSON list of ResourceSlices: the nodes' GPUs are DRA shares"
    )
    # listening sockets on the machine's loopback for the scheduler's metrics and the extender's /readyz, so
    # the launcher can wait until both have taken in the pods it created
    parser.add_argument("--kueue", default="", help="JSON list of Kueue queue objects: run Kueue in the loop")
    parser.add_argument("--scheduler-fd", type=int, default=-1)
    parser.add_argument("--extender-fd", type=int, default=-1)
    entry = netns.entry_point(parser, argv)
    args, folder = entry.args, entry.folder
    from twin.controlplane import start_control_plane
    from twin.kubectl import Kubectl

    netns.loopback_up()
    if args.kueue:
        netns.private_etc(folder)  # Kueue's fixed metrics certificate folder (twin.kueue)
    minor = DRA_MINOR if args.slices else MINOR
    tools = locate(minor, lambda _line: None)
    sup = Supervisor(folder)
    try:
        plane = start_control_plane(tools, sup, folder, minor, entry.port)
        kubectl = Kubectl(tools["kubectl"], plane.admin)
        start_kwok(tools["kwok"], tools.data["stages"], plane.admin, sup, folder)
        nodes = json.loads(Path(args.nodes).read_text())
        for start in range(0, len(nodes), 200):
            kubectl.apply(nodes[start : start + 200])
        names = {n["metadata"]["name"] for n in nodes}
        wait_until(lambda: names <= schedulable_nodes(kubectl), f"{len(names)} nodes Ready and untainted",
                   None, 300)  # fmt: skip
        if args.slices:
            from scheduler.dra import device_class

            slices = json.loads(Path(args.slices).read_text())
            kubectl.apply([device_class()])
            for start in range(0, len(slices), 200):
                kubectl.apply(slices[start : start + 200])
        if args.kueue:
            from twin.replay_kueue import install, managed_namespace

            kubectl.apply([managed_namespace(NAMESPACE)])
            install(tools, plane, kubectl, sup, folder, minor)
            kubectl.apply(json.loads(Path(args.kueue).read_text()))
        else:
            kubectl.run("create", "namespace", NAMESPACE)
        wait_until(lambda: bool(kubectl.run("get", "sa", "default", "-n", NAMESPACE, check=False)),
                   "the default ServiceAccount", None, 60)  # fmt: skip
        if args.profile == "FragmentationAware":
            extender = [
                sys.executable,
                "-m",
                "scheduler.extender",
                "--port",
                str(EXTENDER_PORT),
                "--host",
                "127.0.0.1",
            ]
            if args.trace:
                extender += ["--trace", args.trace]
            if args.extender_shadow:
                extender.append("--shadow")
            if args.slices:
                extender.append("--dra-shares")
            proc = sup.start("extender", extender, env={"KUBECONFIG": str(plane.admin)})
            wait_until(lambda: http_ok(f"http://127.0.0.1:{EXTENDER_PORT}/readyz"), "the extender", proc, 300)
        import yaml

        given = args.scheduler_config
        chosen = (
            json.loads(Path(given).read_text())
            if given
            else scheduler_config(args.profile, bool(args.slices))
        )
        config = folder / "gpu-binpack.yaml"
        config.write_text(yaml.safe_dump(local_run(chosen, folder / "scheduler.kubeconfig")))
        sched_port = free_port()
        proc = sup.start("gpu-binpack", [tools["kube-scheduler"], f"--config={config}", "--bind-address=127.0.0.1",
                                         f"--secure-port={sched_port}", "--authorization-always-allow-paths=/healthz,/metrics"])  # fmt: skip
        wait_until(lambda: https_ok(f"https://127.0.0.1:{sched_port}/healthz", None), "gpu-binpack", proc, 60)
        netns.forward(entry.listener, entry.port)
        for fd, port in ((args.scheduler_fd, sched_port), (args.extender_fd, EXTENDER_PORT)):
            if fd >= 0:
                netns.forward(socket.socket(fileno=fd), port)
        netns.publish(Path(args.ready_file), {"kubeconfig": str(plane.admin), "pid": os.getpid()})
        with entry.serving():
            while not entry.stop.wait(1):
                dead = sup.check_alive()
                if dead is not None:
                    print(f"{dead.name} exited:\n{dead.log_tail()}", file=sys.stderr)
                    return 1
        return 0
    except Interrupted as stopped:
        return 128 + stopped.signum
    finally:
        sup.stop_all()


# ---- on the machine: the twin, and the policy that places through it -------------------------------------


@dataclass
class ReplayTwin:
    inside: netns.Inside
    folder: Path
    kubeconfig: Path
    scheduler_port: int = 0  # its gpu-binpack's secure port, on this machine's loopback
    extender_port: int = 0  # its extender's port (FragmentationAware), on this machine's loopback
    kueue: bool = False  # pods go through Kueue (twin.replay_kueue) and claim through templates
    gated: int = 0  # pods Kueue's webhook held for admission when they were created
    _core: Any = None
    _custom: Any = None
    _pods: int = 0
    _templates: set[str] | None = None

    @classmethod
    def start(
        cls, cluster: Cluster, units: dict[str, int], profile: str, folder: Path, *,
        target: Workload | None = None, config: dict[str, Any] | None = None, shadow: bool = False,
        claims: frozenset[str] = frozenset(), devices: Devices | None = None, kueue: bool = False,
    ) -> ReplayTwin:  # fmt: skip
        """A replay twin of `cluster`; with FragmentationAware the extender's expected workload is `target` (the
        simulator's FGD-Extender gets the same), written as a generic pod CSV for its `--trace`, or without it
        learned from the twin's pods; `shadow`: the extender scores without deciding (`--shadow`). `config`: the
        KubeSchedulerConfiguration gpu-binpack runs (default: :func:`scheduler_config` of `profile`), e.g. one
        read back from a stack's rendered ConfigMap. ``claims``: the pools whose shares are DRA claims
        (``devices``: each one's GPU product and memory), published as ResourceSlices on Kubernetes 1.36.
        ``kueue``: Kueue admits every pod first, from one ClusterQueue holding the whole cluster
        (twin.replay_kueue); the pools must all be pools of claims."""
        netns.check_namespaces()
        netns.clear_folder(folder)
        nodes = folder / "nodes.json"
        nodes.write_text(json.dumps(replay_nodes(cluster, units, claims)))
        ready = folder / "ready.json"
        ready.unlink(missing_ok=True)
        listener = netns.listen()
        argv = [sys.executable, "-m", "twin.replay", "--folder", str(folder), "--nodes", str(nodes),
                "--profile", profile, "--listen-fd", str(listener.fileno()), "--ready-file", str(ready)]  # fmt: skip
        if config is not None:
            given = folder / "scheduler-config.json"
            given.write_text(json.dumps(config))
            argv += ["--scheduler-config", str(given)]
        if shadow:
            argv.append("--extender-shadow")
        slices = replay_slices(cluster, units, claims, devices or {})
        if slices:
            (folder / "slices.json").write_text(json.dumps(slices))
            argv += ["--slices", str(folder / "slices.json")]
        if kueue:
            from twin.replay_kueue import cluster_quota, queue_objects

            if not slices or set(map(str, cluster.gpu_model)) - claims:
                raise ConfigError(
                    "a replay through Kueue counts GPU shares of claims only: every pool must be one"
                )
            queues = folder / "kueue-queues.json"
            queues.write_text(json.dumps(queue_objects(cluster_quota(cluster, units, claims), NAMESPACE)))
            argv += ["--kueue", str(queues)]
        if target is not None and profile == "FragmentationAware":
            trace = folder / "target.csv"
            rows = zip(
                target.cpu_milli,
                target.memory_mib,
                target.num_gpu,
                target.gpu_milli,
                target.gpu_spec,
                strict=True,
            )
            trace.write_text("cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n" + "".join(
                f"{c},{m},{k},{d},{spec}\n" for c, m, k, d, spec in rows))  # fmt: skip
            argv += ["--trace", str(trace)]
        seen = [netns.listen(), netns.listen()]  # the scheduler's metrics, the extender's /readyz
        argv += ["--scheduler-fd", str(seen[0].fileno()), "--extender-fd", str(seen[1].fileno())]
        ports = [int(sock.getsockname()[1]) for sock in seen]
        with (folder / "session.log").open("wb") as log:
            try:
                inside = netns.spawn(argv, (listener.fileno(), *(sock.fileno() for sock in seen)), log)
            finally:
                for sock in (listener, *seen):
                    sock.close()
        (folder / "session.json").write_text(json.dumps({"pid": inside.process.pid}))
        try:
            deadline = time.monotonic() + 600
            while not ready.is_file():
                if inside.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the replay twin did not start; see {folder / 'session.log'}")
                time.sleep(0.2)
        except BaseException:
            inside.stop()
            raise
        info = json.loads(ready.read_text())
        return cls(
            inside,
            folder,
            Path(info["kubeconfig"]),
            ports[0],
            ports[1] if profile == "FragmentationAware" else 0,
            kueue,
        )

    def core(self) -> Any:
        if self._core is None:
            from kubernetes import client, config

            self._core = client.CoreV1Api(config.new_client_from_config(config_file=str(self.kubeconfig)))
        return self._core

    def custom(self) -> Any:
        if self._custom is None:
            from kubernetes import client, config

            api = config.new_client_from_config(config_file=str(self.kubeconfig))
            self._custom = client.CustomObjectsApi(api)
        return self._custom

    def claims(self) -> list[dict[str, Any]]:
        """The replay's ResourceClaims as the API server has them."""
        listed = self.custom().list_namespaced_custom_object(*CLAIMS_AT)
        return list(listed["items"])

    def claim(self, name: str) -> dict[str, Any]:
        return dict(self.custom().get_namespaced_custom_object(*CLAIMS_AT, name))

    def place_claiming(
        self, pod: dict[str, Any], claim: dict[str, Any], timeout: float = 60
    ) -> tuple[str | None, list[str]]:
        """Create ``claim`` and ``pod`` (which uses it), wait as :meth:`place` does, and read the devices the
        allocator gave the claim (the scheduler writes the allocation before it binds). An unschedulable pod's
        claim is deleted with it."""
        self.custom().create_namespaced_custom_object(*CLAIMS_AT, claim)
        node = self.place(pod, timeout)
        name = claim["metadata"]["name"]
        if node is None:
            self.custom().delete_namespaced_custom_object(*CLAIMS_AT, name)
            return None, []
        devices = claim_devices(self.claim(name))
        if devices is None:
            raise RuntimeError(
                f"pod {pod['metadata']['name']} was bound to {node} but its claim has no allocation"
            )
        return node, devices

    def place_templated(
        self, pod: dict[str, Any], shares: int, count: int, timeout: float = 60
    ) -> tuple[str | None, list[str]]:
        """Create ``pod`` asking ``count`` devices of ``shares`` shares through a ResourceClaimTemplate (the
        stack's, made the first time a size is asked), wait as :meth:`place` does, and read the devices the
        allocator gave the claim the controller made from it."""
        from scheduler.dra import claim_template

        template = claim_template(NAMESPACE, shares, count)
        name = template["metadata"]["name"]
        if self._templates is None:
            self._templates = set()
        if name not in self._templates:
            self.custom().create_namespaced_custom_object(*CLAIMS_AT[:3], "resourceclaimtemplates", template)
            self._templates.add(name)
        created = self._create(pod_templated(pod, name))
        got = self._wait(created.metadata.name, timeout)
        if got is None:
            return None, []
        claim = next(
            (s.resource_claim_name for s in got.status.resource_claim_statuses or [] if s.name == CLAIM), None
        )
        devices = claim_devices(self.claim(claim)) if claim else None
        if devices is None:
            raise RuntimeError(f"pod {created.metadata.name} was bound to {got.spec.node_name} but its claim "
                               f"{claim} has no allocation")  # fmt: skip
        return str(got.spec.node_name), devices

    def place(self, pod: dict[str, Any], timeout: float = 60) -> str | None:
        """Create `pod` and wait until the scheduler bound it (its node) or found no node for it (None)."""
        created = self._create(pod)
        got = self._wait(created.metadata.name, timeout)
        return None if got is None else str(got.spec.node_name)

    def _create(self, pod: dict[str, Any]) -> Any:
        pod = {**pod, "metadata": {**pod["metadata"], "namespace": NAMESPACE}}
        pod["metadata"].pop("uid", None)
        if self.kueue:
            from twin.replay_kueue import queued

            pod = queued(pod)
        created = self.core().create_namespaced_pod(NAMESPACE, pod)
        self.gated += any(g.name == ADMISSION_GATE for g in created.spec.scheduling_gates or [])
        return created

    def _wait(self, name: str, timeout: float) -> Any:
        """The pod once bound; None once the scheduler found no node for it (it is then deleted)."""
        core = self.core()
        deadline = time.monotonic() + timeout
        delay = 0.005
        while time.monotonic() < deadline:
            got = core.read_namespaced_pod(name, NAMESPACE)
            if got.spec.node_name:
                return got
            for cond in got.status.conditions or []:
                if cond.type == "PodScheduled" and cond.status == "False" and cond.reason == "Unschedulable":
                    core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
                    return None
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
        raise TimeoutError(f"pod {name} was neither bound nor found unschedulable in {timeout:.0f} s")

    def kueue_summary(self, timeout: float = 60) -> dict[str, Any]:
        """What Kueue admitted and counted, beside the shares the allocator gave (twin.replay_kueue.summary),
        once Kueue has caught up: no pod left terminating (Kueue releases a deleted pod's finalizer when it has
        finished its Workload) and its queue's usage unchanged between two reads a second apart, or at
        ``timeout`` as it then stands."""
        from scheduler.dra import SHARES
        from twin.replay_kueue import QUEUE, admissions, claimed_shares, queue_usage, summary

        group = ("kueue.x-k8s.io", "v1beta2")
        deadline = time.monotonic() + timeout
        last = None
        while True:
            pods = self.core().api_client.sanitize_for_serialization(
                self.core().list_namespaced_pod(NAMESPACE).items
            )
            workloads = self.custom().list_namespaced_custom_object(*group, NAMESPACE, "workloads")["items"]
            queue = self.custom().get_cluster_custom_object(*group, "clusterqueues", QUEUE)
            records = admissions(list(workloads), list(pods))
            out = summary(records, queue_usage(queue), claimed_shares(self.claims(), SHARES))
            settled = not any(p["metadata"].get("deletionTimestamp") for p in pods) and out == last
            if settled or time.monotonic() > deadline:
                return out | {"kueue_records": [vars(r) for r in records]}
            last = out
            time.sleep(1)

    def bound(self, pod: dict[str, Any], node: str) -> None:
        """Create `pod` already on `node` (`spec.nodeName`, past the scheduler), as a running pod the cluster had."""
        pod = {
            **pod,
            "metadata": {**pod["metadata"], "namespace": NAMESPACE},
            "spec": {**pod["spec"], "nodeName": node},
        }
        pod["metadata"].pop("uid", None)
        self.core().create_namespaced_pod(NAMESPACE, pod)

    def seen(self) -> tuple[int, int | None]:
        """Bound pods in the scheduler's cache (the gauge `scheduler_cache_size{type="pods"}`, kube-scheduler
        v1.35 pkg/scheduler/metrics, which the cache refreshes each second) and in the extender's view (its
        /readyz; None without an extender)."""
        context = ssl._create_unverified_context()  # the scheduler's self-signed serving certificate
        url = f"https://127.0.0.1:{self.scheduler_port}/metrics"
        with urllib.request.urlopen(url, context=context, timeout=10) as reply:
            text = reply.read().decode()
        found = re.search(r'^scheduler_cache_size\{type="pods"\} (\S+)', text, re.M)
        cached = int(float(found.group(1))) if found else 0
        if not self.extender_port:
            return cached, None
        with urllib.request.urlopen(f"http://127.0.0.1:{self.extender_port}/readyz", timeout=10) as reply:
            return cached, int(json.loads(reply.read())["pods"])

    def extender_metrics(self) -> str:
        """The extender's /metrics text (FragmentationAware only)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.extender_port}/metrics", timeout=10) as reply:
            return str(reply.read().decode())

    def settled(self, pods: int, timeout: float = 60) -> None:
        """Wait until the scheduler's cache and the extender's view both hold at least `pods` bound pods: what a
        scheduling decision after `bound` calls must see."""
        deadline = time.monotonic() + timeout
        while True:
            cached, viewed = self.seen()
            if cached >= pods and (viewed is None or viewed >= pods):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"after {timeout:.0f} s the scheduler's cache holds {cached} bound pods and the "
                                   f"extender's view {viewed}, not {pods}")  # fmt: skip
            time.sleep(0.1)

    def stop(self) -> None:
        self.inside.stop()


class TwinPolicy(Policy):
    """Places every pod through a replay twin's real scheduler (the feasibility filter is kube-scheduler's).

    ``claims``/``units``: the pools whose shares are DRA claims and each pool's shares per GPU; a pod routed to
    them asks its GPUs through a claim. Which devices the allocator gave it is compared with the GPUs the
    simulator's first-fit rule takes (the metrics keep the simulator's): ``claimed`` pods, ``devices_differ``,
    and kept per pod (``pod_devices``). The twin's nodes may carry the run's ranked names (see
    :func:`~scheduler.sim.protocol.seed_order`) or the trace's."""

    name = "Twin"

    def __init__(
        self, twin: ReplayTwin, claims: frozenset[str] = frozenset(), units: dict[str, int] | None = None
    ) -> None:
        super().__init__()
        self.twin = twin
        self.claim_pools = claims
        self.units = units or {}
        self.seconds = 0.0  # spent in the real scheduler (create, bind, read back)
        self.placed_pods = 0
        self.claimed = 0
        self.devices_differ = 0
        self._devices: list[int] = []  # the last claiming pod's devices, as GPU indices of its node
        self.pod_devices: list[list[int]] = []  # every pod's devices in the protocol's order ([]: no claim)
        self._names: dict[str, int] = {}

    def bind(self, ctx: Any) -> None:
        super().bind(ctx)
        # the protocol ranks the nodes by prefixing a random rank to each name (scheduler.sim.protocol.rank_nodes)
        ranked = {str(n): i for i, n in enumerate(ctx.cluster.names)}
        self._names = ranked | {trace_name(name): i for name, i in ranked.items()}

    def score(self, batch: Batch) -> tuple[np.ndarray, np.ndarray | None]:
        return np.zeros(len(batch.nodes), dtype=np.int64), None

    def choose_node(self, column: np.ndarray, s: int) -> int:
        sh = self.ctx.shapes
        c, m, k, d = sh.requests[s]
        self.placed_pods += 1
        pod = pod_object(f"pod-{self.placed_pods:07d}", c, m, k, d, sh.spec[s])
        asked = self.claim_of(str(sh.spec[s]), k, d)
        start = time.perf_counter()
        self._devices = []
        if asked is None:
            node = self.twin.place(pod)
        elif self.twin.kueue:
            node, devices = self.twin.place_templated(pod, *asked)
            self._devices = [int(str(dev).rsplit("-", 1)[1]) for dev in devices]
        else:
            node, devices = self.twin.place_claiming(*pod_claim(pod, *asked))
            self._devices = [int(str(dev).rsplit("-", 1)[1]) for dev in devices]  # twin.dra's gpu-<minor>
        self.seconds += time.perf_counter() - start
        self.pod_devices.append(self._devices)
        return -1 if node is None else self._names[node]

    def claim_of(self, pools: str, num_gpu: int, gpu_milli: int) -> tuple[int, int] | None:
        """(shares per device, devices) of the claim a pod routed to ``pools`` asks, or None: it asks a GPU
        resource. A share asks the shares its routed milli covers (the stack replay rounds it up to whole
        shares), a whole GPU every share of a device. A pod that names no pool may go to any."""
        routed = [p for p in pools.split("|") if p] or sorted({str(m) for m in self.ctx.cluster.gpu_model})
        if not num_gpu or not set(routed) <= self.claim_pools:
            return None
        per_gpu = self.units[routed[0]]
        if gpu_milli >= MILLI:
            return per_gpu, num_gpu
        return max(1, -(-gpu_milli * per_gpu // MILLI)), 1

    def choose_gpus(self, node: int, s: int, share_gpu: int) -> list[int]:
        gpus = super().choose_gpus(node, s, share_gpu)
        if self._devices:
            self.claimed += 1
            self.devices_differ += sorted(self._devices) != sorted(gpus)
        return gpus


def twin_policy(
    label: str, twin: ReplayTwin, claims: frozenset[str] = frozenset(), units: dict[str, int] | None = None
) -> TwinPolicy:
    """A TwinPolicy named for the report (`gpu-binpack`, `FragmentationAware`)."""
    cls = type(f"Twin{label}", (TwinPolicy,), {"name": label})
    return cls(twin, claims, units)


def mixed_pods(workload: Workload, claims: frozenset[str], pools: set[str]) -> int:
    """Pods routed both to pools of claims and to pools of GPU resources (``pools``: every pool, where a pod
    names none): a real pod asks one or the other."""
    out = 0
    for spec, k in zip(workload.gpu_spec, workload.num_gpu, strict=True):
        routed = {p for p in str(spec).split("|") if p} or pools
        out += bool(k) and bool(routed & claims) and not routed <= claims
    return out


if __name__ == "__main__":
    raise SystemExit(session())


@dataclass(frozen=True)
class TwinRun:
    """One replay through the real scheduler: the simulator's result and the real scheduler's rate."""

    result: Any  # scheduler.sim.RunResult
    pods_per_second: float
    claimed: int = 0  # pods that asked their GPUs through a DRA claim
    devices_differ: int = 0  # of those, the ones the allocator gave other GPUs than the simulator's first fit


def replay_stack(
    cluster: Cluster,
    units: dict[str, int],
    workload: Workload,
    profiles: list[str],
    seeds: list[int],
    folder: Path,
    on_done: Any = None,
    *,
    share_rule: ShareRule = "distributed",
    claims: frozenset[str] = frozenset(),
    gpu_models: dict[str, str] | None = None,
) -> list[TwinRun]:
    """Every (profile, seed) replay on a fresh replay twin (the protocol's pods never leave), in order.
    ``share_rule``: who picks a share's GPU on the stack (infra.simulate.stack.share_rule); ``claims``: the
    pools whose shares are DRA claims (``gpu_models``: their GPU models)."""
    from scheduler.sim import run_one
    from scheduler.sim.protocol import seed_order

    mixed = mixed_pods(workload, claims, {str(m) for m in cluster.gpu_model})
    if mixed:
        raise ConfigError(
            f"--twin: {mixed} pods may go both to pools of DRA shares and to pools of GPU resources, which no "
            "one real pod can ask; give the whole-GPU pods a pool of their own kind"
        )
    out = []
    for profile in profiles:
        for seed in seeds:
            ranked = seed_order(cluster, workload, seed)[1]  # its nodes named as the run ranks them
            twin = ReplayTwin.start(ranked, units, profile, folder / f"{profile}-{seed}", target=workload,
                                    claims=claims, devices=catalog_devices(gpu_models or {}))  # fmt: skip
            try:
                policy = twin_policy(profile, twin, claims, units)
                result = run_one(cluster, workload, policy, seed, share_rule=share_rule)
            finally:
                twin.stop()
            rate = round(policy.placed_pods / policy.seconds, 1) if policy.seconds else 0.0
            run = TwinRun(result, rate, policy.claimed, policy.devices_differ)
            out.append(run)
            if on_done is not None:
                on_done(run)
    return out
