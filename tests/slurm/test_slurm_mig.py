"""MIG instances bound to their device files without NVML, on real slurmd: the gres.conf lines roles/slurm_common
writes from nvidia-smi and the driver's mig-minors (`MultipleFiles`: the parent GPU and the instance's two
capability files, gres.conf(5) at slurm-22-05-8-1), with stand-in device files (character devices with the
NVIDIA major and no driver behind them: opening one the job may use fails "No such device or address", one its
cgroup denies "Operation not permitted")."""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.ansible.support import ANSIBLE_DIR
from tests.slurm.cluster import ensure_packages, slurm_cluster
from tests.slurm.daemon_stack import daemon_stack
from twin.slurm import NVIDIA_MAJOR

pytestmark = pytest.mark.xdist_group("slurm")

SAMPLES = Path(__file__).resolve().parents[1] / "ansible" / "data" / "mig"
HOST = "gpu-mig-01"
_spec = importlib.util.spec_from_file_location(
    "mig_gres_filters", ANSIBLE_DIR / "roles/slurm_common/filter_plugins/mig_gres.py"
)
assert _spec and _spec.loader
mig = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mig)


def _host_lines() -> list[str]:
    text = {name: (SAMPLES / f"{name}.txt").read_text() for name in ("lci", "query", "mig-minors")}
    return list(mig.mig_gres_lines(text["lci"], text["query"], text["mig-minors"], HOST, "1g.10gb"))


def _cap_files(lines: list[str]) -> list[list[str]]:
    """Each instance's capability files, in gres.conf order (the GRES index)."""
    return [line.split("MultipleFiles=")[1].split(",")[1:] for line in lines]


@pytest.fixture
def stand_in_caps() -> Iterator[list[list[str]]]:
    """/dev/nvidia-caps/nvidia-capN for every instance of the sample, only those missing, removed afterwards."""
    caps = _cap_files(_host_lines())
    made: list[Path] = []
    folder = Path("/dev/nvidia-caps")
    made_folder = not folder.exists()
    folder.mkdir(exist_ok=True)
    try:
        for path in (Path(f) for files in caps for f in files):
            if not path.exists():
                os.mknod(
                    path,
                    0o666 | 0o020000,
                    os.makedev(NVIDIA_MAJOR, int(path.name.removeprefix("nvidia-cap"))),
                )
                made.append(path)
        yield caps
    finally:
        for path in made:
            path.unlink(missing_ok=True)
        if made_folder:
            folder.rmdir()


def test_a_mig_job_may_open_only_its_own_instances_device_files(
    tmp_path_factory: pytest.TempPathFactory, stand_in_caps: list[list[str]]
) -> None:
    """One H100 of seven 1g.10gb instances: slurmd registers gpu:1g.10gb:7 from the host's lines; two 1-instance
    jobs (one untyped, `--gpus=1`, which job_submit.lua types) run at once on the one GPU, each on an instance
    of its own (`scontrol -d show job`: IDX), and each may open its instance's two capability files and
    the parent GPU, and none of the other instances' files (cgroup.conf ConstrainDevices)."""
    ensure_packages()
    tmp = tmp_path_factory.mktemp("mig")

    def one_mig_host(config: dict[str, Any]) -> None:
        pool = config["gpufleet:nodePools"][0]
        pool.update(name="h100-mig", hosts=[HOST], gpusPerNode=1, sharing={"mig": "1g.10gb"})
        config["gpufleet:nodePools"] = [pool]
        config["gpufleet:slurm"]["partitions"] = {"h100-mig": {"default": True}}
        vision, nlp = config["gpufleet:teams"]
        vision.update(quotas={"h100-mig": 1}, borrowingLimit=0)
        nlp.update(quotas={}, borrowingLimit=1)

    spec = daemon_stack(tmp, one_mig_host)
    every = sorted({f for files in stand_in_caps for f in files})
    probe = "".join(f"head -c1 {f} 2>&1 | sed 's|^|{f}: |'; " for f in ["/dev/nvidia0", *every]) + "sleep 5"
    with slurm_cluster(spec, tmp / "cluster", host_gres=tuple(_host_lines())) as cluster:
        node = cluster.run("scontrol", "-o", "show", "node", HOST)
        assert "Gres=gpu:1g.10gb:7" in node, node
        assert cluster.script is not None
        cluster.run("sh", str(cluster.script))
        cluster.run("sacctmgr", "-i", "add", "user", "root", "account=vision", check=False)
        jobs = [cluster.sbatch("--account=vision", request, "-p", "h100-mig", script=probe)
                for request in ("--gres=gpu:1g.10gb:1", "--gpus=1")]  # fmt: skip
        running = [cluster.wait_state(job, "RUNNING") for job in jobs]
        index = [int(re.search(r"GRES=gpu:1g\.10gb:1\(IDX:(\d+)\)", cluster.run("scontrol", "-d", "show", "job",
                                                                               str(job))).group(1))  # type: ignore[union-attr]
                 for job in jobs]  # fmt: skip
        assert all(r["NodeList"] == HOST for r in running) and index[0] != index[1], (running, index)
        for job, idx in zip(jobs, index, strict=True):
            cluster.wait_state(job, "COMPLETED", timeout=60)
            seen = dict(
                line.split(": ", 1)
                for line in (cluster.root / "jobs" / f"{job}.out").read_text().splitlines()
            )
            mine = set(stand_in_caps[idx])
            assert "No such device or address" in seen["/dev/nvidia0"], seen
            for path in every:
                want = "No such device or address" if path in mine else "Operation not permitted"
                assert want in seen[path], (job, idx, path, seen[path])
