"""Price of one GPU-hour per pool: the catalog's On-Demand price of the pool's instance type, or a price file.

A price file is YAML or JSON mapping pool names to USD per GPU-hour (`{h100: 4.1, l40s: 1.2}`): it covers
existing clusters (no instance type, no list price), Spot, reservations and negotiated rates. Pools with no
price are reported without a cost, never with a made-up one.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from infra import catalog
from infra.errors import ConfigError
from infra.spec import ClusterSpec, NodePool


def catalog_price(pool: NodePool) -> float | None:
    itype = catalog.lookup(pool.instance_type or (pool.instance_types or [""])[0])
    if itype is None or not itype.gpus or itype.price_per_hour is None:
        return None
    return itype.price_per_hour / itype.gpus


def read_price_file(path: Path) -> dict[str, float]:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"--price-file {path}: cannot read it ({exc})") from None
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, int | float) and v >= 0 for k, v in data.items()
    ):
        raise ConfigError(
            f"--price-file {path}: expected a map of pool name to USD per GPU-hour, e.g. {{h100: 4.1}}"
        )
    return {k: float(v) for k, v in data.items()}


def gpu_hour_prices(spec: ClusterSpec, overrides: dict[str, float] | None = None) -> dict[str, float | None]:
    """Pool name -> USD per GPU-hour (None: unknown); the price file wins over the catalog."""
    overrides = overrides or {}
    unknown = sorted(set(overrides) - {p.name for p in spec.node_pools})
    if unknown:
        raise ConfigError(f"--price-file names pools the stack does not have: {', '.join(unknown)}")
    return {p.name: overrides.get(p.name, catalog_price(p)) for p in spec.node_pools}
