"""Exact properties of the compiled objects on the example policies."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import yaml

from scheduler import compile, kueue_values, pool_node_labels
from scheduler.checks import CPU_FLAVOR, GPU_CORES_FLAVOR
from scheduler.compiler import KIND_ORDER
from scheduler.labels import DEVICE_PLUGIN_CONFIG_LABEL, DEVICE_PLUGIN_CONFIGMAP, GPU_TAINT, MIG_CONFIG_LABEL
from scheduler.model import TeamPolicy
from tests.scheduler.examples import METAL, METAL_POOLS, PROD, PROD_POOLS, SMALL, SMALL_POOLS, pool
from tests.scheduler.helpers import find, flavor_quota, of_kind


def test_one_flavor_per_pool_plus_cpu_each_selecting_and_tolerating_its_pool() -> None:
    flavors = of_kind(compile(PROD, PROD_POOLS), "ResourceFlavor")
    assert sorted(f["metadata"]["name"] for f in flavors) == sorted(
        [CPU_FLAVOR, GPU_CORES_FLAVOR, *(p.name for p in PROD_POOLS)]
    )
    h100 = next(f for f in flavors if f["metadata"]["name"] == "h100-train")
    assert h100["spec"]["nodeLabels"] == {"gpufleet.io/pool": "h100-train"}
    assert h100["spec"]["tolerations"] == [
        {"key": GPU_TAINT["key"], "operator": "Equal", "value": "true", "effect": "NoSchedule"}
    ]


def test_quotas_are_in_each_pools_own_resource_units() -> None:
    objects = compile(PROD, PROD_POOLS)
    research = find(objects, "ClusterQueue", "research")
    aware = find(objects, "ClusterQueue", "research-topology")  # h100-train is an EFA (topology) pool
    assert flavor_quota(aware, "h100-train")["nvidia.com/gpu"]["nominalQuota"] == 8
    mig = flavor_quota(research, "h100-mig")
    assert mig["nvidia.com/mig-1g.10gb"]["nominalQuota"] == 4 * 7  # 1g.10gb: 7 instances per H100
    assert mig["nvidia.com/gpu"]["nominalQuota"] == 0
    batch = find(objects, "ClusterQueue", "batch")
    shared = flavor_quota(batch, "a10g-batch")
    assert shared["nvidia.com/gpu.shared"]["nominalQuota"] == 16 * 4  # 4 time-slicing replicas per GPU
    assert shared["nvidia.com/gpu"]["nominalQuota"] == 0
    # GPU flavors carry no CPU: a GPU pod's cores come from gpu-cores, whose quota is only the share of the
    # team's GPUs (l40s-infer 8/4 x 48 cores, h100-mig 4/8 x 192); CPU-only work has its own queue (32 cores).
    assert "cpu" not in flavor_quota(research, "l40s-infer")
    cores = flavor_quota(research, GPU_CORES_FLAVOR)
    assert set(cores) == {"cpu", "memory"}
    assert cores["cpu"]["nominalQuota"] == 96 + 96
    assert cores["memory"]["nominalQuota"] == f"{768 + 1024}Gi"
    cpu_only = flavor_quota(find(objects, "ClusterQueue", "research-cpu"), CPU_FLAVOR)
    assert (cpu_only["cpu"]["nominalQuota"], cpu_only["memory"]["nominalQuota"]) == (32, "128Gi")
    # A topology pool's flavor carries its own share: 8 of 8 GPUs of a 192-core, 2048 GiB node, 32 EFA.
    h100 = flavor_quota(aware, "h100-train")
    assert (h100["cpu"]["nominalQuota"], h100["memory"]["nominalQuota"]) == (192, "2048Gi")
    assert h100["vpc.amazonaws.com/efa"]["nominalQuota"] == 32


def test_borrowing_and_lending_limits_are_set_on_the_gpu_resource_in_units() -> None:
    objects = compile(PROD, PROD_POOLS)
    llm = find(objects, "ClusterQueue", "llm-training-topology")
    own = flavor_quota(llm, "h100-train")["nvidia.com/gpu"]
    assert own == {"name": "nvidia.com/gpu", "nominalQuota": 24, "borrowingLimit": 8, "lendingLimit": 8}
    research = find(objects, "ClusterQueue", "research")
    assert flavor_quota(research, "h100-mig")["nvidia.com/mig-1g.10gb"]["borrowingLimit"] == 8 * 7
    inference = find(objects, "ClusterQueue", "inference")  # no limits in the spec: none emitted
    assert set(flavor_quota(inference, "l40s-infer")["nvidia.com/gpu"]) == {"name", "nominalQuota"}


def test_team_queue_admits_only_its_namespace_and_prefers_its_own_pools() -> None:
    objects = compile(PROD, PROD_POOLS)
    inference = find(objects, "ClusterQueue", "inference")
    assert inference["spec"]["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "team-inference"}
    }
    cpu_group, gpu_group = inference["spec"]["resourceGroups"]
    assert cpu_group["coveredResources"] == ["cpu", "memory"]
    assert [f["name"] for f in cpu_group["flavors"]] == [GPU_CORES_FLAVOR]
    order = [f["name"] for f in gpu_group["flavors"]]
    assert order[0] == "l40s-infer"
    assert sorted(order[1:]) == ["a10g-batch", "h100-mig"]
    assert find(objects, "LocalQueue", "topology", "team-inference")["spec"] == {
        "clusterQueue": "inference-topology"
    }
    lq = find(objects, "LocalQueue", "default", "team-inference")
    assert lq["spec"] == {"clusterQueue": "inference"}


def test_preemption_under_fair_sharing_and_classic_borrowing() -> None:
    fair = find(compile(PROD, PROD_POOLS), "ClusterQueue", "llm-training")["spec"]
    assert fair["preemption"] == {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    assert "fairSharing" not in fair  # the team's Cohort carries its weight
    assert find(compile(PROD, PROD_POOLS), "Cohort", "gpufleet-llm-training")["spec"] == {
        "parentName": "gpufleet",
        "fairSharing": {"weight": 2},
    }
    classic = replace(PROD, fair_sharing=False, borrow_within_cohort_max_priority=50)
    spec = find(compile(classic, PROD_POOLS), "ClusterQueue", "llm-training")["spec"]
    assert spec["preemption"]["borrowWithinCohort"] == {"policy": "LowerPriority", "maxPriorityThreshold": 50}
    assert "fairSharing" not in spec
    assert "fairSharing" not in find(compile(classic, PROD_POOLS), "Cohort", "gpufleet-llm-training")["spec"]


def test_unassigned_capacity_goes_to_the_cohort() -> None:
    policy = replace(SMALL, teams=(TeamPolicy("research", "research", {"l40s": 1}),))
    cohort = find(compile(policy, SMALL_POOLS), "Cohort", "gpufleet")
    assert flavor_quota(cohort, "l40s")["nvidia.com/gpu"]["nominalQuota"] == 1  # 2 nodes x 1 GPU - 1 held
    full = find(compile(SMALL, SMALL_POOLS), "Cohort", "gpufleet")
    assert full["spec"] == {}


def test_team_namespace_security_quota_ceiling_and_rbac() -> None:
    objects = compile(PROD, PROD_POOLS)
    ns = find(objects, "Namespace", "team-research")["metadata"]["labels"]
    assert ns["pod-security.kubernetes.io/enforce"] == "baseline"
    assert ns["gpufleet.io/queue-managed"] == "true"
    hard = find(objects, "ResourceQuota", "gpu-ceiling", "team-research")["spec"]["hard"]
    # research: quota + borrowing limit 8 per pool, capped by the pool: h100-train min(32, 16) + l40s min(24, 16)
    assert hard["requests.nvidia.com/gpu"] == str(16 + 16)
    assert hard["requests.nvidia.com/mig-1g.10gb"] == str(8 * 7)  # min(8, 4 + 8) GPUs x 7
    assert hard["requests.nvidia.com/gpu.shared"] == str(8 * 4)  # borrow up to 8 of 16 GPUs x 4
    bindings = [b for b in of_kind(objects, "RoleBinding") if b["metadata"]["namespace"] == "team-research"]
    assert {b["roleRef"]["name"] for b in bindings} == {"edit", "kueue-batch-user-role"}
    reader = find(objects, "ClusterRoleBinding", "gpufleet-queue-reader")
    assert "researchers" in {s["name"] for s in reader["subjects"]}
    rules = find(objects, "ClusterRole", "gpufleet-queue-reader")["rules"]
    assert rules == [{"apiGroups": ["kueue.x-k8s.io"], "verbs": ["get", "list", "watch"],
                      "resources": ["clusterqueues", "resourceflavors", "workloadpriorityclasses", "cohorts"]}]  # fmt: skip
    assert all(b["subjects"] == [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "researchers"}]
               for b in bindings)  # fmt: skip


def test_objects_come_in_apply_order_and_compiling_is_deterministic() -> None:
    objects = compile(PROD, PROD_POOLS)
    ranks = [KIND_ORDER.index(o["kind"]) for o in objects]
    assert ranks == sorted(ranks)
    assert objects[0]["kind"] == "Namespace" and objects[-1]["kind"] == "NetworkPolicy"
    assert yaml.safe_dump(objects) == yaml.safe_dump(compile(PROD, tuple(PROD_POOLS)))


def test_secondary_scheduler_only_on_existing_platform() -> None:
    aws = compile(PROD, PROD_POOLS)
    assert not of_kind(aws, "Deployment")
    metal = compile(METAL, METAL_POOLS)
    deployment = find(metal, "Deployment", "gpu-binpack", "gpufleet-scheduler")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == f"registry.k8s.io/kube-scheduler:{METAL.kube_scheduler_image_tag}"
    config = yaml.safe_load(
        find(metal, "ConfigMap", "gpu-binpack-config", "gpufleet-scheduler")["data"]["config.yaml"]
    )
    profile = config["profiles"][0]
    assert profile["schedulerName"] == "gpu-binpack"
    strategy = profile["pluginConfig"][0]["args"]["scoringStrategy"]
    assert strategy["type"] == "MostAllocated"
    weights = {r["name"]: r["weight"] for r in strategy["resources"]}
    assert weights == {"nvidia.com/gpu": 10, "cpu": 1, "memory": 1, "nvidia.com/gpu.shared": 10}
    assert config["leaderElection"]["resourceNamespace"] == "gpufleet-scheduler"


def test_secondary_scheduler_survives_drains_and_node_loss() -> None:
    """Two replicas spread over host names (a hard topology spread over the nodes the pods tolerate, per
    revision; what it does on a real scheduler: tests/twin/test_platform_placement.py), a PodDisruptionBudget
    letting one go at a time (policy/v1: a drain evicts through it), system-cluster-critical priority (evicted
    last under node pressure) and a memory limit (a leak cannot take the node)."""
    from tests.scheduler.helpers import selector_matches

    metal = compile(METAL, METAL_POOLS)
    deployment = find(metal, "Deployment", "gpu-binpack", "gpufleet-scheduler")
    pod = deployment["spec"]["template"]
    assert deployment["spec"]["replicas"] == 2
    assert pod["spec"]["priorityClassName"] == "system-cluster-critical"
    assert "affinity" not in pod["spec"]  # no required anti-affinity: one untainted node must take both
    (spread,) = pod["spec"]["topologySpreadConstraints"]
    assert (spread["topologyKey"], spread["maxSkew"], spread["whenUnsatisfiable"]) == (
        "kubernetes.io/hostname",
        1,
        "DoNotSchedule",
    )
    assert spread["nodeTaintsPolicy"] == "Honor" and spread["matchLabelKeys"] == ["pod-template-hash"]
    assert selector_matches(spread["labelSelector"], pod["metadata"]["labels"])
    assert pod["spec"]["containers"][0]["resources"]["limits"]["memory"]
    pdb = find(metal, "PodDisruptionBudget", "gpu-binpack", "gpufleet-scheduler")
    assert pdb["spec"]["maxUnavailable"] == 1 and "minAvailable" not in pdb["spec"]
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert selector_matches(pdb["spec"]["selector"], pod["metadata"]["labels"])


def test_the_secondary_scheduler_scores_every_feasible_node() -> None:
    """`percentageOfNodesToScore: 100` on the gpu-binpack profile (a KubeSchedulerProfile field, 0-100,
    kube-scheduler config/v1 types.go at kubernetes v1.35.8); its effect on 300 nodes:
    tests/twin/test_scheduler_profile.py. The EKS profile (default-scheduler) is left as EKS accepts it."""
    from scheduler import kube_scheduler_config

    metal = compile(METAL, METAL_POOLS)
    config = yaml.safe_load(
        find(metal, "ConfigMap", "gpu-binpack-config", "gpufleet-scheduler")["data"]["config.yaml"]
    )
    (profile,) = config["profiles"]
    assert profile["schedulerName"] == "gpu-binpack" and profile["percentageOfNodesToScore"] == 100
    assert "percentageOfNodesToScore" not in kube_scheduler_config(METAL, METAL_POOLS)["profiles"][0]


def test_sharing_labels_select_existing_device_plugin_configs() -> None:
    objects = compile(PROD, PROD_POOLS)
    data = find(objects, "ConfigMap", DEVICE_PLUGIN_CONFIGMAP, "gpu-operator")["data"]
    for p in PROD_POOLS:
        labels = pool_node_labels(p)
        key = labels.get(DEVICE_PLUGIN_CONFIG_LABEL, "default")
        config = yaml.safe_load(data[key])
        assert config["version"] == "v1"
        if p.sharing == "timeSlicing":
            slicing = config["sharing"]["timeSlicing"]
            assert slicing["renameByDefault"] is True
            assert slicing["resources"] == [{"name": "nvidia.com/gpu", "replicas": p.time_slicing_replicas}]
        if p.sharing == "mig":
            assert config["flags"]["migStrategy"] == "mixed"
            assert labels[MIG_CONFIG_LABEL] == f"all-{p.mig_profile}"
    assert set(data) == {"default", "a10g-batch", "h100-mig"}


def test_priority_expander_prefers_reserved_then_on_demand_then_spot() -> None:
    cm = find(compile(PROD, PROD_POOLS), "ConfigMap", "cluster-autoscaler-priority-expander", "kube-system")
    priorities = yaml.safe_load(cm["data"]["priorities"])
    assert priorities == {
        30: ["eks-h100-train-.*"],
        20: ["eks-l40s-infer-.*", "eks-h100-mig-.*"],
        10: ["eks-a10g-batch-.*"],
    }
    metal_maps = {c["metadata"]["name"] for c in of_kind(compile(METAL, METAL_POOLS), "ConfigMap")}
    assert cm["metadata"]["name"] not in metal_maps  # no autoscaled node groups on existing clusters
    assert DEVICE_PLUGIN_CONFIGMAP in metal_maps


def test_provisioning_request_check_guards_gpu_flavors() -> None:
    objects = compile(replace(PROD, provisioning_requests=True), PROD_POOLS)
    check = find(objects, "AdmissionCheck", "gpufleet-provisioning")
    assert check["spec"]["controllerName"] == "kueue.x-k8s.io/provisioning-request"
    config = find(objects, "ProvisioningRequestConfig", "gpufleet-provisioning")
    assert config["spec"]["provisioningClassName"] == "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
    strategy = find(objects, "ClusterQueue", "batch")["spec"]["admissionChecksStrategy"]
    (entry,) = strategy["admissionChecks"]
    assert entry["name"] == "gpufleet-provisioning"
    assert sorted(entry["onFlavors"]) == sorted(p.name for p in PROD_POOLS if not p.topology_levels)
    assert "admissionChecksStrategy" not in find(compile(PROD, PROD_POOLS), "ClusterQueue", "batch")["spec"]


def test_a_list_of_pools_puts_the_check_on_those_pools_only() -> None:
    """`provisioningRequests: [h100-train]`: the topology queues' gangs wait for the autoscaler; the default
    queues' flavors carry no check, so their one-node jobs are admitted by quota and scale pools up as pods."""
    objects = compile(
        replace(PROD, provisioning_requests=True, provisioning_pools=("h100-train",)), PROD_POOLS
    )
    checked = {
        q["metadata"]["name"]: q["spec"]["admissionChecksStrategy"]["admissionChecks"][0]["onFlavors"]
        for q in of_kind(objects, "ClusterQueue")
        if "admissionChecksStrategy" in q["spec"]
    }
    assert checked == {f"{t.name}-topology": ["h100-train"] for t in PROD.teams}
    assert find(objects, "AdmissionCheck", "gpufleet-provisioning")


