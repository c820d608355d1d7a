"""Run `invoke plan`, `invoke render`, `invoke simulate` (static and dynamic) and every task's `--help` for every
example stack at two git revisions, and compare what they print and write byte for byte.

A move of code between modules must change no behaviour; this is the check a reviewer can rerun:

    .venv/bin/python scripts/same_outputs.py BASE [HEAD]     # HEAD defaults to the working tree

Each revision runs from its own `git worktree` with the same virtual environment (the worktree's folders come
first on `sys.path`, before the editable install). Wall-clock figures (seconds, pods per second) are the only
thing masked. Exit 0 when every output is identical, 1 with a list of the differing files otherwise.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STACKS = ("dev", "example-prod", "example-karpenter", "metal", "metal-slurm")
# what varies from run to run of the same code: durations and rates
TIMING = re.compile(
    r"\d+(\.\d+)?\s*(s|ms|pods/s)\b|\"seconds\": [0-9.e-]+|\"pods_per_second\": [0-9.e-]+|in \d+(\.\d+)? s"
    r"|\d+\.\d+ (?=\|\s*$)|\d+\.\d+ (?=│\s*$)",  # the tables' last column, seconds per run
    re.M,
)


def _trace(shared: Path, into: Path, rows: int) -> Path:
    """The first `rows` pods of openb's default trace: every column the simulators read, small enough to run twice."""
    lines = (shared / "traces/alibaba-gpu-v2023/openb_pod_list_default.csv").read_text().splitlines()
    path = into / "pods.csv"
    path.write_text("\n".join(lines[: rows + 1]) + "\n")
    return path


def _commands(pods: Path, nodes: Path, out: Path) -> dict[str, list[str]]:
    """Each named run's invoke arguments; outputs go under `out/<name>`."""
    runs: dict[str, list[str]] = {"list": ["--list"]}
    for task in ("plan", "render", "simulate", "twin", "usage", "reclaim", "metal", "preflight", "deploy"):
        runs[f"help-{task}"] = ["--help", task]
    for stack in STACKS:
        runs[f"plan-{stack}"] = ["plan", "--stack", stack, "--out", str(out / f"plan-{stack}")]
        runs[f"render-{stack}"] = ["render", "--stack", stack, "--out", str(out / f"render-{stack}")]
        if stack != "metal-slurm":
            runs[f"simulate-{stack}"] = [
                "simulate", "--stack", stack, "--pods", str(pods), "--seeds", "1,2", "--processes", "1",
                "--out", str(out / f"simulate-{stack}"), "--json", str(out / f"simulate-{stack}.json"),
            ]  # fmt: skip
    runs["simulate-nodes"] = [
        "simulate", "--nodes", str(nodes), "--pods", str(pods), "--seeds", "1", "--processes", "1",
        "--policy", "FGD,MostAllocated,BestFit", "--out", str(out / "simulate-nodes"),
    ]  # fmt: skip
    runs["simulate-as-deployed"] = [
        *runs["simulate-nodes"][:-1],
        str(out / "simulate-as-deployed"),
        "--as-deployed",
    ]
    runs["simulate-dynamic"] = [
        "simulate", "--dynamic", "--stack", "example-prod", "--pods", str(pods), "--time-scale", "0.01",
        "--out", str(out / "simulate-dynamic"), "--json", str(out / "simulate-dynamic.json"),
    ]  # fmt: skip
    runs["bad-stack"] = ["plan", "--stack", "nosuch"]
    return runs


def run_all(tree: Path, out: Path, pods: Path, nodes: Path, shared: Path) -> None:
    """Every run at one revision: its exit code, stdout and stderr beside the files it wrote."""
    out.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(tree), "GPUFLEET_SHARED": str(shared), "COLUMNS": "160"}
    for name, args in _commands(pods, nodes, out).items():
        done = subprocess.run(
            [sys.executable, "-m", "invoke", *args],
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        text = f"exit {done.returncode}\n--- stdout\n{done.stdout}--- stderr\n{done.stderr}"
        (out / f"{name}.log").write_text(text.replace(str(out), "OUT").replace(str(tree), "TREE"))
        print(f"  {name}: exit {done.returncode}", flush=True)


def _same(a: Path, b: Path) -> bool:
    if filecmp.cmp(a, b, shallow=False):
        return True
    if a.suffix in (".png",):
        return False
    try:
        return TIMING.sub("T", a.read_text()) == TIMING.sub("T", b.read_text())
    except UnicodeDecodeError:
        return False


def compare(a: Path, b: Path) -> list[str]:
    """Paths (relative) that differ or exist on one side only."""
    left = {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    right = {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    differ = [f"only in {'base' if p in left else 'head'}: {p}" for p in sorted(left ^ right)]
    differ += [f"differs: {p}" for p in sorted(left & right) if not _same(a / p, b / p)]
    return differ


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="git revision to compare against")
    parser.add_argument("head", nargs="?", default="", help="git revision (default: the working tree)")
    parser.add_argument("--rows", type=int, default=400, help="pods of the trace to replay (default 400)")
    parser.add_argument("--keep", default="", help="keep both output folders here")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from benchmarks.reference_data import ensure

    shared = ensure()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        pods = _trace(shared, work, args.rows)
        nodes = shared / "traces/alibaba-gpu-v2023/openb_node_list_gpu_node.csv"
        trees = {}
        for side, rev in (("base", args.base), ("head", args.head)):
            if rev:
                tree = work / f"tree-{side}"
                subprocess.run(["git", "worktree", "add", "--detach", str(tree), rev], cwd=ROOT, check=True,
                               capture_output=True)  # fmt: skip
            else:
                tree = ROOT
            trees[side] = tree
            print(f"{side}: {rev or 'working tree'}", flush=True)
            run_all(tree, work / side, pods, nodes, shared)
        for tree in trees.values():
            if tree != ROOT:
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=True)
        differ = compare(work / "base", work / "head")
    for line in differ:
        print(line)
    print("identical" if not differ else f"{len(differ)} outputs differ")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
