"""`invoke twin` itself: what comes up, the pod convention, the network boundary, bad input and a second twin."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.support import eventually, require
from tests.twin.conftest import start_twin, toolchain
from tests.twin.kube import Kube, name, pod
from twin.kwok import DURATION_ANNOTATION

# The tests that run `invoke twin` on the repository's stacks share its build folder: one worker runs them.
IN_BUILD_FOLDER = pytest.mark.xdist_group("build-metal-twin")
INVOKE = [sys.executable, "-m", "invoke"]


def invoke(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*INVOKE, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, **(env or {})}, check=False,
    )  # fmt: skip


def allocatable(kube: Kube, node: str) -> dict[str, str]:
    return dict(kube.get("node", node)["status"]["allocatable"])


def test_metal_hosts_advertise_what_the_deployed_device_plugin_config_gives(metal_twin: Kube) -> None:
    """Every host of the stack is a Ready node. Their GPUs are advertised by the device plugin's stand-in from
    the ConfigMap the deploy created and the config label it put on each host (k8s-device-plugin v0.20.0's
    rules, twin.device_plugin): the h100 hosts, on the default entry, 8 whole GPUs; the l40s hosts, on their
    time-sliced entry (2 replicas, renameByDefault), 4 x 2 as `nvidia.com/gpu.shared` and no `nvidia.com/gpu`,
    with GPU feature discovery's labels saying so."""
    nodes = {n["metadata"]["name"]: n for n in metal_twin.items("nodes")}
    hosts = {f"gpu-h100-0{i}" for i in range(1, 5)} | {f"gpu-l40s-0{i}" for i in range(1, 4)}
    assert hosts <= set(nodes)
    for host in hosts:
        conditions = {c["type"]: c["status"] for c in nodes[host]["status"]["conditions"]}
        assert conditions["Ready"] == "True", host
    assert allocatable(metal_twin, "gpu-h100-01")["nvidia.com/gpu"] == "8"
    l40s = allocatable(metal_twin, "gpu-l40s-01")
    assert l40s["nvidia.com/gpu.shared"] == "8" and "nvidia.com/gpu" not in l40s
    labels = nodes["gpu-l40s-01"]["metadata"]["labels"]
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-L40S"  # renamed: no -SHARED suffix
    assert labels["nvidia.com/gpu.replicas"] == "2"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    h100 = nodes["gpu-h100-01"]["metadata"]["labels"]
    assert (h100["nvidia.com/gpu.replicas"], h100["nvidia.com/gpu.sharing-strategy"]) == ("1", "none")


def test_the_device_plugin_follows_the_config_label(metal_twin: Kube) -> None:
    """The config-manager's rules: a host relabelled to the default entry advertises whole GPUs, a label naming
    no entry stops the plugin (no GPUs), and the pool's own entry brings the shared resource back."""
    host, label = "gpu-l40s-03", "nvidia.com/device-plugin.config"
    gpus = lambda: {k: v for k, v in allocatable(metal_twin, host).items() if k.startswith("nvidia.com/")}  # noqa: E731
    try:
        metal_twin.ok("label", "node", host, f"{label}=default", "--overwrite")
        eventually(lambda: gpus() == {"nvidia.com/gpu": "4"}, "whole GPUs on the default entry", 30)
        metal_twin.ok("label", "node", host, f"{label}=no-such-entry", "--overwrite")
        eventually(lambda: gpus() == {}, "no GPUs when the entry does not exist", 30)
    finally:
        metal_twin.ok("label", "node", host, f"{label}=l40s", "--overwrite")
    eventually(lambda: gpus() == {"nvidia.com/gpu.shared": "8"}, "the pool's entry again", 30)


def test_deploy_labels_the_hosts_with_their_pools(metal_twin: Kube) -> None:
    """Hosts register without gpufleet's labels (docs/existing.md); the deploy's node patch adds the pool label
    the Kueue flavors select on, and the device-plugin config label for the time-sliced pool."""
    h100 = metal_twin.get("node", "gpu-h100-02")["metadata"]["labels"]
    l40s = metal_twin.get("node", "gpu-l40s-02")["metadata"]["labels"]
    assert h100["gpufleet.io/pool"] == "h100"
    assert l40s["gpufleet.io/pool"] == "l40s" and l40s["nvidia.com/device-plugin.config"] == "l40s"
    flavors = {f["metadata"]["name"]: f for f in metal_twin.items("resourceflavors.kueue.x-k8s.io")}
    selected = [f["spec"]["nodeLabels"] for f in flavors.values() if f["spec"].get("nodeLabels")]
    assert {"gpufleet.io/pool": "h100"} in [dict(s) for s in selected] or any(
        s.get("gpufleet.io/pool") == "h100" for s in selected
    )


