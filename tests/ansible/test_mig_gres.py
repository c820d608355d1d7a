"""slurm_common's MIG filter: a MIG host's gres.conf lines (MultipleFiles: the parent GPU and the instance's two
capability files, the files Slurm's NVML plugin would find) from nvidia-smi and the driver's mig-minors."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.ansible.support import ANSIBLE_DIR

SAMPLES = Path(__file__).parent / "data" / "mig"
_spec = importlib.util.spec_from_file_location(
    "mig_gres_filters", ANSIBLE_DIR / "roles/slurm_common/filter_plugins/mig_gres.py"
)
assert _spec and _spec.loader
mig = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mig)


def _sample(name: str) -> str:
    return (SAMPLES / name).read_text()


def test_each_instance_of_the_profile_gets_its_gpu_and_two_capability_files() -> None:
    lines = mig.mig_gres_lines(_sample("lci.txt"), _sample("query.txt"), _sample("mig-minors.txt"),
                               "gpu-mig-01", "1g.10gb")  # fmt: skip
    assert len(lines) == 7  # GPU 0's seven 1g.10gb; GPU 1's 3g.40gb are another profile
    # gpu0/gi7/access 66, gpu0/gi7/ci0/access 67 (3 + 9 x GI, + 1 + CI)
    assert lines[0] == (
        "NodeName=gpu-mig-01 Name=gpu Type=1g.10gb "
        "MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap66,/dev/nvidia-caps/nvidia-cap67"
    )
    assert lines[-1].endswith("/dev/nvidia0,/dev/nvidia-caps/nvidia-cap120,/dev/nvidia-caps/nvidia-cap121")


def test_the_gpu_minor_not_its_index_names_the_files() -> None:
    """mig-minors and /dev/nvidiaN count device minors: GPU index 1 whose minor is 3 uses gpu3/... and nvidia3."""
    query = _sample("query.txt").replace("Minor Number                          : 1", "Minor Number : 3")
    minors = _sample("mig-minors.txt").replace("gpu1/", "gpu3/")
    lines = mig.mig_gres_lines(_sample("lci.txt"), query, minors, "h", "3g.40gb")
    assert [line.split("MultipleFiles=")[1].split(",")[0] for line in lines] == [
        "/dev/nvidia3",
        "/dev/nvidia3",
    ]


def test_an_instance_the_driver_does_not_list_is_an_error() -> None:
    minors = "\n".join(ln for ln in _sample("mig-minors.txt").splitlines() if not ln.startswith("gpu0/gi9/"))
    with pytest.raises(mig.MigDevicesError, match="gpu0/gi9/ci0"):
        mig.mig_gres_lines(_sample("lci.txt"), _sample("query.txt"), minors, "h", "1g.10gb")
