"""gpufleet's infrastructure layer: the cluster spec, the catalog, the planner and the Pulumi program.

`from infra import build` gives the program's entry point without importing pulumi at `import infra` time.
"""

from __future__ import annotations

from typing import Any


def build(spec: Any) -> dict[str, Any]:
    """Create every resource for a validated ClusterSpec; return the stack outputs."""
    from infra.program import build as _build

    return _build(spec)
