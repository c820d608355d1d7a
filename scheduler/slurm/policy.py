"""What a team's GPU policy becomes in Slurm: per team and pool a guaranteed limit and a borrowing allowance.

The numbers are Kueue's: `gpu_units` turns GPUs of the spec into the pool's own units (whole GPUs, time-slicing
replicas as Slurm `shard`s, MIG instances), exactly as `scheduler.kueue` sizes `nominalQuota` and
`borrowingLimit`. Slurm enforces them as `GrpTRES` (sacctmgr(1), "GrpTRES"; resource_limits.html): the
guaranteed limit on the team's account association, the borrowing allowance on a QOS of the team's own that
is preemptible (requeued) by owners' jobs.

Borrowed jobs run under an account of their own, `<team>-borrow`, a sibling of the team's account, not under
the team's account. slurmctld adds every running job's TRES to the usage of each association from the job's up
to the root, whatever its QOS (SchedMD/slurm@slurm-22-05-8-1 src/slurmctld/acct_policy.c, `_adjust_limit_usage`
from `acct_policy_job_begin`: `grp_used_tres[i] += ...` for each association up the tree), and it checks those
limits before it looks for jobs to preempt (src/slurmctld/node_scheduler.c, `select_nodes`:
`acct_policy_job_runnable_post_select` fails with ESLURM_ACCOUNTING_POLICY before `_preempt_jobs` runs). A
borrowed job under the team's own account would therefore count against the guarantee, and a team that borrowed
first could not start its guaranteed job, nor preempt its own borrowed work to do so. Under a sibling account the borrowed GPUs count only against the borrow QOS.

Limits count a typed GRES only for jobs that name the type (slurm.conf(5) AccountingStorageTRES: with
`gres/gpu` also tracked, `gres/gpu:<type>` "will track only jobs that explicitly request" the type). So every
limit on GPUs also carries the untyped `gres/gpu`, the sum of the team's typed GPU limits, which counts every
GPU request (`--gpus=N`, `--gres=gpu:N`, `--gpus-per-node=N`), and the job_submit script
(`scheduler.slurm.jobsubmit`) names the partition's type in untyped requests so that they count per pool too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from scheduler.model import PoolView, SchedulingPolicy
from scheduler.resources import gpu_units

BORROW_SUFFIX = "-borrow"
GPU_TRES = "gres/gpu"  # every GPU a job holds, of any type (slurm.conf(5) AccountingStorageTRES)
SHARD_TRES = "gres/shard"
# sacctmgr(1) Fairshare is an integer; team weights are floats in (0, 1000]: two decimals carried over.
FAIRSHARE_SCALE = 100


@dataclass(frozen=True)
class PartitionOptions:
    max_time: str = "UNLIMITED"
    default: bool = False
    default_time: str | None = None  # DefaultTime: a job's time limit when it names none (None: MaxTime)


@dataclass(frozen=True)
class SlurmSite:
    """What Slurm needs beyond the pools and teams: the cluster's name, controller(s), accounting host, and
    per-partition options (by pool name).

    `node_addresses` (host -> address) and `node_ports` (host -> slurmd port) are for hosts whose name does not
    resolve, or for several slurmd on one host (slurm.conf(5) NodeAddr, Port; a Slurm built with
    --enable-multiple-slurmd, as Debian's is): each such host gets a `NodeName` line of its own. Empty: one
    line per pool, the names resolved by DNS.

    `memory_margin_percent`: a host's RealMemory is the pool's `memoryGiBPerNode` less this share. The kernel and
    firmware keep part of a host's memory, so a host reports less than its nominal size, and slurmctld drains
    a node that reports less than RealMemory ("Low RealMemory": SchedMD/slurm@slurm-22-05-8-1
    src/slurmctld/node_mgr.c, `validate_node_specs`)."""

    cluster_name: str
    controller_hosts: tuple[str, ...]
    accounting_host: str
    hosts: dict[str, tuple[str, ...]]  # pool name -> its hosts (the partition's nodes)
    partitions: dict[str, PartitionOptions] = field(default_factory=dict)
    node_addresses: dict[str, str] = field(default_factory=dict)
    node_ports: dict[str, int] = field(default_factory=dict)
    memory_margin_percent: int = 5
    state_save_location: str = "/var/spool/slurmctld"  # slurmctld's state (shared by a backup controller)
    # slurm.conf(5) PrivateData: what users see only of their own (jobs, usage, ...); operators see everything
    private_data: tuple[str, ...] = ("jobs", "usage")
    version: str = "22.05"  # the Slurm release of the hosts, major.minor (`slurm_version`)
    preempt_grace_seconds: int = 0  # the borrow QOS's GraceTime (honoured for requeue from 23.11)
    # seconds between runs of gpufleet-healthcheck (slurm.conf HealthCheckInterval); 0: no health check
    health_check_interval: int = 300


@dataclass(frozen=True)
class TeamLimit:
    """One team in one pool, in the pool's GRES units."""

    team: str
    pool: str
    tres: str  # e.g. gres/gpu:h100, gres/shard
    guaranteed: int  # the account association's GrpTRES (Kueue nominalQuota)
    borrowable: int  # the team's borrow QOS GrpTRES (Kueue borrowingLimit; unlimited: the rest of the pool)


def gres_type(pool: PoolView) -> str:
    """The GRES type of a pool's GPUs: the MIG profile (NVML names a MIG device after its profile), else the
    GPU model in lower case. gres.conf(5) Type: with AutoDetect the Type "should match or be a substring of
    the value that is detected" (NVML's device name, lower case, underscores for spaces, e.g.
    nvidia_h100_80gb_hbm3), so the model name, not a pool name."""
    return pool.mig_profile if pool.sharing == "mig" and pool.mig_profile else pool.gpu_model.lower()


def tres_name(pool: PoolView) -> str:
    """The TRES a team's limit in this pool is counted in. Time-sliced GPUs are Slurm `shard`s (gres.html,
    "Sharding", new in 22.05), untyped; whole GPUs and MIG instances are typed `gpu` GRES."""
    if pool.sharing == "timeSlicing":
        return SHARD_TRES
    return f"{GPU_TRES}:{gres_type(pool)}"


def slurm_version(version: str) -> tuple[int, int]:
    """ "22.05" -> (22, 5): Slurm's release numbers compare as (year, month)."""
    year, month = version.split(".")
    return int(year), int(month)


def borrow_qos(team: str) -> str:
    """The QOS of a team's borrowed work: its GrpTRES the borrowing allowance, preemptible by requeue."""
    return team + BORROW_SUFFIX


def borrow_account(team: str) -> str:
    """The account a team's borrowed jobs run under (`sbatch --account=vision-borrow`): a sibling of the team's
    account, so borrowed GPUs never count against the team's guarantee; its only QOS is the borrow QOS."""
    return team + BORROW_SUFFIX


def owner_qos(policy: SchedulingPolicy) -> list[str]:
    """The QOS of work within a team's guarantee: one per workload priority class, named after it (a job names
    its class with `--qos=CLASS`; a team's `priority` is its accounts' DefaultQOS)."""
    return [pc.name for pc in policy.priority_classes]


def fairshare(weight: float) -> int:
    """sacctmgr(1) `Fairshare=` from a team's fair-sharing weight (the Kueue Cohort's `fairSharing.weight`)."""
    return max(1, round(weight * FAIRSHARE_SCALE))


def team_limits(policy: SchedulingPolicy, pools: Sequence[PoolView]) -> list[TeamLimit]:
    """Every team's guaranteed and borrowable units per pool, as `scheduler.kueue._team_flavor` sizes them."""
    out = []
    for team in policy.teams:
        for pool in pools:
            quota = team.quotas.get(pool.name, 0)
            borrow = team.borrowing_limit if team.borrowing_limit is not None else pool.max_gpus - quota
            out.append(
                TeamLimit(
                    team=team.name,
                    pool=pool.name,
                    tres=tres_name(pool),
                    guaranteed=gpu_units(pool, quota),
                    borrowable=gpu_units(pool, max(0, borrow)),
                )
            )
    return out


def tres_list(limits: Sequence[TeamLimit], attr: str) -> str:
    """`gres/gpu=16,gres/gpu:h100=16,gres/shard=8`: one team's limits as a GrpTRES value. `gres/gpu`, untyped, is
    the sum of the typed GPU limits: it counts the GPUs of every job, also of those that name no type."""
    gpus = [lim for lim in limits if lim.tres.startswith(GPU_TRES + ":")]
    total = [f"{GPU_TRES}={sum(getattr(lim, attr) for lim in gpus)}"] if gpus else []
    return ",".join([*total, *(f"{lim.tres}={getattr(lim, attr)}" for lim in limits)])
