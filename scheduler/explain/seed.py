"""The live state a team member may read, turned into the dynamic simulator's input: the pools' nodes, the
queues as compiled (ClusterQueues, kueue.x-k8s.io/v1beta2), the work admitted now with what is known of its
remaining time, and the waiting work in Kueue's order.

What the member cannot read is modelled from what they can, and said: nodes (a team role may not list them)
become the cohort's quota per pool on nodes of NODE_GPUS; another team's admitted work is seen only as its
ClusterQueue's `status.flavorsUsage` and `status.reservingWorkloads` (their Workloads are not readable, nor
Kueue's visibility API of their ClusterQueue: a team role may read its own LocalQueues' pending workloads
only), so it becomes that many jobs sharing the GPUs evenly (no block over NODE_GPUS), each caught partway through
a run drawn like any unknown one (its remaining time the residual life, `durations.residual`); their waiting work is only a count (`status.pendingWorkloads`), so
it becomes that many jobs the size of the team's usual pod, ahead of the team's.

Work not yet submitted is modelled too (`streams`): the team's own submissions over a recent window (its Jobs'
creationTimestamps, their pods x GPUs, priority classes and hints) give a Poisson rate and the shapes a later
job is drawn from. Another team's submissions cannot be read, so its rate comes from what its ClusterQueue
shows by Little's law: the jobs holding its quota now over the team's mean run is the rate at which it
finishes jobs, which over time is the rate it is given them; it submits jobs of the team's own shapes (their
sizes are not readable), and a queue holding no quota, nothing (its waiting jobs are seeded as they are). A
rate seen over the last T seconds is taken to hold for the next T, no longer: the estimate does not
extrapolate a burst into a day of submissions that would starve a large job forever.

Where the caller may list every namespace's Workloads (the platform team's kubeconfig), nothing of the above is
guessed: the same code reads each other team as it reads the asking one (`as_team`): its admitted Workloads
with their pods, GPUs, pools, priorities and remaining times, its waiting ones in Kueue's order among all, its
later submissions from its own Jobs' creation times, and, with the nodes, each admitted job's pods on the nodes
they are bound to (`Entry.nodes`), so a gang that needs whole free nodes sees the real fragmentation. A
`Forbidden` on that list leaves the team's view above; the answer says which view it used.

Everything counts in Kueue's units of each pool's GPU resource (a time-sliced pool's shares are its units), so
a pool here has one unit per "GPU" and a pod takes its request of the flavor's resource.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from scheduler.explain.durations import CAUGHT, HISTORY, Remaining, finished_jobs, parse_time, remaining_of
from scheduler.explain.order import condition, is_true, kueue_order, priority
from scheduler.explain.quota import root_cohort
from scheduler.explain.reasons import GPU_PREFIX
from scheduler.sim.dynamic.model import Queue, Settings

NODE_GPUS = 8  # the GPUs of a node when nodes cannot be read (the common 8-GPU server)
SUBMISSION_WINDOW_S = 3600.0  # the team's submissions a rate is learnt from: those of the last hour,
SUBMISSIONS = 20  # at most the last this many of them,
MIN_SUBMISSIONS = 3  # and at least this many (fewer: no later arrivals are modelled, and the answer says so)
OTHERS = "other"  # another team's entries: `other/<queue>/<n>` modelled, `other/<namespace>/<workload>` read


@dataclass(frozen=True)
class Everyone:
    """Every namespace's Workloads, Jobs, LocalQueues and pods: what the full view reads, where the caller may."""

    local_queues: Mapping[str, Mapping[str, str]]  # namespace -> LocalQueue -> ClusterQueue
    workloads: Sequence[Mapping[str, Any]]
    jobs: Sequence[Mapping[str, Any]]
    pods: Sequence[Mapping[str, Any]]  # where admitted jobs' pods are bound (`spec.nodeName`)


