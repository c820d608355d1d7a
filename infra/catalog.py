"""AWS instance facts the toolkit relies on: GPUs, memory, vCPUs, EFA, AMI families, quota buckets, prices.

This is the one place these facts live; the spec validator, the planner, the Pulumi program, preflight and the
simulator all read them from here.

Sources (checked 2026-11-30 against stored copies of public material, not a live AWS account):
- vCPUs, memory, GPU count/model: AWS EC2 accelerated-computing instance pages and EC2 API data as mirrored in
  public code (torchx `named_resources_aws.py`, OpenShift ROSA instance lists, dstack offers).
- EFA `MaximumEfaInterfaces`: the per-instance EFA table in skypilot-org/skypilot `examples/aws_efa/README.md`
  (p4d/p4de 4, p5/p5e 32, p5en 16, p6-b200 8, g6e.24xlarge 2, g6e.48xlarge 4, other EFA g-sizes 1), which matches
  the AWS "network cards" docs; p5.4xlarge 1 from EFA DRA driver fixtures.
- MIG profiles and instances per GPU: NVIDIA go-nvml `pkg/nvml/mock/shared/gpus/{a100,h200,b200}.go` and the
  NVIDIA MIG user guide ("Supported MIG Profiles").
- NVML product names (what `nvidia-smi --query-gpu=name` prints; GPU feature discovery's `nvidia.com/gpu.product`
  label is the same name with spaces as dashes, e.g. "NVIDIA-H100-80GB-HBM3" in the GPU operator docs' label
  examples): the names each model reports on AWS.
- Provisioning delays: the docs' "a cold GPU node takes 10-15 minutes to join" (docs/aws.md), per family.
- Quota codes: Service Quotas codes for EC2 vCPU buckets (On-Demand and Spot).
- Prices: EC2 On-Demand, US East (N. Virginia), Linux, USD/hour, from the AWS Price List values quoted in public
  code dated 2026 (after the June 2025 P4/P5 price cuts): p4d 21.95764, p4de 27.44705, p5.48xlarge 55.04,
  p5.4xlarge 6.88, p5en 63.296, p6-b200 113.9328; g4dn/g5/g5g/g6/g6e and CPU rates agree with the same
  sources. p5e.48xlarge has no On-Demand price (see its row).
Prices are list prices for estimates only; the plan says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class AmiFamily(StrEnum):
    AL2023_NVIDIA = "AL2023_NVIDIA"
    BOTTLEROCKET_NVIDIA = "BOTTLEROCKET_NVIDIA"


GPU_AMI_FAMILIES = (AmiFamily.AL2023_NVIDIA, AmiFamily.BOTTLEROCKET_NVIDIA)

# vCPU-based quota codes (service code "ec2").
QUOTA_NAMES: dict[str, str] = {
    "L-417A185B": "Running On-Demand P instances",
    "L-DB2E81BA": "Running On-Demand G and VT instances",
    "L-7212CCBC": "All P Spot Instance Requests",
    "L-3819A6DF": "All G and VT Spot Instance Requests",
    "L-1216C47A": "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances",
    "L-34B43A08": "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests",
}
_ON_DEMAND_QUOTA = {"p": "L-417A185B", "g": "L-DB2E81BA", "standard": "L-1216C47A"}
_SPOT_QUOTA = {"p": "L-7212CCBC", "g": "L-3819A6DF", "standard": "L-34B43A08"}


@dataclass(frozen=True)
class GpuModel:
    """A GPU model: what the simulator, labels and MIG validation need to know."""

    name: str  # our canonical name, used in specs (gpuModel) and labels
    memory_gib: int
    product: str  # the NVML product name (nvidia-smi's GPU name), e.g. "NVIDIA H100 80GB HBM3"
    mig_profiles: tuple[tuple[str, int], ...] = ()  # (profile, instances per GPU) for MIG-capable GPUs

    @property
    def label(self) -> str:
        """Value for the `k8s.amazonaws.com/accelerator` node label."""
        return "nvidia-" + self.name.lower()

    @property
    def product_label(self) -> str:
        """Value of GPU feature discovery's `nvidia.com/gpu.product` node label: the product, spaces as dashes."""
        return self.product.replace(" ", "-")


def product_match(gpu_model: str) -> str:
    """What every NVML product name of a `gpuModel` (given in any case) contains, for a substring check of
    nvidia-smi's GPU name: the part before the first dash, upper case ("A100-80GB" -> "A100": nvidia-smi names
    it "NVIDIA A100-SXM4-80GB"; "l40s" -> "L40S")."""
    return gpu_model.split("-")[0].upper()


