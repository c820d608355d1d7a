"""The FGD reproduction benchmark leaves `docs/` alone unless asked: a documented quick-subset run must not
rewrite the published 54-row table to 2 rows, nor the plots."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT


def _digest(paths: list[Path]) -> dict[str, str]:
    return {
        str(p.relative_to(ROOT)): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths if p.is_file()
    }


def test_a_quick_subset_run_prints_and_writes_nothing_into_docs(shared_dir: Path, tmp_path: Path) -> None:
    watched = [ROOT / "docs" / "simulation.md", *sorted((ROOT / "docs" / "img").glob("sim-*.png"))]
    before = _digest(watched)
    done = subprocess.run(
        [sys.executable, "benchmarks/fgd_reproduction.py", "--workloads", "default", "--policies", "FGD,BestFit",
         "--seeds", "42", "--processes", "1", "--cache", str(tmp_path / "cache.json")],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "GPUFLEET_SHARED": str(shared_dir)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "FGD" in done.stdout and "wrote" not in done.stdout
    assert _digest(watched) == before


def test_the_docs_command_lines_name_trace_files_that_exist(shared_dir: Path) -> None:
    """docs/simulation.md's "From the command line" block: `$TRACES` is where reference_data.py puts the openb
    trace, and every file the commands pass is there, so they run in a fresh clone."""
    import re

    text = (ROOT / "docs" / "simulation.md").read_text()
    block = text.split("From the command line", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    assert (
        "benchmarks/reference_data.py --only traces/alibaba-gpu-v2023)/traces/alibaba-gpu-v2023 || exit 1"
        in block
    )
    traces = shared_dir / "traces" / "alibaba-gpu-v2023"
    files = re.findall(r'"\$TRACES/([^"]+)"', block)
    assert files and all((traces / f).is_file() for f in files), files
