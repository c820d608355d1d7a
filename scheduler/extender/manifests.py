"""The extender as Kubernetes objects: ServiceAccount, RBAC, Deployment (two replicas), Service, PDB.

Pure data (no Pulumi); the stack applies them with the secondary scheduler when
``placement.strategy: FragmentationAware``. The scheduler profile that calls the extender is
:func:`scheduler.placement.with_extender`.
"""

from __future__ import annotations

from typing import Any

from scheduler.labels import SCHEDULER_NAMESPACE, metadata, restricted_security_context

NAME = "gpufleet-extender"
PORT = 8888
APP = {"app.kubernetes.io/name": NAME}
IMAGE_REPOSITORY = "ghcr.io/gpufleet/gpufleet-extender"  # built by .github/workflows/extender-image.yml


def service_url(namespace: str = SCHEDULER_NAMESPACE) -> str:
    """The urlPrefix kube-scheduler calls (cluster DNS name of the Service)."""
    return f"http://{NAME}.{namespace}.svc:{PORT}"


def _meta(name: str, namespace: str | None = SCHEDULER_NAMESPACE) -> dict[str, Any]:
    return metadata(name, namespace, APP)


def image_problem(image: str) -> str | None:
    """Why ``image`` is not a pinned reference (a tag or digest, never latest); None when it is."""
    if ":" not in image.rsplit("/", 1)[-1] and "@" not in image:
        return f"extender image {image!r} must be pinned (tag or digest)"
    if image.endswith(":latest"):
        return "extender image must not be 'latest'"
    return None


def extender_objects(image: str, trace_configmap: str | None = None) -> list[dict[str, Any]]:
    """Every object the extender needs; ``image`` is a pinned reference (a tag or digest, never latest)."""
    problem = image_problem(image)
    if problem:
        raise ValueError(problem)
    rules = [
        {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["pods/binding", "bindings"], "verbs": ["create"]},
    ]
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": _meta(NAME, None),
            "rules": rules}  # fmt: skip
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": _meta(NAME, None),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
        "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": SCHEDULER_NAMESPACE}],
    }
    args = ["--port", str(PORT)]
    mounts: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []
    if trace_configmap:
        args += ["--trace", "/etc/gpufleet-extender/pods.csv"]
        mounts.append({"name": "trace", "mountPath": "/etc/gpufleet-extender", "readOnly": True})
        volumes.append({"name": "trace", "configMap": {"name": trace_configmap}})
    http = {"port": PORT}
    container = {
        "name": "extender",
        "image": image,
        "args": args,
        "ports": [{"name": "http", "containerPort": PORT}],
        "livenessProbe": {"httpGet": {"path": "/healthz", **http}, "periodSeconds": 10},
        "readinessProbe": {"httpGet": {"path": "/readyz", **http}, "periodSeconds": 5},
        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        "securityContext": restricted_security_context(),
        "volumeMounts": mounts,
    }
    pod = {
        "serviceAccountName": NAME,
        "priorityClassName": "system-cluster-critical",
        "containers": [container],
        "volumes": volumes,
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
             "labelSelector": {"matchLabels": dict(APP)}}
        ],
    }  # fmt: skip
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(NAME),
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": dict(APP)},
            "template": {"metadata": {"labels": dict(APP)}, "spec": pod},
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(NAME),
        "spec": {"selector": dict(APP), "ports": [{"name": "http", "port": PORT, "targetPort": "http"}]},
    }
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(NAME),
        "spec": {"minAvailable": 1, "selector": {"matchLabels": dict(APP)}},
    }
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(NAME)}
    return [account, role, binding, deployment, service, pdb]


def fragmentation_aware(
    scheduler_objects: list[dict[str, Any]], managed_resources: list[str], image: str
) -> list[dict[str, Any]]:
    """``placement.strategy: FragmentationAware``: the secondary scheduler's objects
    (:func:`scheduler.placement.secondary_scheduler`) with its configuration calling the extender
    (:func:`scheduler.placement.with_extender`), followed by the extender's own objects.

    The EKS control plane accepts only a NodeResourcesFit scoring strategy, not extenders, so on every
    platform the extender is called by the secondary scheduler that team pods name.
    """
    import copy

    import yaml

    from scheduler.placement import CONFIG_FILE, with_extender
    from scheduler.yamltext import dump_text

    out = copy.deepcopy(scheduler_objects)
    configs = [o for o in out if o.get("kind") == "ConfigMap" and CONFIG_FILE in o.get("data", {})]
    if len(configs) != 1:
        raise ValueError("expected the secondary scheduler's one configuration ConfigMap")
    data = configs[0]["data"]
    config = yaml.safe_load(data[CONFIG_FILE])
    data[CONFIG_FILE] = dump_text(with_extender(config, service_url(), managed_resources))
    return [*out, *extender_objects(image)]