# Memory-only profiles; the single-instance `+me` (media extension) variants are left out.
_MIG_A100_40 = (("1g.5gb", 7), ("1g.10gb", 4), ("2g.10gb", 3), ("3g.20gb", 2), ("4g.20gb", 1), ("7g.40gb", 1))
_MIG_80 = (("1g.10gb", 7), ("1g.20gb", 4), ("2g.20gb", 3), ("3g.40gb", 2), ("4g.40gb", 1), ("7g.80gb", 1))
_MIG_H200 = (("1g.18gb", 7), ("1g.35gb", 4), ("2g.35gb", 3), ("3g.71gb", 2), ("4g.71gb", 1), ("7g.141gb", 1))
_MIG_B200 = (("1g.23gb", 7), ("1g.45gb", 4), ("2g.45gb", 3), ("3g.90gb", 2), ("4g.90gb", 1), ("7g.180gb", 1))

GPU_MODELS: dict[str, GpuModel] = {
    m.name: m
    for m in (
        GpuModel("A100-40GB", 40, "NVIDIA A100-SXM4-40GB", _MIG_A100_40),
        GpuModel("A100-80GB", 80, "NVIDIA A100-SXM4-80GB", _MIG_80),
        GpuModel("H100", 80, "NVIDIA H100 80GB HBM3", _MIG_80),
        GpuModel("H200", 141, "NVIDIA H200", _MIG_H200),
        # 180 GB HBM3e (AWS: 1440 GB per p6-b200; nvidia-smi ~179 GiB)
        GpuModel("B200", 180, "NVIDIA B200", _MIG_B200),
        GpuModel("A10G", 24, "NVIDIA A10G"),
        GpuModel("L4", 24, "NVIDIA L4"),
        GpuModel("L40S", 48, "NVIDIA L40S"),
        GpuModel("T4", 16, "Tesla T4"),
        GpuModel("T4G", 16, "NVIDIA T4G"),
    )
}


@dataclass(frozen=True)
class InstanceType:
    name: str
    vcpus: int
    memory_gib: int
    price_per_hour: float | None  # USD, On-Demand, us-east-1, Linux; None: not sold On-Demand
    gpus: int = 0
    gpu_model: str | None = None
    efa_interfaces: int = 0
    arch: str = "x86_64"

    @property
    def family(self) -> str:
        return self.name.split(".")[0]

    @property
    def quota_class(self) -> str:
        head = self.family[0]
        return head if self.gpus and head in ("p", "g") else "standard"

    def quota_code(self, capacity_type: str) -> str | None:
        """The vCPU quota bucket this instance counts against; capacity blocks are reservation-bound."""
        if capacity_type == "CAPACITY_BLOCK":
            return None
        table = _SPOT_QUOTA if capacity_type == "SPOT" else _ON_DEMAND_QUOTA
        return table[self.quota_class]

    @property
    def gpu(self) -> GpuModel | None:
        return GPU_MODELS[self.gpu_model] if self.gpu_model else None

    @property
    def gpu_memory_gib(self) -> int:
        return self.gpus * self.gpu.memory_gib if self.gpu else 0

    @property
    def ami_families(self) -> tuple[AmiFamily, ...]:
        return GPU_AMI_FAMILIES if self.gpus else ()


def _sizes(
    family: str, gpu_model: str, rows: list[tuple[str, int, int, int, int, float]], arch: str = "x86_64"
) -> list[InstanceType]:
    """rows: (size, gpus, vcpus, memory GiB, EFA interfaces, price)."""
    return [
        InstanceType(f"{family}.{size}", vcpus, mem, price, gpus, gpu_model, efa, arch)
        for size, gpus, vcpus, mem, efa, price in rows
    ]


