"""Every metric gpufleet's rules, dashboards and usage report read, and where it comes from.

The names are fixed by the exporters, so they live here once and tests check each against its source:
- dcgm-exporter: the counter list we ship (`DCGM_COUNTERS`), every line taken from dcgm-exporter's own
  `etc/default-counters.csv` (4.5.3-4.8.2), where the error and throttling counters are listed but commented
  out; the GPU operator's exporter reads our list from a ConfigMap (`dcgmExporter.config`).
  With the Kubernetes pod mapping each GPU series carries `namespace`, `pod`, `container` of the pod holding it
  (dcgm-exporter `internal/pkg/transformation/const.go`); the ServiceMonitor drops the target's own labels of
  those names so the exporter's survive (`infra.monitoring.stack.dcgm_exporter_values`).
- Kueue v0.19.2 (`pkg/metrics/metrics.go`): ClusterQueue = team, flavor = pool. Its gauges carry
  `replica_role` (`leader`, `follower` or `standalone`) and both replicas export them, so every gauge query
  selects the leader (`KUEUE_LEADER`).
- kube-state-metrics: node readiness, labels (the pool label via `--metric-labels-allowlist`) and capacity, and
  gpufleet's CustomResourceState metrics of Kueue Workloads (`WORKLOAD_CREATED`, `WORKLOAD_CONDITION`).
- `up`, per scrape job: the `job` label the Prometheus operator gives each target (`JOBS`).
"""

from __future__ import annotations

from scheduler.kueue_config import RELEASE_NAME as KUEUE_RELEASE

# ---- dcgm-exporter -------------------------------------------------------------------------------------
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # gauge, percent
XID = "DCGM_FI_DEV_XID_ERRORS"  # gauge: the last XID seen (sticky: dashboards only)
# dcgm-exporter's own windowed XID count, one series per `xid` seen in the last window (5 minutes by default,
# DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE): internal/pkg/collector/xid_collector.go, counters/const.go.
XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
ECC_DBE_VOLATILE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"  # volatile: cleared by a GPU reset or driver reload
ROW_REMAP_FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
# DCGM field 396 "Whether remapping of rows is pending" (go-dcgm pkg/dcgm/const_fields.go, the field table
# dcgm-exporter resolves counter names with, counter_config.go `dcgm.GetFieldID`); not in upstream's CSV.
ROW_REMAP_PENDING = "DCGM_FI_DEV_ROW_REMAP_PENDING"
UNCORRECTABLE_REMAPPED_ROWS = "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"
NVLINK_ERRORS = (
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
)
THERMAL_VIOLATION = "DCGM_FI_DEV_THERMAL_VIOLATION"  # counter, ns throttled
POWER_VIOLATION = "DCGM_FI_DEV_POWER_VIOLATION"  # counter, ns throttled
GPU_TEMP = "DCGM_FI_DEV_GPU_TEMP"
POWER_USAGE = "DCGM_FI_DEV_POWER_USAGE"
FB_USED = "DCGM_FI_DEV_FB_USED"
TENSOR_ACTIVE = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
# Ratio (0-1) of time the graphics/compute engine is active; reported per MIG instance, where GPU_UTIL is not.
GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
# Fields gpufleet collects that dcgm-exporter's CSVs do not list (each a DCGM field dcgm-exporter resolves).
EXTRA_DCGM_FIELDS = frozenset({ROW_REMAP_PENDING})

# (field, type, help): dcgm-exporter's enabled defaults plus the fault and throttling counters the alerts need.
DCGM_COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    (GPU_TEMP, "gauge", "GPU temperature (in C)."),
    (POWER_USAGE, "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ)."),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    (GPU_UTIL, "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %)."),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),
    (XID, "gauge", "Value of the last XID error encountered."),
    (XID_COUNT, "counter", "reported XIDs during last window"),
    (POWER_VIOLATION, "counter", "Throttling duration due to power constraints (in ns)."),
    (THERMAL_VIOLATION, "counter", "Throttling duration due to thermal constraints (in ns)."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    (FB_USED, "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB)."),
    (ECC_DBE_VOLATILE, "counter", "Total number of double-bit volatile ECC errors."),
    ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "counter", "Total number of double-bit persistent ECC errors."),
    ("DCGM_FI_DEV_RETIRED_DBE", "counter", "Total number of retired pages due to double-bit errors."),
    (NVLINK_ERRORS[0], "counter", "Total number of NVLink flow-control CRC errors."),
    (NVLINK_ERRORS[1], "counter", "Total number of NVLink data CRC errors."),
    (NVLINK_ERRORS[2], "counter", "Total number of NVLink retries."),
    (NVLINK_ERRORS[3], "counter", "Total number of NVLink recovery errors."),
    (
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "counter",
        "Total number of NVLink bandwidth counters for all lanes.",
    ),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status"),
    (UNCORRECTABLE_REMAPPED_ROWS, "counter", "Number of remapped rows for uncorrectable errors"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors"),
    (ROW_REMAP_FAILURE, "gauge", "Whether remapping of rows has failed"),
    (ROW_REMAP_PENDING, "gauge", "Whether remapping of rows is pending"),
    ("DCGM_FI_DRIVER_VERSION", "label", "Driver Version"),
    (GR_ENGINE_ACTIVE, "gauge", "Ratio of time the graphics engine is active."),
    (TENSOR_ACTIVE, "gauge", "Ratio of cycles the tensor (HMMA) pipe is active."),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", "Ratio of cycles the device memory interface is active."),
    (
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "gauge",
        "The rate of data transmitted over the PCIe bus in bytes per second.",
    ),
    (
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "gauge",
        "The rate of data received over the PCIe bus in bytes per second.",
    ),
)


