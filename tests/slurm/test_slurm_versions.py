"""What differs by Slurm release (`gpufleet:slurm.version`): the configuration rendered for each of 21.08 (Ubuntu
22.04), 22.05 (Debian 12, EPEL 9), 23.11 (Ubuntu 24.04) and 24.11 (SchedMD's packages) uses only options of that
release's manual pages (data/manual-options: the bold words of SchedMD/slurm's doc/man/man5 at each release's
tag), and what a release cannot do is refused with the key path or adapted."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from infra.errors import ConfigError
from infra.slurm.files import slurm_files
from infra.stackfile import load_stack
from tests.preflight.helpers import stack_doc, write_stack

MANUALS = Path(__file__).parent / "data" / "manual-options"
VERSIONS = ("21.08", "22.05", "23.11", "24.11")


def _options(version: str) -> dict[str, set[str]]:
    pages = {}
    for line in (MANUALS / f"{version}.txt").read_text().splitlines():
        if not line.startswith("#"):
            page, words = line.split(":", 1)
            pages[page] = set(words.split())
    return pages


def _stack(tmp_path: Path, version: str, edit: Any = None) -> Any:
    doc = stack_doc("metal-slurm")
    config = doc["config"]
    config["gpufleet:slurm"]["version"] = version
    if version == "21.08":  # no shard GRES before 22.05: the L40S pool's GPUs whole
        config["gpufleet:nodePools"][1]["sharing"] = "exclusive"
    if edit:
        edit(config)
    return load_stack(write_stack(tmp_path, f"slurm-{version.replace('.', '')}", doc))


@pytest.mark.parametrize("version", VERSIONS)
def test_every_option_is_one_of_that_releases_manual(tmp_path: Path, version: str) -> None:
    """slurm.conf, gres.conf and cgroup.conf as rendered for the release: every key (and every PrivateData,
    PrologFlags, HealthCheckNodeState and CgroupPlugin value) is in that release's manual page."""
    files = slurm_files(_stack(tmp_path, version))
    manual = _options(version)
    for name in ("slurm.conf", "gres.conf", "cgroup.conf"):
        text = "\n".join(ln for ln in files[name].splitlines() if not ln.startswith("#"))
        keys = {k.lower() for k in re.findall(r"(?:^|\s)([A-Za-z]+)=", text, re.M)}
        assert keys and keys <= manual[name], (version, name, sorted(keys - manual[name]))
    conf = files["slurm.conf"]
    values = re.findall(r"^(?:PrivateData|PrologFlags|HealthCheckNodeState)=(\S+)", conf, re.M)
    assert {v.lower() for value in values for v in value.split(",")} <= manual["slurm.conf"]


def test_21_08_names_the_cgroup_v1_plugin_and_later_releases_autodetect(tmp_path: Path) -> None:
    """21.08 has no cgroup/v2 plugin, and its autodetect would pick v2 on a unified host
    (SchedMD/slurm@slurm-21-08-5-1 src/common/cgroup.c): cgroup/v1, with hosts booted so (the role checks)."""
    plugins = {v: slurm_files(_stack(tmp_path, v))["cgroup.conf"] for v in VERSIONS}
    assert "CgroupPlugin=cgroup/v1" in plugins["21.08"].splitlines()
    assert all("CgroupPlugin=autodetect" in plugins[v].splitlines() for v in VERSIONS[1:])


@pytest.mark.parametrize(
    "sharing,words",
    [({"timeSlicing": {"replicas": 2}}, "shard GRES, new in 22.05"), ({"mig": "1g.10gb"}, "MultipleFiles")],
    ids=["time-slicing", "mig"],
)
def test_21_08_refuses_what_it_has_no_means_for(tmp_path: Path, sharing: dict[str, Any], words: str) -> None:
    def shared_pool(config: dict[str, Any]) -> None:
        config["gpufleet:nodePools"][1].update(gpuModel="H100", sharing=sharing)

    with pytest.raises(ConfigError) as refused:
        _stack(tmp_path, "21.08", shared_pool)
    assert "gpufleet:nodePools[1].sharing" in str(refused.value) and words in str(refused.value)


def test_a_preemption_grace_is_the_borrow_qos_gracetime_from_23_11_and_refused_before(tmp_path: Path) -> None:
    """preempt.html: GraceTime is honoured for PreemptMode=REQUEUE from 23.11 (at slurm-22-05-8-1 "only honored
    if PreemptMode=CANCEL")."""

    def grace(config: dict[str, Any]) -> None:
        config["gpufleet:slurm"]["preemptGraceSeconds"] = 300

    for version in ("23.11", "24.11"):
        script = slurm_files(_stack(tmp_path, version, grace))["sacctmgr.sh"]
        assert re.search(
            r"name=vision-borrow set GrpTRES=\S+ PreemptMode=requeue GraceTime=300$", script, re.M
        )
    for version in ("21.08", "22.05"):
        with pytest.raises(ConfigError) as refused:
            _stack(tmp_path, version, grace)
        assert "gpufleet:slurm.preemptGraceSeconds" in str(refused.value)
    assert "GraceTime" not in slurm_files(_stack(tmp_path, "22.05"))["sacctmgr.sh"]


def test_the_inventory_tells_the_roles_the_release(tmp_path: Path) -> None:
    from infra.slurm.files import slurm_inventory

    inventory = slurm_inventory(_stack(tmp_path, "23.11"), tmp_path)
    assert inventory["all"]["vars"]["slurm_common_slurm_version"] == "23.11"  # type: ignore[index]