def test_pods_run_until_deleted_or_for_their_twin_duration(metal_twin: Kube) -> None:
    """The twin's one convention (docs/twin.md): Running until deleted, or Succeeded after the annotation's
    seconds. Scheduled by the real default scheduler onto an untainted CPU node."""
    ns = name("lifecycle")
    metal_twin.ok("create", "namespace", ns)
    eventually(lambda: metal_twin.attempt("get", "sa", "default", "-n", ns).ok, "the default ServiceAccount")
    timed, forever = name("timed"), name("forever")
    meta = {"annotations": {DURATION_ANNOTATION: "2"}}
    assert metal_twin.create(pod(timed, ns, {"cpu": "100m"}, metadata=meta)).ok
    assert metal_twin.create(pod(forever, ns, {"cpu": "100m"})).ok
    phase = lambda p: metal_twin.get("pod", p, ns)["status"].get("phase")  # noqa: E731
    eventually(lambda: phase(timed) == "Succeeded", "the timed pod to finish", 30)
    assert phase(forever) == "Running"
    assert metal_twin.get("pod", forever, ns)["spec"]["nodeName"].startswith("twin-cpu-")
    metal_twin.ok("delete", "namespace", ns, "--wait=false")


def test_nothing_leaves_the_machine(metal_twin: Kube) -> None:
    """The twin's namespace has only `lo`; every component listens on 127.0.0.1; the addresses a real cluster
    would dial (a Service ClusterIP, a kwok pod IP, a node IP) fail at once with ENETUNREACH from inside."""
    rooted = shutil.which("nsenter") is not None and os.geteuid() == 0
    require(rooted, "entering the twin's namespace needs nsenter and root")
    assert metal_twin.twin is not None
    pid = str(metal_twin.twin.info["pid"])
    pod_ip = next(
        p["status"]["podIP"] for p in metal_twin.items("pods", "kueue-system") if p["status"].get("podIP")
    )
    node_ip = metal_twin.get("node", "gpu-h100-01")["status"]["addresses"][0]["address"]
    probe = (
        "import json,socket\n"
        "out={'interfaces':sorted(n for _,n in socket.if_nameindex()),'dial':{}}\n"
        f"for ip in ['10.96.0.1','{pod_ip}','{node_ip}']:\n"
        "    s=socket.socket(); s.settimeout(3)\n"
        "    out['dial'][ip]=s.connect_ex((ip,443))\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run(["nsenter", "-t", pid, "-n", sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=30, check=True)  # fmt: skip
    seen = json.loads(done.stdout)
    assert seen["interfaces"] == ["lo"]
    import errno

    assert set(seen["dial"].values()) == {errno.ENETUNREACH}, seen
    tcp = subprocess.run(["nsenter", "-t", pid, "-n", "cat", "/proc/net/tcp", "/proc/net/tcp6"],
                         capture_output=True, text=True, timeout=30, check=True).stdout  # fmt: skip
    listening = [line.split() for line in tcp.splitlines()[1:] if line.split() and line.split()[3] == "0A"]
    addresses = {row[1].split(":")[0] for row in listening if row[0] != "sl"}
    assert addresses <= {"0100007F", "00000000000000000000000001000000"}, addresses  # 127.0.0.1, ::1


def test_the_twins_go_programs_run_with_its_collector_setting(metal_twin: Kube) -> None:
    """Every component runs with the twin's GOGC (`twin.processes.GO_GC_PERCENT`): the setting that halves the
    collector's share of a start reaches the programs, not only the launcher."""
    from infra.processes import descendants
    from twin.processes import GO_GC_PERCENT

    assert metal_twin.twin is not None
    below = {}
    for pid in descendants(int(metal_twin.twin.info["pid"])):
        with contextlib.suppress(OSError):
            below[pid] = Path(f"/proc/{pid}/comm").read_text().strip()
    wanted = {"etcd", "kube-apiserver", "kube-controller", "kube-scheduler", "kueue", "kwok"}
    assert wanted <= set(below.values()), below
    for pid, program in below.items():
        if program in wanted:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            assert f"GOGC={os.environ.get('GOGC', GO_GC_PERCENT)}".encode() in environ, program


@IN_BUILD_FOLDER
def test_run_exits_with_the_commands_status_and_stops_everything(tmp_path: Path) -> None:
    """`invoke twin --run CMD` runs CMD with the twin's kubectl and KUBECONFIG, stops the twin and exits with
    CMD's status; the same stack again starts cleanly (nothing was left behind). By default the twin serves the
    job frameworks' CRDs; with `--no-frameworks` it does not, and Kueue runs without them."""
    toolchain("1.35")
    env = {"GPUFLEET_TWIN_LOCK": str(tmp_path / "lock")}
    done = invoke("twin", "--stack", "metal", "--bare", "--run",
                  "kubectl get nodes -o name && kubectl get crd rayjobs.ray.io pytorchjobs.kubeflow.org "
                  "jobsets.jobset.x-k8s.io -o name && kubectl version -o json && exit 7", env=env)  # fmt: skip
    assert done.returncode == 7, done.stderr
    assert "node/gpu-h100-01" in done.stdout and "node/gpu-l40s-03" in done.stdout
    assert "customresourcedefinition.apiextensions.k8s.io/rayjobs.ray.io" in done.stdout
    assert '"gitVersion": "v1.35.8"' in done.stdout
    again = invoke("twin", "--stack", "metal", "--bare", "--no-frameworks", "--run",
                   "kubectl get ns kueue-system -o name && kubectl get crd -o name", env=env)  # fmt: skip
    assert again.returncode == 0 and "namespace/kueue-system" in again.stdout
    crds = again.stdout.split()
    assert any(c.endswith(".kueue.x-k8s.io") for c in crds), crds
    assert not [c for c in crds if c.endswith(("ray.io", "kubeflow.org", "jobset.x-k8s.io"))], crds


@IN_BUILD_FOLDER
@pytest.mark.parametrize(
    ("args", "key"),
    [
        (["--stack", "metal", "--minor", "1.30"], "--minor"),
        (["--stack", "metal", "--nodes", "lots"], "--nodes"),
        (["--stack", "no-such-stack"], "Pulumi.no-such-stack.yaml"),
    ],
)
def test_bad_input_exits_2_and_starts_nothing(tmp_path: Path, args: list[str], key: str) -> None:
    env = {"GPUFLEET_TWIN_LOCK": str(tmp_path / "lock")}
    done = invoke("twin", *args, "--run", "true", env=env)
    assert done.returncode == 2, done.stderr
    assert key in done.stderr and "Traceback" not in done.stderr
    assert not (ROOT / "build" / "no-such-stack").exists()


@IN_BUILD_FOLDER
def test_missing_toolchain_exits_3_and_says_what_to_do(tmp_path: Path) -> None:
    env = {"GPUFLEET_TWIN_CACHE": str(tmp_path / "empty"), "GPUFLEET_TWIN_BIN": str(tmp_path / "none"),
           "PATH": "/usr/bin:/bin", "GPUFLEET_TWIN_LOCK": str(tmp_path / "lock")}  # fmt: skip
    done = invoke("twin", "--stack", "metal", "--run", "true", env=env)
    assert done.returncode == 3, done.stderr
    assert "invoke twin-build" in done.stderr and "kube-apiserver" in done.stderr
    assert "Traceback" not in done.stderr


@IN_BUILD_FOLDER
def test_a_second_twin_says_so_and_exits_1(tmp_path_factory: pytest.TempPathFactory) -> None:
    first = start_twin(tmp_path_factory, "metal", bare=True)
    try:
        lock = first.lock.name if first.lock else ""
        done = invoke("twin", "--stack", "dev", "--run", "true", env={"GPUFLEET_TWIN_LOCK": lock})
        assert done.returncode == 1, done.stderr
        assert "a twin is already up" in done.stderr and "stack metal" in done.stderr
    finally:
        first.stop()
