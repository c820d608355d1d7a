"""The catalog carries the facts the rest of the toolkit relies on."""

from __future__ import annotations

import pytest

from infra import catalog

REQUIRED = [
    "p4d.24xlarge",
    "p4de.24xlarge",
    "p5.48xlarge",
    "p5e.48xlarge",
    "p5en.48xlarge",
    "p6-b200.48xlarge",
]


@pytest.mark.parametrize("name", REQUIRED)
def test_large_gpu_types_present_with_eight_gpus_and_efa(name: str) -> None:
    itype = catalog.CATALOG[name]
    assert itype.gpus == 8 and itype.efa_interfaces > 0
    # p5e is sold through Capacity Blocks and reservations only: no On-Demand price.
    assert (itype.price_per_hour is None) == (name == "p5e.48xlarge")


@pytest.mark.parametrize("family", ["g4dn", "g5", "g6", "g6e"])
def test_g_families_have_several_sizes(family: str) -> None:
    sizes = [t for t in catalog.CATALOG.values() if t.family == family]
    assert len(sizes) >= 5
    assert len({t.gpu_model for t in sizes}) == 1


def test_p5_facts() -> None:
    p5 = catalog.CATALOG["p5.48xlarge"]
    assert (p5.gpus, p5.gpu_model, p5.vcpus, p5.efa_interfaces) == (8, "H100", 192, 32)
    assert p5.gpu is not None and p5.gpu.memory_gib == 80


def test_p5en_facts() -> None:
    p5en = catalog.CATALOG["p5en.48xlarge"]
    assert (p5en.gpus, p5en.gpu_model, p5en.efa_interfaces) == (8, "H200", 16)
    assert p5en.gpu is not None and p5en.gpu.memory_gib == 141


@pytest.mark.parametrize(("family", "model", "memory"), [("g6e", "L40S", 48), ("g5", "A10G", 24)])
def test_g_family_gpu_models(family: str, model: str, memory: int) -> None:
    for itype in (t for t in catalog.CATALOG.values() if t.family == family):
        assert itype.gpu is not None
        assert (itype.gpu.name, itype.gpu.memory_gib) == (model, memory)


@pytest.mark.parametrize(
    ("name", "capacity", "code"),
    [
        ("p5.48xlarge", "ON_DEMAND", "L-417A185B"),
        ("g6e.xlarge", "ON_DEMAND", "L-DB2E81BA"),
        ("p4d.24xlarge", "SPOT", "L-7212CCBC"),
        ("g5.2xlarge", "SPOT", "L-3819A6DF"),
        ("m6i.xlarge", "ON_DEMAND", "L-1216C47A"),
        ("p5.48xlarge", "CAPACITY_BLOCK", None),
    ],
)
def test_quota_buckets(name: str, capacity: str, code: str | None) -> None:
    assert catalog.CATALOG[name].quota_code(capacity) == code


def test_every_gpu_type_supports_both_gpu_ami_families() -> None:
    for name in catalog.gpu_instance_names():
        assert set(catalog.CATALOG[name].ami_families) == {"AL2023_NVIDIA", "BOTTLEROCKET_NVIDIA"}


def test_cpu_types_for_the_system_pool() -> None:
    assert {"m6i.xlarge", "m6i.2xlarge", "m7i.xlarge"} <= set(catalog.cpu_instance_names())
    assert all(catalog.CATALOG[n].gpus == 0 for n in catalog.cpu_instance_names())


def test_mig_profiles_only_on_mig_capable_models() -> None:
    assert dict(catalog.GPU_MODELS["H100"].mig_profiles)["1g.10gb"] == 7
    assert catalog.GPU_MODELS["L40S"].mig_profiles == ()


def test_every_gpu_model_names_its_nvml_product() -> None:
    """The twin's `nvidia.com/gpu.product` label and the bare-metal check of nvidia-smi's GPU name both read it."""
    for model in catalog.GPU_MODELS.values():
        assert model.product.startswith(("NVIDIA ", "Tesla ")), model.name
        assert catalog.product_match(model.name) in model.product, model.name
        assert catalog.product_match(model.name.lower()) == catalog.product_match(model.name)
    assert catalog.GPU_MODELS["H100"].product_label == "NVIDIA-H100-80GB-HBM3"
    assert catalog.product_match("A100-80GB") == "A100"


def test_every_gpu_family_has_a_provisioning_delay() -> None:
    families = {t.family for t in catalog.CATALOG.values() if t.gpus}
    assert families <= set(catalog.PROVISION_DELAY_S)
    assert catalog.provision_delay_s("p5") == 900.0 and catalog.provision_delay_s("g6e") == 600.0
    assert catalog.provision_delay_s("m6i") == catalog.DEFAULT_PROVISION_DELAY_S