_GPU_TYPES: list[InstanceType] = [
    InstanceType("p4d.24xlarge", 96, 1152, 21.95764, 8, "A100-40GB", 4),
    InstanceType("p4de.24xlarge", 96, 1152, 27.44705, 8, "A100-80GB", 4),
    InstanceType("p5.4xlarge", 16, 256, 6.88, 1, "H100", 1),
    InstanceType("p5.48xlarge", 192, 2048, 55.04, 8, "H100", 32),
    # p5e has no EC2 On-Demand price: it is sold through Capacity Blocks and reservations only.
    InstanceType("p5e.48xlarge", 192, 2048, None, 8, "H200", 32),
    InstanceType("p5en.48xlarge", 192, 2048, 63.296, 8, "H200", 16),
    InstanceType("p6-b200.48xlarge", 192, 2048, 113.9328, 8, "B200", 8),
    *_sizes(
        "g4dn",
        "T4",
        [
            ("xlarge", 1, 4, 16, 0, 0.526),
            ("2xlarge", 1, 8, 32, 0, 0.752),
            ("4xlarge", 1, 16, 64, 0, 1.204),
            ("8xlarge", 1, 32, 128, 1, 2.176),
            ("12xlarge", 4, 48, 192, 1, 3.912),
            ("16xlarge", 1, 64, 256, 1, 4.352),
            ("metal", 8, 96, 384, 1, 7.824),
        ],
    ),
    *_sizes(
        "g5",
        "A10G",
        [
            ("xlarge", 1, 4, 16, 0, 1.006),
            ("2xlarge", 1, 8, 32, 0, 1.212),
            ("4xlarge", 1, 16, 64, 0, 1.624),
            ("8xlarge", 1, 32, 128, 1, 2.448),
            ("12xlarge", 4, 48, 192, 1, 5.672),
            ("16xlarge", 1, 64, 256, 1, 4.096),
            ("24xlarge", 4, 96, 384, 1, 8.144),
            ("48xlarge", 8, 192, 768, 1, 16.288),
        ],
    ),
    *_sizes(
        "g6",
        "L4",
        [
            ("xlarge", 1, 4, 16, 0, 0.8048),
            ("2xlarge", 1, 8, 32, 0, 0.9776),
            ("4xlarge", 1, 16, 64, 0, 1.3232),
            ("8xlarge", 1, 32, 128, 1, 2.0144),
            ("12xlarge", 4, 48, 192, 1, 4.6016),
            ("16xlarge", 1, 64, 256, 1, 3.3968),
            ("24xlarge", 4, 96, 384, 1, 6.6752),
            ("48xlarge", 8, 192, 768, 1, 13.3504),
        ],
    ),
    *_sizes(
        "g6e",
        "L40S",
        [
            ("xlarge", 1, 4, 32, 0, 1.861),
            ("2xlarge", 1, 8, 64, 0, 2.24208),
            ("4xlarge", 1, 16, 128, 0, 3.00424),
            ("8xlarge", 1, 32, 256, 1, 4.52856),
            ("12xlarge", 4, 48, 384, 1, 10.49264),
            ("16xlarge", 1, 64, 512, 1, 7.57719),
            ("24xlarge", 4, 96, 768, 2, 15.06559),
            ("48xlarge", 8, 192, 1536, 4, 30.13118),
        ],
    ),
    *_sizes(
        "g5g",
        "T4G",
        [
            ("xlarge", 1, 4, 8, 0, 0.42),
            ("2xlarge", 1, 8, 16, 0, 0.556),
            ("4xlarge", 1, 16, 32, 0, 0.828),
            ("8xlarge", 1, 32, 64, 0, 1.372),
            ("16xlarge", 2, 64, 128, 0, 2.744),
            ("metal", 2, 64, 128, 0, 2.744),
        ],
        arch="arm64",
    ),
]

_CPU_TYPES: list[InstanceType] = [
    InstanceType("m6i.large", 2, 8, 0.096),
    InstanceType("m6i.xlarge", 4, 16, 0.192),
    InstanceType("m6i.2xlarge", 8, 32, 0.384),
    InstanceType("m6i.4xlarge", 16, 64, 0.768),
    InstanceType("m7i.large", 2, 8, 0.1008),
    InstanceType("m7i.xlarge", 4, 16, 0.2016),
    InstanceType("m7i.2xlarge", 8, 32, 0.4032),
    InstanceType("m7i.4xlarge", 16, 64, 0.8064),
    InstanceType("c6i.xlarge", 4, 8, 0.17),
    InstanceType("c6i.2xlarge", 8, 16, 0.34),
    InstanceType("r6i.xlarge", 4, 32, 0.252),
    InstanceType("m7g.xlarge", 4, 16, 0.1632, arch="arm64"),
    InstanceType("m7g.2xlarge", 8, 32, 0.3264, arch="arm64"),
]

CATALOG: dict[str, InstanceType] = {t.name: t for t in (*_GPU_TYPES, *_CPU_TYPES)}

HOURS_PER_MONTH = 730

# Seconds from the autoscaler's decision to a Ready GPU node, per instance family: the upper end of "10-15
# minutes" for the large p-family nodes (EFA, 8 GPUs, larger images), the lower for the g-family.
PROVISION_DELAY_S: dict[str, float] = {
    **dict.fromkeys(("p4d", "p4de", "p5", "p5e", "p5en", "p6-b200"), 900.0),
    **dict.fromkeys(("g4dn", "g5", "g5g", "g6", "g6e"), 600.0),
}
DEFAULT_PROVISION_DELAY_S = 600.0  # a family not listed (the CPU types)


def lookup(name: str) -> InstanceType | None:
    return CATALOG.get(name)


def gpu_instance_names() -> list[str]:
    return sorted(n for n, t in CATALOG.items() if t.gpus)


def cpu_instance_names() -> list[str]:
    return sorted(n for n, t in CATALOG.items() if not t.gpus)


def provision_delay_s(family: str) -> float:
    """Seconds a new node of an instance family (`InstanceType.family`, e.g. "p5") takes to become Ready."""
    return PROVISION_DELAY_S.get(family, DEFAULT_PROVISION_DELAY_S)