def dcgm_counters_csv() -> str:
    """The `dcgm-metrics.csv` the exporter reads (format: field, type, help; `#` starts a comment)."""
    lines = [
        "# gpufleet: dcgm-exporter defaults plus XID count, ECC, row-remap, NVLink and throttling counters"
    ]
    lines += [f"{field}, {kind}, {text}" for field, kind, text in DCGM_COUNTERS]
    return "\n".join(lines) + "\n"


# ---- Kueue v0.19.2 -------------------------------------------------------------------------------------
KUEUE_PENDING = "kueue_pending_workloads"  # gauge {cluster_queue, status}
KUEUE_ADMITTED_TOTAL = "kueue_admitted_workloads_total"  # counter {cluster_queue, priority_class}
KUEUE_ADMISSION_WAIT = "kueue_admission_wait_time_seconds"  # histogram {cluster_queue, priority_class}
KUEUE_USAGE = "kueue_cluster_queue_resource_usage"  # gauge {cohort, cluster_queue, flavor, resource}
KUEUE_NOMINAL = "kueue_cluster_queue_nominal_quota"  # gauge {cohort, cluster_queue, flavor, resource}
KUEUE_METRICS = frozenset(
    {
        KUEUE_PENDING,
        KUEUE_ADMITTED_TOTAL,
        KUEUE_ADMISSION_WAIT,
        KUEUE_USAGE,
        KUEUE_NOMINAL,
        "kueue_cluster_queue_borrowing_limit",
        "kueue_cluster_queue_resource_reservation",
        "kueue_admitted_active_workloads",
        "kueue_evicted_workloads_total",
        "kueue_preempted_workloads_total",
        "kueue_cluster_queue_status",
    }
)
# Kueue's gauges as the elected leader reports them (both replicas export them: kueue#9487).
KUEUE_LEADER = 'replica_role="leader"'
# gpufleet's recording rules (infra.monitoring.alerts.gpu_unit_rules): Kueue's allocated and quota gauges in
# whole GPUs, labels cluster_queue, flavor, resource.
RECORD_ALLOCATED = "gpufleet:kueue_allocated:gpus"
RECORD_QUOTA = "gpufleet:kueue_quota:gpus"
RECORDED = frozenset({RECORD_ALLOCATED, RECORD_QUOTA})
# The admission wait histogram's bucket bounds: 1, then 2.5 * 2^i for 15 buckets (generateExponentialBuckets(16)).
KUEUE_WAIT_BUCKETS: tuple[float, ...] = (1.0, *(2.5 * 2**i for i in range(15)))

# ---- kube-state-metrics --------------------------------------------------------------------------------
NODE_CONDITION = "kube_node_status_condition"  # {node, condition, status}
NODE_LABELS = "kube_node_labels"  # {node, label_<allow-listed label>}
NODE_ALLOCATABLE = "kube_node_status_allocatable"  # {node, resource, unit}
NODE_CAPACITY = "kube_node_status_capacity"  # {node, resource, unit}
NODE_UNSCHEDULABLE = "kube_node_spec_unschedulable"  # {node}
POD_REQUESTS = "kube_pod_container_resource_requests"  # {namespace, pod, container, node, resource, unit}
POOL_LABEL_METRIC = "label_gpufleet_io_pool"  # `gpufleet.io/pool` as kube-state-metrics names it
# `nvidia.com/gpu.deploy.operands` as kube-state-metrics names it: "false" on nodes where the GPU operator runs
# no operand, so no dcgm-exporter (Bottlerocket; gpu-operator v26.7.0 controllers/state_manager.go removes every
# `nvidia.com/gpu.deploy.*` label of such a node).
OPERANDS_LABEL_METRIC = "label_nvidia_com_gpu_deploy_operands"
GPU_RESOURCE_METRIC = "nvidia_com_gpu"  # `nvidia.com/gpu` as kube-state-metrics names it
# gpufleet's CustomResourceState metrics of Kueue Workloads (infra.monitoring.stack.workload_state_metrics):
# `<prefix>_<name>` (kube-state-metrics docs/metrics/extend/customresourcestate-metrics.md, "Naming"), labels
# `namespace`, `workload`, `queue` (the LocalQueue), and `type` on the condition metric.
WORKLOAD_PREFIX = "gpufleet_kueue_workload"
WORKLOAD_CREATED = f"{WORKLOAD_PREFIX}_created"  # metadata.creationTimestamp, Unix seconds
WORKLOAD_CONDITION = f"{WORKLOAD_PREFIX}_condition"  # per status.conditions[] entry: 1 True, 0 False/Unknown
KSM_METRICS = frozenset(
    {
        NODE_CONDITION,
        NODE_LABELS,
        NODE_ALLOCATABLE,
        NODE_CAPACITY,
        NODE_UNSCHEDULABLE,
        POD_REQUESTS,
        WORKLOAD_CREATED,
        WORKLOAD_CONDITION,
    }
)

