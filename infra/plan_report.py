"""Shows a Plan: rich tables on the terminal, and the same numbers as plan.json and plan.md."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from infra.errors import on_stop, writing
from infra.plan import Plan, build_plan
from infra.slurm.plan import HEAD as SLURM_HEAD
from infra.slurm.plan import TITLE as SLURM_TITLE
from infra.slurm.plan import print_accounts, slurm_rows
from infra.spec import ClusterSpec
from infra.tables import print_table


def _usd(value: float | None) -> str:
    return "-" if value is None else f"${value:,.2f}"


def _pool_rows(plan: Plan) -> tuple[list[str], list[list[str]]]:
    aws = plan.platform == "aws"
    head = [
        "pool",
        "instance" if aws else "hosts",
        "GPU",
        "GPUs/node",
        "nodes",
        "GPUs",
        "capacity",
        "sharing",
    ]
    if aws:
        head += ["vCPUs@max", "$/month min", "$/month max"]
    rows = []
    for p in plan.pools:
        row = [
            p.name,
            (p.instance_type or "") if aws else str(len(p.hosts)),
            p.gpu_model,
            str(p.gpus_per_node),
            f"{p.min_nodes}-{p.max_nodes}",
            f"{p.min_gpus}-{p.max_gpus}",
            p.capacity_type,
            p.sharing,
        ]
        if aws:
            row += [str(p.vcpus_at_max), _usd(p.monthly_cost_min), _usd(p.monthly_cost_max)]
        rows.append(row)
    if plan.system_pool:
        s = plan.system_pool
        rows.append(
            [
                "(system)",
                s["instance_type"],
                "-",
                "0",
                f"{s['min_nodes']}-{s['max_nodes']}",
                "0",
                "ON_DEMAND",
                "-",
                str(s["vcpus_at_max"]),
                _usd(s["monthly_cost_min"]),
                _usd(s["monthly_cost_max"]),
            ]
        )
    return head, rows


def _team_rows(plan: Plan) -> tuple[list[str], list[list[str]]]:
    pools = [p.name for p in plan.pools]
    slurm = plan.orchestrator == "slurm"  # a team is an account there, with no namespace
    head = ["team", *([] if slurm else ["namespace"]), "priority", *pools, "borrow", "lend"]
    rows = [
        [t["name"], *([] if slurm else [t["namespace"]]), t["priority"]]
        + [str(t["quotas"].get(p, 0)) for p in pools]
        + [str(t["borrowing_limit"] if t["borrowing_limit"] is not None else "any")]
        + [str(t["lending_limit"] if t["lending_limit"] is not None else "all")]
        for t in plan.teams
    ]
    return head, rows


def _quota_rows(plan: Plan) -> tuple[list[str], list[list[str]]]:
    return ["quota code", "quota", "vCPUs needed at max"], [
        [q["code"], q["name"], str(q["vcpus_at_max"])] for q in plan.quotas
    ]


def _karpenter_rows(plan: Plan) -> tuple[list[str], list[list[str]]]:
    head = [
        "NodePool",
        "instance types",
        "capacity",
        "zones",
        "limits",
        "disruption",
        "$/month",
        "$/month at max",
    ]
    rows = []
    for k in plan.karpenter:
        limits = k["limits"]
        low, high = k["monthly_cost_max_low"], k["monthly_cost_max_high"]
        rows.append(
            [
                k["pool"],
                ", ".join(k["instance_types"]),
                ", ".join(k["capacity_types"]),
                ", ".join(k["zones"]),
                f"{limits['nvidia.com/gpu']} GPUs, {limits['cpu']} vCPUs, {limits['memory']}",
                f"{k['workload']}: {k['consolidation']}; drain {k['termination_grace_period']}",
                _usd(k["monthly_cost_min"]),
                _usd(low) if low == high else f"{_usd(low)}-{_usd(high)}",
            ]
        )
    return head, rows


def _title(plan: Plan) -> str:
    if plan.orchestrator == "slurm":
        hosts = sum(len(p.hosts) for p in plan.pools)
        return (
            f"Plan for stack {plan.stack!r}: cluster {plan.cluster} (Slurm {plan.slurm_version} on {hosts} existing "
            "hosts; GPU placement select/cons_tres)"
        )
    where = f"aws {plan.region}" if plan.platform == "aws" else "existing cluster"
    experimental = " (experimental)" if (plan.placement_verdict or {}).get("experimental") else ""
    placed = f"; GPU placement {plan.placement}{experimental}" if plan.placement else ""
    return (
        f"Plan for stack {plan.stack!r}: cluster {plan.cluster} ({where}, Kubernetes {plan.kubernetes_version}"
        f"{placed})"
    )


def _totals(plan: Plan) -> str:
    t = plan.totals
    text = f"GPUs: {t['min_gpus']} at minimum, {t['max_gpus']} at maximum"
    if t["monthly_cost_min"] is not None:
        text += f"; monthly cost {_usd(t['monthly_cost_min'])} at minimum, {_usd(t['monthly_cost_max'])} at maximum"
    return text


def _sections(plan: Plan) -> list[tuple[str, tuple[list[str], list[list[str]]]]]:
    sections = [("Node pools", _pool_rows(plan))]
    if plan.karpenter:
        sections.append(("Karpenter NodePools (limits and cost range)", _karpenter_rows(plan)))
    if plan.quotas:
        sections.append(("vCPU quotas at maximum size", _quota_rows(plan)))
    if plan.teams:
        sections.append(("Teams (GPU quotas per pool)", _team_rows(plan)))
    if plan.slurm:
        sections.append((SLURM_TITLE, (SLURM_HEAD, slurm_rows(plan.slurm))))
    return sections


def print_plan(plan: Plan, console: Console) -> None:
    """The plan's tables, never cutting a value (`infra.tables.print_table`): a table whose longest words do
    not fit side by side in the terminal is printed as one record per row instead (field, value), as
    `kubectl describe` does, rather than with Rich's ellipses (which at 80 columns show `$2,…`, and two pools
    as `a10g-s…`)."""
    console.print(f"[bold]{_title(plan)}[/bold]")
    for title, (head, rows) in _sections(plan):
        if title == SLURM_TITLE:
            print_accounts(plan.slurm, console)
        else:
            print_table(console, title, head, rows)
    console.print(_totals(plan))
    for note in plan.notes:
        console.print(f"[dim]{note}[/dim]")


def to_markdown(plan: Plan) -> str:
    lines = [f"# {_title(plan)}", ""]
    for title, (head, rows) in _sections(plan):
        lines += [f"## {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        lines.append("")
    lines += [_totals(plan), ""] + [f"- {n}" for n in plan.notes]
    return "\n".join(lines) + "\n"


def write_plan(plan: Plan, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / "plan.json", out_dir / "plan.md"
    json_path.write_text(json.dumps(plan.to_json(), indent=2) + "\n")
    md_path.write_text(to_markdown(plan))
    return [json_path, md_path]


def report_plan(spec: ClusterSpec, folder: Path, console: Console) -> None:
    """`invoke plan`: the plan on the terminal (on a Slurm stack with its accounts, limits and partitions),
    written as plan.json and plan.md in `folder`."""
    the_plan = build_plan(spec)
    print_plan(the_plan, console)
    with writing(folder), on_stop(f"{folder} may hold part of plan.json and plan.md: run the command again"):
        for path in write_plan(the_plan, folder):
            print(f"wrote {path}")