@dataclass(frozen=True)
class Live:
    """What the caller read, as the API server returned it; `nodes` None when their role may not list them,
    `everyone` None when they may not list every namespace's Workloads (a team member)."""

    namespace: str
    local_queues: Mapping[str, str]  # LocalQueue -> ClusterQueue
    cluster_queues: Sequence[Mapping[str, Any]]
    cohort_parents: Mapping[str, str]
    flavors: Sequence[Mapping[str, Any]]  # ResourceFlavors
    nodes: Sequence[Mapping[str, Any]] | None
    workloads: Sequence[Mapping[str, Any]]  # the team's
    jobs: Sequence[Mapping[str, Any]]  # the team's batch Jobs (hints, deadlines, history)
    priority_classes: Mapping[str, int]  # WorkloadPriorityClass -> value
    now: datetime
    everyone: Everyone | None = None


@dataclass(frozen=True)
class Entry:
    """One job as the simulator sees it: its queue, the pools it may use, pods x units, priority, and whether
    it holds quota now (`pool` set) or waits."""

    name: str
    queue: str
    pools: tuple[str, ...]
    pods: int
    units: int  # per pod
    priority: int
    remaining: Remaining
    pool: str = ""  # admitted there; "" while it waits
    # the nodes its pods are bound to, one a pod, where read (else the simulator places them)
    nodes: tuple[str, ...] = ()

    @property
    def gpus(self) -> int:
        return self.pods * self.units


@dataclass(frozen=True)
class Seed:
    """The simulator's input before the unknown times are drawn: pools as node sizes in units, queues,
    entries (admitted first, then waiting in Kueue's order), and what the seeding assumed."""

    pools: dict[str, tuple[int, ...]]
    queues: tuple[Queue, ...]
    entries: tuple[Entry, ...]
    settings: Settings
    assumed: tuple[str, ...] = ()
    unseen: tuple[str, ...] = field(default=())
    streams: tuple[Stream, ...] = ()  # later arrivals; () when the team's recent submissions are too few
    node_names: dict[str, tuple[str, ...]] = field(default_factory=dict)  # each pool's nodes, where read

    def index(self, name: str) -> int:
        return next(i for i, e in enumerate(self.entries) if e.name == name)


@dataclass(frozen=True)
class Shape:
    """A job a stream may submit: its queue, pools, pods x units, priority and what is known of its run."""

    queue: str
    pools: tuple[str, ...]
    pods: int
    units: int
    priority: int
    remaining: Remaining


@dataclass(frozen=True)
class Stream:
    """Later submissions to one ClusterQueue: Poisson at `rate_per_s` for the next `horizon_s`, each job one
    of `shapes` at random."""

    name: str
    rate_per_s: float
    shapes: tuple[Shape, ...]
    horizon_s: float


class SeedError(ValueError):
    """The state (or a manifest) cannot be modelled; the message names what and what is accepted."""


