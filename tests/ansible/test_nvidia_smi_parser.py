"""gpu_node_verify's nvidia-smi parser and comparison, on recorded nvidia-smi samples."""

from __future__ import annotations

import importlib.util
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.ansible.support import ANSIBLE_DIR, run_local_play

SAMPLES = Path(__file__).parent / "data" / "nvidia-smi"
_spec = importlib.util.spec_from_file_location(
    "nvidia_smi_filters", ANSIBLE_DIR / "roles/gpu_node_verify/filter_plugins/nvidia_smi.py"
)
assert _spec and _spec.loader
smi = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(smi)


def summary(sample: str) -> dict:
    return smi.nvidia_smi_summary(smi.parse_nvidia_smi_csv((SAMPLES / sample).read_text()))


def test_h100_host_parses_into_eight_identical_gpus() -> None:
    gpus = smi.parse_nvidia_smi_csv((SAMPLES / "h100-sxm-8gpu.csv").read_text())
    assert [gpu["index"] for gpu in gpus] == list(range(8))
    assert gpus[3] == {
        "index": 3,
        "name": "NVIDIA H100 80GB HBM3",
        "driver_version": "580.82.07",
        "persistence_mode": True,
        "ecc_mode": True,
        "mig_mode": False,
        "memory_total_mib": 81559,
        "pci_bus_id": "00000000:5D:00.0",
    }
    assert summary("h100-sxm-8gpu.csv") == {
        "count": 8,
        "models": ["NVIDIA H100 80GB HBM3"],
        "driver_version": "580.82.07",
        "persistence_mode": True,
        "ecc_mode": True,
        "mig_mode": False,
    }


@pytest.mark.parametrize(
    ("sample", "count", "model", "driver", "mig"),
    [
        ("a100-sxm4-8gpu-mig.csv", 8, "NVIDIA A100-SXM4-80GB", "535.104.05", True),
        ("l40s-4gpu.csv", 4, "NVIDIA L40S", "570.124.06", None),
        ("t4-1gpu.csv", 1, "Tesla T4", "580.82.07", None),
        ("a100-sxm4-40gb-mixed-mig-nounits.csv", 2, "NVIDIA A100-SXM4-40GB", "550.54.15", [False, True]),
    ],
)
def test_samples_summarise(sample: str, count: int, model: str, driver: str, mig: object) -> None:
    facts = summary(sample)
    assert (facts["count"], facts["models"], facts["driver_version"], facts["mig_mode"]) == (
        count,
        [model],
        driver,
        mig,
    )


def test_units_are_stripped_with_or_without_nounits() -> None:
    with_units = smi.parse_nvidia_smi_csv((SAMPLES / "l40s-4gpu.csv").read_text())
    without = smi.parse_nvidia_smi_csv((SAMPLES / "a100-sxm4-40gb-mixed-mig-nounits.csv").read_text())
    assert with_units[0]["memory_total_mib"] == 46068
    assert without[0]["memory_total_mib"] == 40960


def test_matching_host_has_no_differences() -> None:
    expected = {
        "count": 8,
        "model": "H100",
        "driver_branch": "580",
        "persistence_mode": True,
        "mig_mode": False,
    }
    assert smi.gpu_verify_differences(summary("h100-sxm-8gpu.csv"), expected) == []


def test_mig_left_on_is_reported() -> None:
    expected = {"count": 8, "model": "A100", "driver_branch": "535", "mig_mode": False}
    assert smi.gpu_verify_differences(summary("a100-sxm4-8gpu-mig.csv"), expected) == [
        {"check": "MIG mode", "expected": "Disabled", "actual": "Enabled"}
    ]


def test_every_kind_of_difference_is_reported_in_a_table() -> None:
    expected = {
        "count": 8,
        "model": "H100",
        "driver_branch": "580",
        "persistence_mode": True,
        "ecc_mode": True,
        "mig_mode": False,
    }
    rows = smi.gpu_verify_differences(summary("l40s-4gpu.csv"), expected)
    assert [row["check"] for row in rows] == [
        "gpu count",
        "gpu model",
        "driver branch",
        "persistence mode",
        "MIG mode",
    ]
    assert smi.gpu_verify_table(rows) == textwrap.dedent("""\
        CHECK             EXPECTED  ACTUAL
        gpu count         8         4
        gpu model         *H100*    NVIDIA L40S
        driver branch     580       570.124.06
        persistence mode  Enabled   Disabled
        MIG mode          Disabled  N/A""")


def test_mixed_mig_host_is_reported_as_mixed() -> None:
    rows = smi.gpu_verify_differences(summary("a100-sxm4-40gb-mixed-mig-nounits.csv"), {"mig_mode": True})
    assert rows == [{"check": "MIG mode", "expected": "Enabled", "actual": "mixed: Disabled, Enabled"}]


def test_unset_expectations_are_not_checked() -> None:
    assert (
        smi.gpu_verify_differences(summary("t4-1gpu.csv"), {"count": None, "model": "", "mig_mode": None})
        == []
    )


