"""How fast each GPU model runs a job, and how much power it draws, for the dynamic simulation's comparison.

A trace gives each job one duration, measured on whatever GPU it ran on. The comparison reads it as the time
on the **reference GPU** (``REFERENCE``, the A100) and runs a job on a pool of model ``m`` for
``duration / speed(m)``, so an approach that sends work to slower GPUs pays for it in queued time, slowdown
and node-hours; without this, a policy preferring slow GPUs would pay nothing.

The speed factor is the model's peak dense BF16/FP16 Tensor Core throughput (TFLOPS, without sparsity) over
the reference's, from NVIDIA's datasheets. Peak throughput is an upper bound on how much faster a real job
runs (memory bandwidth, input pipelines and communication narrow the gap), so the factors make the
difference between models as large as it can be, not as it will be. Power is the datasheet's maximum board
power (TDP) per GPU, what "the lowest-power GPU" ranks by.

| model | TFLOPS | W | datasheet |
|---|---:|---:|---|
| H100, H200 (SXM) | 989 | 700 | nvidia.com/en-us/data-center/h100/, /h200/ |
| B200 (HGX) | 2,250 | 1,000 | nvidia.com/en-us/data-center/hgx/ (36 PFLOPS sparse per 8 GPUs) |
| A100 (SXM, 40 and 80 GB) | 312 | 400 | nvidia.com/en-us/data-center/a100/ |
| L40S | 362 | 350 | nvidia.com/en-us/data-center/l40s/ |
| A10G | 125 | 150 | the A10's (nvidia.com/en-us/data-center/products/a10-gpu/): NVIDIA publishes none for AWS's A10G |
| L4 | 121 | 72 | nvidia.com/en-us/data-center/l4/ |
| T4, T4G | 65 | 70 | nvidia.com/en-us/data-center/tesla-t4/ |
"""

from __future__ import annotations

REFERENCE = "A100-80GB"

# model -> (dense BF16/FP16 Tensor TFLOPS, max board power W), from the datasheets in the module docstring
GPUS: dict[str, tuple[float, float]] = {
    "H100": (989.0, 700.0),
    "H200": (989.0, 700.0),
    "B200": (2250.0, 1000.0),
    "A100-40GB": (312.0, 400.0),
    "A100-80GB": (312.0, 400.0),
    "L40S": (362.0, 350.0),
    "A10G": (125.0, 150.0),
    "L4": (121.0, 72.0),
    "T4": (65.0, 70.0),
    "T4G": (65.0, 70.0),
}


def speed(model: str) -> float:
    """How many times faster than the reference GPU a job runs on ``model`` (1 for a model not listed)."""
    if model not in GPUS:
        return 1.0
    return GPUS[model][0] / GPUS[REFERENCE][0]


def power_w(model: str) -> float | None:
    """One GPU's maximum board power, in watts (None for a model not listed)."""
    return GPUS[model][1] if model in GPUS else None