def _gpu_quotas(cluster_queue: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(flavor, resource quota) of every GPU resource of a ClusterQueue, in its flavor order."""
    for group in cluster_queue.get("spec", {}).get("resourceGroups", []) or []:
        for flavor in group.get("flavors", []) or []:
            for res in flavor.get("resources", []) or []:
                if str(res["name"]).startswith(GPU_PREFIX):
                    yield str(flavor["name"]), res


def _units(value: Any) -> int:
    return int(float(str(value)))


def pool_resources(cluster_queues: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """flavor -> the GPU resource its nodes serve: a flavor lists every GPU resource of its group (the compiled
    queues give the others a quota of 0), so it is the one with the most quota over the cohort (the first on
    a tie)."""
    totals: dict[str, dict[str, int]] = {}
    for q in cluster_queues:
        for flavor, res in _gpu_quotas(q):
            per = totals.setdefault(flavor, {})
            per[str(res["name"])] = per.get(str(res["name"]), 0) + _units(res.get("nominalQuota", 0))
    return {f: max(per, key=lambda r: (per[r], -list(per).index(r))) for f, per in totals.items()}


def sim_queue(cluster_queue: Mapping[str, Any], resources: Mapping[str, str]) -> Queue:
    """A ClusterQueue's quota of each flavor's GPU resource (a flavor is a pool), in its flavor order."""
    nominal: dict[str, int] = {}
    borrowing: dict[str, int | None] = {}
    lending: dict[str, int | None] = {}
    for flavor, res in _gpu_quotas(cluster_queue):
        if resources.get(flavor) == res["name"]:
            nominal[flavor] = _units(res.get("nominalQuota", 0))
            borrowing[flavor] = None if res.get("borrowingLimit") is None else _units(res["borrowingLimit"])
            lending[flavor] = None if res.get("lendingLimit") is None else _units(res["lendingLimit"])
    return Queue(str(cluster_queue["metadata"]["name"]), tuple(nominal), nominal, borrowing, lending)


def settings_of(cluster_queue: Mapping[str, Any]) -> Settings:
    """The team's ClusterQueue's queueing and preemption (Kueue v0.19.2 apis/kueue/v1beta2/
    clusterqueue_types.go: `queueingStrategy`, `preemption`); nodes are the ones there now (no autoscaling)."""
    spec = cluster_queue.get("spec", {})
    preemption = spec.get("preemption", {}) or {}
    borrow = preemption.get("borrowWithinCohort", {}) or {}
    threshold = borrow.get("maxPriorityThreshold") if borrow.get("policy") == "LowerPriority" else None
    return Settings(
        autoscale=False,
        strict_fifo=spec.get("queueingStrategy") == "StrictFIFO",
        reclaim_within_cohort=preemption.get("reclaimWithinCohort", "Never") != "Never",
        preempt_lower_priority=preemption.get("withinClusterQueue", "Never") != "Never",
        borrow_within_cohort_max_priority=None if threshold is None else int(threshold),
        pods_ready_timeout_s=None,
    )


def node_names(live: Live, resources: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """Each pool's nodes by name, in the order `pool_nodes` gives their units; empty when nodes were not read."""
    if live.nodes is None:
        return {}
    out: dict[str, list[str]] = {f: [] for f in resources}
    for flavor, node in _pool_members(live, resources):
        out[flavor].append(str(node["metadata"]["name"]))
    return {f: tuple(n) for f, n in out.items()}


def _pool_members(live: Live, resources: Mapping[str, str]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(flavor, node) of every schedulable node serving a flavor's GPU resource, the nodes by name."""
    labels = {
        str(f["metadata"]["name"]): dict(f.get("spec", {}).get("nodeLabels") or {}) for f in live.flavors
    }
    for node in sorted(live.nodes or (), key=lambda n: str(n["metadata"]["name"])):
        if node.get("spec", {}).get("unschedulable"):
            continue
        have = node["metadata"].get("labels") or {}
        for flavor, res in resources.items():
            want = labels.get(flavor)
            units = int(float(str((node.get("status", {}).get("allocatable") or {}).get(res, 0))))
            if want and all(have.get(k) == v for k, v in want.items()) and units:
                yield flavor, node


def pool_nodes(
    live: Live, cohort_queues: Sequence[Mapping[str, Any]], resources: Mapping[str, str]
) -> tuple[dict[str, tuple[int, ...]], str]:
    """Each pool's nodes as their units of the flavor's GPU resource, and what was assumed ("" when read)."""
    if live.nodes is not None:
        out: dict[str, list[int]] = {f: [] for f in resources}
        for flavor, node in _pool_members(live, resources):
            out[flavor].append(int(float(str(node["status"]["allocatable"][resources[flavor]]))))
        return {f: tuple(n) for f, n in out.items()}, ""
    pools: dict[str, tuple[int, ...]] = {}
    told = []
    for flavor in sorted(resources):
        total = sum(sim_queue(q, resources).nominal.get(flavor, 0) for q in cohort_queues)
        full, rest = divmod(total, NODE_GPUS)
        pools[flavor] = (NODE_GPUS,) * full + ((rest,) if rest else ())
        told.append(f"{flavor} {total}")
    return pools, (
        "nodes: your access may not list them, so each pool was taken as its cohort's quota on nodes of "
        f"{NODE_GPUS} ({', '.join(told)})"
    )


def _pod_units(template: Mapping[str, Any], resource: str | None = None) -> tuple[str, int]:
    """The GPU resource a pod template asks and how many units of it (its containers' requests)."""
    found: dict[str, float] = {}
    for c in template.get("spec", {}).get("containers", []) or []:
        requests = (c.get("resources", {}) or {}).get("requests") or (c.get("resources", {}) or {}).get(
            "limits"
        )
        for name, value in (requests or {}).items():
            if str(name).startswith(GPU_PREFIX):
                found[str(name)] = found.get(str(name), 0.0) + float(str(value))
    if resource is not None:
        return resource, int(found.get(resource, 0))
    name = next(iter(sorted(found)), "")
    return name, int(found.get(name, 0))


def _allowed(
    template: Mapping[str, Any], queue: Queue, resources: Mapping[str, str], resource: str
) -> tuple[str, ...]:
    """The pools a pod template may use: its `gpufleet.io/pool` node selector, else every flavor of its queue
    that serves its GPU resource."""
    pool = (template.get("spec", {}).get("nodeSelector") or {}).get("gpufleet.io/pool")
    flavors = tuple(f for f in queue.flavors if resources.get(f) == resource)
    return tuple(f for f in flavors if f == pool) if pool else flavors


def _owner(workload: Mapping[str, Any], jobs: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    uids = {r.get("uid") for r in workload["metadata"].get("ownerReferences", []) or []}
    return next((j for j in jobs if j["metadata"].get("uid") in uids), None)


def workload_entry(
    workload: Mapping[str, Any], live: Live, queues: Mapping[str, Queue], resources: Mapping[str, str]
) -> Entry | None:
    """A team Workload as an Entry (None: it asks no GPUs, or its queue is not the team's)."""
    cq = live.local_queues.get(str(workload.get("spec", {}).get("queueName", "")))
    if cq is None or cq not in queues:
        return None
    podsets = workload.get("spec", {}).get("podSets", []) or []
    if not podsets:
        return None
    podset = podsets[0]
    resource, units = _pod_units(podset.get("template", {}))
    if not units:
        return None
    if not any(resources.get(f) == resource for f in queues[cq].flavors):  # a CPU queue's, say
        return None
    name = str(workload["metadata"]["name"])
    pods = int(podset.get("count", 1))
    job = _owner(workload, live.jobs)
    if is_true(workload, "QuotaReserved"):
        assignment = (workload.get("status", {}).get("admission", {}) or {}).get("podSetAssignments") or [{}]
        pool = str((assignment[0].get("flavors") or {}).get(resource, ""))
        since = condition(workload, "Admitted") or condition(workload, "QuotaReserved") or {}
        stamp = since.get("lastTransitionTime")
        elapsed = (live.now - parse_time(str(stamp))).total_seconds() if stamp else 0.0
        return Entry(name, cq, (pool,), pods, units, priority(workload), remaining_of(job, max(elapsed, 0.0)),
                     pool, bound(job, live, pods))  # fmt: skip
    allowed = _allowed(podset.get("template", {}), queues[cq], resources, resource)
    return Entry(name, cq, allowed, pods, units, priority(workload), remaining_of(job, 0.0))


def bound(job: Mapping[str, Any] | None, live: Live, pods: int) -> tuple[str, ...]:
    """The nodes a Job's running pods are bound to (`spec.nodeName`), one a pod, where every pod of it is
    bound and pods were read (the full view); () otherwise, and the simulator places it."""
    if job is None or live.everyone is None or live.nodes is None:
        return ()
    uid = job["metadata"].get("uid")
    nodes = sorted(str(p["spec"]["nodeName"]) for p in live.everyone.pods
                   if (p.get("spec") or {}).get("nodeName")
                   and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
                   and any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences", []) or []))  # fmt: skip
    return tuple(nodes) if len(nodes) == pods else ()


def as_team(live: Live, namespace: str) -> Live:
    """What a member of `namespace` would read of their own team, from the full view: the asking team's reading
    of another, so each is seeded by the same code."""
    every = live.everyone
    if every is None:
        return live
    return replace(live, namespace=namespace, local_queues=dict(every.local_queues.get(namespace, {})),
                   workloads=[w for w in every.workloads if w["metadata"].get("namespace") == namespace],
                   jobs=[j for j in every.jobs if j["metadata"].get("namespace") == namespace])  # fmt: skip


def other_teams(live: Live, cohort: Sequence[Mapping[str, Any]]) -> list[Live]:
    """Every other namespace with a LocalQueue of a ClusterQueue of the cohort, as its members read it (full
    view only; [] in the team's view)."""
    if live.everyone is None:
        return []
    names = {str(q["metadata"]["name"]) for q in cohort}
    return [as_team(live, ns) for ns, lqs in sorted(live.everyone.local_queues.items())
            if ns != live.namespace and names & set(lqs.values())]  # fmt: skip


def holding(queue: Mapping[str, Any]) -> int:
    """The Workloads holding a ClusterQueue's quota now (`status.reservingWorkloads`, at least its
    `admittedWorkloads`): the number of jobs behind its usage."""
    status = queue.get("status", {}) or {}
    return max(int(status.get("reservingWorkloads", 0) or 0), int(status.get("admittedWorkloads", 0) or 0))


def blocks(used: int, jobs: int) -> list[int]:
    """`used` GPUs as the jobs holding them: `jobs` near-equal parts (largest first), but never a part over
    NODE_GPUS nor one of no GPU; blocks of NODE_GPUS when the count is unknown (0)."""
    if not jobs:
        return [NODE_GPUS] * (used // NODE_GPUS) + ([used % NODE_GPUS] if used % NODE_GPUS else [])
    n = min(max(jobs, -(-used // NODE_GPUS)), used)
    return [used // n + (1 if i < used % n else 0) for i in range(n)] if n else []


def others_entries(queue: Mapping[str, Any], resources: Mapping[str, str], value: int) -> list[Entry]:
    """Another team's admitted work, seen as its ClusterQueue's usage per pool and the count of its Workloads
    holding quota: that many jobs sharing the usage evenly (a pool's share of the count in proportion to its
    usage), at priority `value`, each caught partway through its run (`durations.CAUGHT`)."""
    name = str(queue["metadata"]["name"])
    used = {str(flavor["name"]): int(float(str(res.get("total", 0))))
            for flavor in queue.get("status", {}).get("flavorsUsage", []) or []
            for res in flavor.get("resources", []) or [] if resources.get(str(flavor["name"])) == res["name"]}  # fmt: skip
    total = sum(used.values())
    out = []
    for flavor, units in used.items():
        share = round(holding(queue) * units / total) if total else 0
        for i, part in enumerate(blocks(units, share)):
            out.append(Entry(f"{OTHERS}/{name}/{flavor}/{i}", name, (flavor,), 1, part, value,
                             Remaining(None, CAUGHT), flavor))  # fmt: skip
    return out


def typical_units(live: Live) -> int:
    """The GPUs of the team's usual pod (the median over its Jobs), NODE_GPUS // 2 when it has none."""
    sizes = sorted(_pod_units(j.get("spec", {}).get("template", {}) or {})[1] for j in live.jobs)
    sizes = [n for n in sizes if n]
    return sizes[len(sizes) // 2] if sizes else NODE_GPUS // 2


def others_waiting(
    queue: Queue, count: int, units: int, value: int, using: tuple[str, ...] = ()
) -> list[Entry]:
    """Another team's waiting jobs, known only by their number (its ClusterQueue's `status.pendingWorkloads`):
    that many one-pod jobs of `units` GPUs in the pools its running work `using` (else where it has quota),
    waiting ahead of the team's."""
    pools = using or tuple(f for f in queue.flavors if queue.nominal.get(f, 0) > 0) or queue.flavors
    return [Entry(f"{OTHERS}/{queue.name}/waiting/{i}", queue.name, pools, 1, units, value, Remaining(None, "others"))
            for i in range(count)]  # fmt: skip


def submitted(live: Live) -> list[tuple[float, Mapping[str, Any]]]:
    """The team's Jobs created in the last SUBMISSION_WINDOW_S, at most the last SUBMISSIONS of them, as
    (seconds ago, Job), oldest first."""
    out = []
    for j in live.jobs:
        stamp = (j.get("metadata") or {}).get("creationTimestamp")
        if stamp:
            ago = (live.now - parse_time(str(stamp))).total_seconds()
            if 0.0 <= ago <= SUBMISSION_WINDOW_S:
                out.append((ago, j))
    return sorted(out, key=lambda a: -a[0])[-SUBMISSIONS:]


def rate_of(ages: Sequence[float]) -> float:
    """Submissions per second from their ages (seconds ago, any order): the n - 1 that followed the oldest over
    the time since it (the oldest opens the window, so it is not counted); 0 below MIN_SUBMISSIONS."""
    if len(ages) < MIN_SUBMISSIONS or max(ages) <= 0:
        return 0.0
    return (len(ages) - 1) / max(ages)


def mean_run(live: Live) -> float | None:
    """The team's mean run, the time a job holds quota: over its last HISTORY finished Jobs, else over the
    runs its Jobs announce (hint, else deadline); None with neither."""
    done = [f.seconds for f in finished_jobs(live.jobs)][-HISTORY:]
    if not done:
        for j in live.jobs:
            try:
                known = remaining_of(j, 0.0).known
            except ValueError:  # a bad hint says nothing of how long jobs run
                continue
            if known is not None:
                done.append(known)
    return sum(done) / len(done) if done and sum(done) > 0 else None


def shape_of(
    job: Mapping[str, Any], live: Live, queues: Mapping[str, Queue], resources: Mapping[str, str]
) -> Shape | None:
    """A submitted Job as the shape of a later one (None: it asks no GPUs, or of no queue of the team's)."""
    labels = (job.get("metadata") or {}).get("labels") or {}
    cq = live.local_queues.get(str(labels.get("kueue.x-k8s.io/queue-name", "default")))
    if cq is None or cq not in queues:
        return None
    spec = job.get("spec", {}) or {}
    template = spec.get("template", {}) or {}
    resource, units = _pod_units(template)
    pools = _allowed(template, queues[cq], resources, resource) if units else ()
    if not pools:
        return None
    value = int(live.priority_classes.get(str(labels.get("kueue.x-k8s.io/priority-class")), 0))
    try:
        remaining = remaining_of(job, 0.0)
    except ValueError:  # a bad hint on a past job says nothing of later ones
        remaining = Remaining(None, "history")
    return Shape(cq, pools, int(spec.get("parallelism") or 1), units, value, remaining)


def team_stream(live: Live, queues: Mapping[str, Queue], resources: Mapping[str, str]) -> Stream | None:
    """A team's later submissions, learnt from its Jobs created recently (`submitted`): None when they are too
    few or ask no GPUs of its queues."""
    recent = submitted(live)
    shapes = tuple(s for _, j in recent if (s := shape_of(j, live, queues, resources)) is not None)
    rate = rate_of([a for a, _ in recent])
    if not shapes or rate <= 0.0:
        return None
    span = max(a for a, _ in recent)  # the rate is taken to hold as long again as it has been seen
    return Stream(live.namespace, rate, shapes, span)


def streams_of(
    live: Live,
    queues: Mapping[str, Queue],
    resources: Mapping[str, str],
    own: set[str],
    cohort: Sequence[Mapping[str, Any]],
) -> tuple[tuple[Stream, ...], str]:
    """Later submissions (the module docstring says how they are modelled), and the sentence that says so."""
    recent = submitted(live)
    mine = team_stream(live, queues, resources)
    theirs = [
        got for t in other_teams(live, cohort) if (got := team_stream(t, queues, resources)) is not None
    ]
    read = (
        "; other teams' from their own Jobs the same way ("
        + (
            ", ".join(f"{s.name} one every {human_time(1 / s.rate_per_s)}" for s in theirs)
            or "none recent enough"
        )
        + ")"
        if live.everyone is not None
        else ""
    )
    if mine is None:
        return tuple(theirs), (
            f"later submissions: none modelled{' of your team' if read else ''} (your team submitted "
            f"{job_count(len(recent))} in the last {SUBMISSION_WINDOW_S / 60:.0f} min; {MIN_SUBMISSIONS} are "
            "needed to learn a rate)" + (read or ", so every start is as if nothing else were submitted")
        )
    rate, shapes, span = mine.rate_per_s, mine.shapes, mine.horizon_s
    said = (
        f"later submissions: your team's {job_count(len(recent))} of the last {human_time(span)} (one every "
        f"{human_time(1 / rate)}) go on for as long again, a Poisson stream of the same shapes, priorities and hints"
    )
    if live.everyone is not None:
        return (mine, *theirs), said + read
    streams = [mine]
    used = {p for s in shapes for p in s.pools}  # the pools the team's jobs use
    run = mean_run(live)
    scaled = []
    for q in cohort:
        name = str(q["metadata"]["name"])
        held = holding(q)
        if name in own or not held or run is None or not any(p in queues[name].flavors for p in used):
            continue
        shaped = []
        for s in shapes:
            pools = tuple(
                f for f in queues[name].flavors if resources.get(f) in {resources.get(p) for p in s.pools}
            )
            kept = tuple(p for p in s.pools if p in pools) or pools
            if kept:
                shaped.append(Shape(name, kept, s.pods, s.units, s.priority, s.remaining))
        if shaped:
            streams.append(Stream(name, held / run, tuple(shaped), span))
            scaled.append(f"{name} {held}")
    if scaled and run is not None:
        said += (
            f"; other teams' queues holding quota ({', '.join(scaled)} jobs) are taken to be given jobs like yours "
            f"as fast as they finish them: that many every {human_time(run)}, your team's mean run"
        )
    return tuple(streams), said


def job_count(n: int) -> str:
    """ "1 job", "3 jobs": counts in the answer's words."""
    return f"{n} job" if n == 1 else f"{n} jobs"


def human_time(seconds: float) -> str:
    """Seconds as the answer says them: "45 s", "12 min", "3.5 h"."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def cohort_of(live: Live) -> tuple[set[str], list[Mapping[str, Any]]]:
    """The team's ClusterQueues' names and every ClusterQueue sharing their cohort tree (by name)."""
    by_name = {str(q["metadata"]["name"]): q for q in live.cluster_queues}
    mine = [by_name[cq] for cq in sorted(set(live.local_queues.values())) if cq in by_name]
    if not mine:
        raise SeedError(f"namespace {live.namespace}: its LocalQueues' ClusterQueues cannot be read")
    roots = {root_cohort(q, live.cohort_parents) for q in mine} - {""}
    cohort = [q for q in live.cluster_queues if root_cohort(q, live.cohort_parents) in roots] or mine
    return {str(q["metadata"]["name"]) for q in mine}, sorted(
        cohort, key=lambda q: str(q["metadata"]["name"])
    )


def seed(live: Live, extra: Entry | None = None) -> Seed:
    """The simulator's input for the team's queues and their cohort: nodes, queues, the team's admitted and
    waiting Workloads, other teams' usage; `extra` (a manifest not yet submitted) waits last of its
    priority."""
    own, cohort = cohort_of(live)
    resources = pool_resources(cohort)
    pools, nodes_said = pool_nodes(live, cohort, resources)
    queues = {str(q["metadata"]["name"]): sim_queue(q, resources) for q in cohort}
    teams = [live, *other_teams(live, cohort)]  # the asking team alone in the team's view
    read = [(wl, e if t is live else replace(e, name=f"{OTHERS}/{t.namespace}/{e.name}"))
            for t in teams for wl in t.workloads if not is_true(wl, "Finished")
            and (e := workload_entry(wl, t, queues, resources)) is not None]  # fmt: skip
    admitted = [e for _, e in read if e.pool]
    rank = {id(w): i for i, w in enumerate(kueue_order([w for t in teams for w in t.workloads]))}
    waiting = [e for w, e in sorted(((w, e) for w, e in read if not e.pool and id(w) in rank),
                                    key=lambda we: rank[id(we[0])])]  # fmt: skip
    if extra is not None:
        waiting.append(extra)
    value = int(live.priority_classes.get("default", 0))
    assumed = [view_said(live, read)]
    assumed += [nodes_said] if nodes_said else []
    if live.everyone is not None:
        others: list[Entry] = []
        counted: dict[str, int] = {}
    else:
        others = [e for q in cohort if str(q["metadata"]["name"]) not in own
                  for e in others_entries(q, resources, value)]  # fmt: skip
        counted = {name: n for q in cohort if (name := str(q["metadata"]["name"])) not in own
                   and (n := int(q.get("status", {}).get("pendingWorkloads", 0) or 0))}  # fmt: skip
    if others:
        held: dict[str, int] = {}
        for e in others:
            held[e.queue] = held.get(e.queue, 0) + e.gpus
        assumed.append(
            "other teams' running work is seen only as their queues' use ("
            + ", ".join(f"{q} {n} GPUs" for q, n in sorted(held.items()))
            + f"), at priority {value}, each job caught partway through a run drawn as for a job without a hint"
        )
    units = typical_units(live)
    unseen_waiting = [
        e
        for name, n in sorted(counted.items())
        for e in others_waiting(
            queues[name], n, units, value, tuple(sorted({o.pool for o in others if o.queue == name}))
        )
    ]
    waiting = [*unseen_waiting, *waiting]
    unseen = [f"queue {name} has {n} waiting jobs of another team, which you may not read: taken as {n} jobs of "
              f"{units} GPUs (your team's usual pod) ahead of yours" for name, n in sorted(counted.items())]  # fmt: skip
    gpu_queues = sorted(q for q in own if queues[q].flavors)
    settings = settings_of(next(q for q in cohort if q["metadata"]["name"] == (
        extra.queue if extra else (gpu_queues or sorted(own))[0])))  # fmt: skip
    streams, streams_said = streams_of(live, queues, resources, own, cohort)
    return Seed(pools, tuple(queues.values()), tuple([*admitted, *others, *waiting]), settings,
                tuple([*assumed, streams_said]), tuple(unseen), streams, node_names(live, resources))  # fmt: skip


def view_said(live: Live, read: Sequence[tuple[Mapping[str, Any], Entry]]) -> str:
    """Which view the estimate was made from, in the answer's words."""
    if live.everyone is None:
        return "view: your team's (other teams' Workloads are not readable with your access, so they are modelled below)"
    theirs = [e for _, e in read if e.name.startswith(OTHERS + "/")]
    running = sum(1 for e in theirs if e.pool)
    placed = sum(1 for _, e in read if e.nodes)
    where = f", {job_count(placed)} on the nodes their pods are bound to" if placed else ""
    return (
        f"view: full (every team's Workloads are readable): other teams' {running} admitted and "
        f"{len(theirs) - running} waiting jobs as they are, with their priorities and hints{where}"
    )


def manifest_entry(manifest: Mapping[str, Any], live: Live) -> Entry:
    """A batch/v1 Job not yet submitted, as the Workload Kueue would make of it: its LocalQueue
    (`kueue.x-k8s.io/queue-name`, else `default`), pods (`parallelism`), GPUs per pod, priority class."""
    if manifest.get("kind") != "Job" or not str(manifest.get("apiVersion", "")).startswith("batch/"):
        raise SeedError(f"-f: kind {manifest.get('kind')!r} is not supported (accepted: a batch/v1 Job)")
    meta = manifest.get("metadata", {}) or {}
    if meta.get("namespace") and meta["namespace"] != live.namespace:
        raise SeedError(
            f"-f: metadata.namespace {meta['namespace']!r} is not the namespace asked ({live.namespace})"
        )
    labels = meta.get("labels") or {}
    lq = str(labels.get("kueue.x-k8s.io/queue-name", "default"))
    if lq not in live.local_queues:
        raise SeedError(f"-f: LocalQueue {lq!r} (label kueue.x-k8s.io/queue-name) is not in namespace "
                        f"{live.namespace} (accepted: {', '.join(sorted(live.local_queues))})")  # fmt: skip
    cq = live.local_queues[lq]
    _, cohort = cohort_of(live)
    resources = pool_resources(cohort)
    queue = next((sim_queue(q, resources) for q in cohort if q["metadata"]["name"] == cq), None)
    if queue is None:
        raise SeedError(f"-f: ClusterQueue {cq} of LocalQueue {lq} cannot be read")
    spec = manifest.get("spec", {}) or {}
    template = spec.get("template", {}) or {}
    resource, units = _pod_units(template)
    if not units:
        raise SeedError("-f: the Job's containers ask no GPUs (resources.requests nvidia.com/...)")
    prio_name = labels.get("kueue.x-k8s.io/priority-class")
    if prio_name is not None and prio_name not in live.priority_classes:
        raise SeedError(f"-f: priority class {prio_name!r} is not defined (accepted: "
                        f"{', '.join(sorted(live.priority_classes))})")  # fmt: skip
    value = int(live.priority_classes[prio_name]) if prio_name is not None else 0
    pools = _allowed(template, queue, resources, resource)
    if not pools:
        raise SeedError(f"-f: no pool of queue {cq} offers {resource} there (nodeSelector gpufleet.io/pool)")
    name = str(meta.get("name") or meta.get("generateName") or "manifest")
    return Entry(f"job/{name} (not submitted)", cq, pools, int(spec.get("parallelism") or 1), units, value,
                 remaining_of(manifest, 0.0))  # fmt: skip