def test_no_gpus_is_a_difference_not_a_crash() -> None:
    facts = smi.nvidia_smi_summary(smi.parse_nvidia_smi_csv(""))
    rows = smi.gpu_verify_differences(facts, {"count": 4, "model": "L40S", "driver_branch": "580"})
    assert [(row["check"], row["actual"]) for row in rows] == [
        ("gpu count", "0"),
        ("gpu model", "no GPU"),
        ("driver branch", "None"),
    ]


def test_unexpected_columns_and_short_rows_are_rejected() -> None:
    with pytest.raises(smi.NvidiaSmiParseError, match="unexpected nvidia-smi columns"):
        smi.parse_nvidia_smi_csv("index, fan.speed [%]\n0, 30 %\n")
    with pytest.raises(smi.NvidiaSmiParseError, match="line 3 has 2 fields"):
        smi.parse_nvidia_smi_csv("index, name, driver_version\n0, Tesla T4, 580.82.07\n1, Tesla T4\n")
    with pytest.raises(smi.NvidiaSmiParseError, match="Enabled, Disabled or"):
        smi.parse_nvidia_smi_csv("index, mig.mode.current\n0, Sometimes\n")


def test_unknown_bracketed_values_become_difference_rows_not_parse_errors() -> None:
    """nvidia-smi prints conditions it cannot report as bracketed text in any column: "[Unknown Error]",
    "[Insufficient Permissions]", "[GPU is lost]", "[Requires Pending Reboot]" (nvidia-smi(1), "Query
    options": values shown as [N/A], [Not Supported] or an error in brackets). A host in that state must
    show up in the verification table, not stop the role with a parse error."""
    text = (
        "index, name, driver_version, persistence_mode, ecc.mode.current, mig.mode.current, memory.total [MiB]\n"
        "0, NVIDIA H100 80GB HBM3, 580.95.05, [Unknown Error], Enabled, [Insufficient Permissions], [GPU is lost]\n"
    )
    gpus = smi.parse_nvidia_smi_csv(text)
    assert gpus[0]["persistence_mode"] == "[Unknown Error]"
    assert gpus[0]["memory_total_mib"] == "[GPU is lost]"
    rows = smi.gpu_verify_differences(
        smi.nvidia_smi_summary(gpus), {"persistence_mode": True, "mig_mode": False, "ecc_mode": True}
    )
    assert rows == [
        {"check": "persistence mode", "expected": "Enabled", "actual": "[Unknown Error]"},
        {"check": "MIG mode", "expected": "Disabled", "actual": "[Insufficient Permissions]"},
    ]
    assert "[Unknown Error]" in smi.gpu_verify_table(rows)


def test_query_fields_match_the_role() -> None:
    role_vars = (ANSIBLE_DIR / "roles/gpu_node_verify/vars/main.yml").read_text()
    assert f'gpu_node_verify__query: "{",".join(smi.QUERY_FIELDS)}"' in role_vars


def _verify_run(
    tmp_path: Path, env: dict[str, str], sample: str, extra: dict[str, object]
) -> subprocess.CompletedProcess:
    """Run the gpu_node_verify role on localhost with a recorded sample standing in for nvidia-smi."""
    fake = tmp_path / "nvidia-smi"
    fake.write_text(f"#!/bin/sh\nexec cat {SAMPLES / sample}\n")
    fake.chmod(0o755)
    role = {
        "role": str(ANSIBLE_DIR / "roles/gpu_node_verify"),
        "vars": {"gpu_node_verify_nvidia_smi": str(fake)},
    }
    return run_local_play(tmp_path / "verify.yml", {"roles": [role]}, env, extra)