def test_kueue_manager_config_gang_admission_and_unqueued_jobs() -> None:
    values = kueue_values(PROD)
    assert values["controllerManager"]["manager"]["image"]["tag"] == "v0.19.2"
    config = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2" and config["kind"] == "Configuration"
    assert config["waitForPodsReady"]["timeout"] == "30m"
    assert config["manageJobsWithoutQueueName"] is True
    assert config["managedJobsNamespaceSelector"] == {"matchLabels": {"gpufleet.io/queue-managed": "true"}}
    assert {"batch/job", "kubeflow.org/pytorchjob", "ray.io/rayjob", "pod"} <= set(
        config["integrations"]["frameworks"]
    )
    assert "fairSharing" in config
    assert "fairSharing" not in yaml.safe_load(
        kueue_values(replace(PROD, fair_sharing=False))["managerConfig"]["controllerManagerConfigYaml"]
    )


def test_pool_node_labels() -> None:
    exclusive = pool("a", "H100", 8, 1)
    assert pool_node_labels(exclusive) == {"gpufleet.io/pool": "a"}
    sliced = pool("b", "L4", 1, 1, sharing="timeSlicing", time_slicing_replicas=2)
    assert pool_node_labels(sliced) == {"gpufleet.io/pool": "b", "nvidia.com/device-plugin.config": "b"}


def test_importing_the_compiler_never_imports_pulumi_or_the_simulator() -> None:
    code = (
        "import sys, scheduler; from tests.scheduler.examples import PROD, PROD_POOLS;"
        "scheduler.compile(PROD, PROD_POOLS); scheduler.render;"
        "bad = [m for m in sys.modules if m.split('.')[0] == 'pulumi' or m.startswith('scheduler.sim')];"
        "assert not bad, bad"
    )
    subprocess.run(
        [sys.executable, "-c", code], check=True, cwd=str(__import__("pathlib").Path(__file__).parents[2])
    )