# ---- scrape jobs ---------------------------------------------------------------------------------------
# The `job` label of a ServiceMonitor's targets is the Service's name, or the value of the Service label named by
# the monitor's `jobLabel` (prometheus-operator v0.93.0 pkg/prometheus/promcfg.go, generateServiceMonitorConfig).
UP = "up"
# GPU operator v26.7.0 assets/state-dcgm-exporter: monitor `jobLabel: app`, Service label app=nvidia-dcgm-exporter.
DCGM_JOB = "nvidia-dcgm-exporter"
# gpufleet's own Kueue monitor has no jobLabel: the Service name, `<fullname>-controller-manager-metrics-service`
# (Kueue v0.19.2 charts/kueue/templates/manager/auth_proxy_service.yaml; fullname = release "kueue").
KUEUE_JOB = f"{KUEUE_RELEASE}-controller-manager-metrics-service"
# kube-state-metrics chart 8.4.0 templates/servicemonitor.yaml: `jobLabel: app.kubernetes.io/name`, whose value
# is the chart name (`kube-state-metrics.name`), whatever the release is called.
KSM_JOB = "kube-state-metrics"
JOBS = (DCGM_JOB, KUEUE_JOB, KSM_JOB)

DCGM_METRICS = frozenset(field for field, kind, _ in DCGM_COUNTERS if kind != "label")
EXPORTED = DCGM_METRICS | KUEUE_METRICS | KSM_METRICS | {UP}
IDLE_UTIL_PERCENT = 5  # below this an allocated GPU counts as idle
IDLE_ENGINE_RATIO = IDLE_UTIL_PERCENT / 100  # the same threshold for the 0-1 DCGM_FI_PROF_* ratios


def node_pool(pool: str | None = None) -> str:
    """The `{node, pool}` join table: one series per node, value 1. `max by` collapses duplicate
    kube-state-metrics series (a rollout, two replicas), which would make `group_left` fail with "found
    duplicate series for the match group" (PromQL vector matching rules)."""
    match = f'="{pool}"' if pool else '!=""'
    return f"max by (node, {POOL_LABEL_METRIC}) ({NODE_LABELS}{{{POOL_LABEL_METRIC}{match}}})"


def on_pool(pool: str | None = None) -> str:
    """`* on (node) group_left (<pool label>) <node_pool>`: adds a series' pool and keeps GPU-pool nodes only."""
    return f"* on (node) group_left ({POOL_LABEL_METRIC}) {node_pool(pool)}"


def exporterless_nodes() -> str:
    """GPU nodes that run no dcgm-exporter by design (operands off), one series per node: silence from them is
    expected, so the DCGM coverage alerts leave them out with `unless on (node)`."""
    return f'max by (node) ({NODE_LABELS}{{{OPERANDS_LABEL_METRIC}="false"}})'


def degenerate_gpus(window: str | None = None) -> str:
    """GPUs whose own device-level series (no pod label) shows activity while every pod series of the GPU reads
    exactly 0, over `window` (or at the evaluation time): dcgm-exporter's per-process mode keeps the device's
    series beside the pods' and gives every pod it cannot map to a process "0" (4.5.3-4.8.2
    transformation/kubernetes.go:271-279, :366), so those zeros say nothing about the pods. One series per
    `UUID`, its value the device's utilisation. Exporters that copy the device's value to its pods (one-pod,
    device-copy) keep no pod-less series for a held GPU, so nothing matches there."""

    def over(selector: str) -> str:
        return f"max_over_time({selector}[{window}])" if window else selector

    device = over(GPU_UTIL + '{pod=""}')
    pods = over(GPU_UTIL + '{pod!=""}')
    return f"(max by (UUID) ({device}) >= {IDLE_UTIL_PERCENT}) and on (UUID) (max by (UUID) ({pods}) == 0)"


def node_gpus(metric: str) -> str:
    """A node's whole-GPU count from kube-state-metrics (`capacity` or `allocatable`), one series per node."""
    return f'max by (node) ({metric}{{resource="{GPU_RESOURCE_METRIC}"}})'


UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def seconds(duration: str) -> int:
    """A spec Duration (`30s`, `90m`, `2h`, `7d`) in seconds."""
    return int(duration[:-1]) * UNITS_S[duration[-1]]