def test_role_passes_a_matching_host(tmp_path: Path, ansible_env: dict[str, str]) -> None:
    done = _verify_run(
        tmp_path,
        ansible_env,
        "h100-sxm-8gpu.csv",
        {
            "gpu_node_verify_expected_count": 8,
            "gpu_node_verify_expected_model": "H100",
            "gpu_node_verify_expected_driver_branch": "580",
        },
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "changed=0" in done.stdout


def test_role_fails_with_a_table_of_differences(tmp_path: Path, ansible_env: dict[str, str]) -> None:
    done = _verify_run(
        tmp_path,
        ansible_env,
        "a100-sxm4-8gpu-mig.csv",
        {
            "gpu_node_verify_expected_count": 4,
            "gpu_node_verify_expected_model": "A100",
            "gpu_node_verify_expected_mig_mode": "false",
        },
    )
    assert done.returncode != 0
    assert "localhost does not match its host group:" in done.stdout
    assert "gpu count" in done.stdout and "MIG mode" in done.stdout
    assert "changed=0" in done.stdout


def test_fabric_section_of_nvidia_smi_q_is_read_per_gpu() -> None:
    """`nvidia-smi -q` prints a Fabric section per GPU (State, Status, then CliqueId, ClusterUUID, Health);
    NVML nvmlGpuFabricInfo_t: Status only counts once State is Completed."""
    gpus = smi.parse_nvidia_smi_fabric((SAMPLES / "h100-fabric-q.txt").read_text())
    assert len(gpus) == 8
    assert gpus[0] == {"pci_bus_id": "00000000:18:00.0", "state": "Completed", "status": "Success"}
    assert gpus[5] == {"pci_bus_id": "00000000:AB:00.0", "state": "In Progress", "status": "N/A"}
    # The CSV query has no Fabric section: a GPU block without one reads as None, never as a pass.
    assert smi.parse_nvidia_smi_fabric("GPU 00000000:18:00.0\n    Product Name : NVIDIA H100\n") == [
        {"pci_bus_id": "00000000:18:00.0", "state": None, "status": None}
    ]


def test_fabric_differences_name_the_unregistered_gpus_and_a_stopped_fabric_manager() -> None:
    """NVIDIA's Fabric Manager user guide: a GPU on an NVSwitch system is usable once
    `nvidia-smi -q -i 0 | grep -i -A 2 Fabric` reads State Completed, Status Success, and Fabric Manager
    must be running (nvidia-fabricmanager.service). N/A (pre-Hopper GPUs, NVML NOT_SUPPORTED) is no failure."""
    text = (SAMPLES / "h100-fabric-q.txt").read_text()
    assert smi.gpu_fabric_differences(text, "failed") == [
        {"check": "fabric manager", "expected": "active", "actual": "failed"},
        {
            "check": "gpu fabric",
            "expected": "State Completed, Status Success",
            "actual": "State In Progress, Status N/A (1 GPU: 00000000:AB:00.0)",
        },
    ]
    healthy = text.replace("In Progress", "Completed").replace(
        ": N/A\n        CliqueId", ": Success\n        CliqueId"
    )
    assert smi.gpu_fabric_differences(healthy, "active\n") == []
    assert smi.gpu_fabric_differences(text.replace("In Progress", "N/A"), None) == []
    assert smi.gpu_fabric_differences(None, None) == []


def _fabric_run(
    tmp_path: Path, env: dict[str, str], fabric: tuple[str, str], extra: dict[str, object]
) -> subprocess.CompletedProcess:
    """The role with the stub repositories' nvidia-smi (stubrepo.NVIDIA_SMI) under a fake root."""
    from tests.ansible import stubrepo

    root = tmp_path / "root"
    (root / "sys/module/nvidia").mkdir(parents=True)
    (root / "sys/module/nvidia/version").write_text("580.95.05\n")
    state = root / stubrepo.NVIDIA_SMI_FABRIC.lstrip("/")
    state.parent.mkdir(parents=True)
    state.write_text("\n".join(fabric) + "\n")
    fake = tmp_path / "nvidia-smi"
    fake.write_text(stubrepo.NVIDIA_SMI.format(version="580.95.05", fabric=stubrepo.NVIDIA_SMI_FABRIC))
    fake.chmod(0o755)
    role = {
        "role": str(ANSIBLE_DIR / "roles/gpu_node_verify"),
        "vars": {"gpu_node_verify_nvidia_smi": str(fake)},
    }
    play = {"roles": [role], "environment": {"GPUFLEET_STUB_ROOT": str(root)}}
    return run_local_play(tmp_path / "verify.yml", play, {**env, "GPUFLEET_STUB_ROOT": str(root)}, extra)


def test_nvswitch_host_whose_fabric_did_not_register_fails_verification(
    tmp_path: Path, ansible_env: dict[str, str]
) -> None:
    """On an NVSwitch host (nvidia_fabricmanager_nvswitch_count > 0) verification reads the Fabric
    section of `nvidia-smi -q` and fails unless State is Completed and Status Success (NVIDIA Fabric Manager
    user guide; NVML nvmlGpuFabricInfo_t), so a host whose Fabric Manager failed is not uncordoned."""
    done = _fabric_run(
        tmp_path,
        ansible_env,
        ("In Progress", "N/A"),
        {
            "nvidia_fabricmanager_nvswitch_count": 4,
            "gpu_node_verify_fabricmanager_service": "gpufleet-absent",
        },
    )
    assert done.returncode != 0, done.stdout
    assert "gpu fabric" in done.stdout and "State In Progress, Status N/A" in done.stdout
    assert "fabric manager" in done.stdout


def test_registered_fabric_passes_and_hosts_without_nvswitches_are_not_asked(
    tmp_path: Path, ansible_env: dict[str, str]
) -> None:
    """Completed / Success passes (the Fabric Manager check needs systemd, skipped here by value);
    a host without NVSwitches (count 0) never runs the fabric query."""
    done = _fabric_run(
        tmp_path,
        ansible_env,
        ("Completed", "Success"),
        {
            "nvidia_fabricmanager_nvswitch_count": 4,
            "gpu_node_verify_fabricmanager_service": "gpufleet-absent",
        },
    )
    # systemctl answers for the absent unit with "inactive" (or is missing): only that row may be reported.
    assert "gpu fabric" not in done.stdout, done.stdout
    no_switch = _fabric_run(
        tmp_path / "b", ansible_env, ("In Progress", "N/A"), {"nvidia_fabricmanager_nvswitch_count": 0}
    )
    # The stub reports an unregistered fabric; without NVSwitches it is not asked, so the host passes.
    assert no_switch.returncode == 0, no_switch.stdout + no_switch.stderr
    assert "gpu fabric" not in no_switch.stdout
