"""Cross-object checks no schema can make: every name an object points at exists and matches the pools.

Returns problems as strings (empty when consistent); tests assert it is empty for every example and that it
catches each kind of broken reference.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler.compiler import EXTERNAL_NAMESPACES
from scheduler.model import PoolView, SchedulingPolicy
from scheduler.validation import describe

Index = dict[tuple[str, str, str], dict[str, Any]]


def index(objects: Sequence[dict[str, Any]]) -> Index:
    return {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objects}


def _has(idx: Index, kind: str, name: str, namespace: str = "") -> bool:
    return (kind, namespace, name) in idx


def _tolerates(tolerations: list[dict[str, Any]], taint: dict[str, str]) -> bool:
    return any(
        t["key"] == taint["key"]
        and t.get("effect") in (None, "", taint["effect"])
        and (t.get("operator") == "Exists" or t.get("value", "") == taint.get("value", ""))
        for t in tolerations
    )


def _kueue(idx: Index, pools: Sequence[PoolView]) -> list[str]:
    out: list[str] = []
    by_pool = {p.name: p for p in pools}
    for (kind, ns, name), obj in idx.items():
        spec = obj.get("spec", {})
        if kind == "LocalQueue":
            cq = idx.get(("ClusterQueue", "", spec["clusterQueue"]))
            if cq is None:
                out.append(f"{describe(obj)}: ClusterQueue {spec['clusterQueue']} does not exist")
            elif cq["spec"]["namespaceSelector"]["matchLabels"].get("kubernetes.io/metadata.name") != ns:
                out.append(f"{describe(obj)}: {describe(cq)} does not admit namespace {ns}")
        elif kind == "ClusterQueue":
            if not _has(idx, "Cohort", spec.get("cohortName", "")):
                out.append(f"{describe(obj)}: Cohort {spec.get('cohortName')} does not exist")
            for group in spec["resourceGroups"]:
                out += [
                    f"{describe(obj)}: ResourceFlavor {f['name']} does not exist"
                    for f in group["flavors"]
                    if not _has(idx, "ResourceFlavor", f["name"])
                ]
            for check in spec.get("admissionChecksStrategy", {}).get("admissionChecks", []):
                if not _has(idx, "AdmissionCheck", check["name"]):
                    out.append(f"{describe(obj)}: AdmissionCheck {check['name']} does not exist")
        elif kind == "AdmissionCheck" and "parameters" in spec:
            if not _has(idx, spec["parameters"]["kind"], spec["parameters"]["name"]):
                out.append(
                    f"{describe(obj)}: {spec['parameters']['kind']} {spec['parameters']['name']} missing"
                )
        elif (
            kind == "ResourceFlavor"
            and spec.get("topologyName")
            and not _has(idx, "Topology", spec["topologyName"])
        ):
            out.append(f"{describe(obj)}: Topology {spec['topologyName']} does not exist")
        if kind == "ResourceFlavor" and spec.get("nodeLabels"):
            pool = by_pool.get(name)
            if pool is None:
                out.append(f"{describe(obj)}: selects nodes but no pool is named {name}")
                continue
            if any(pool.labels.get(k) != v for k, v in spec["nodeLabels"].items()):
                out.append(f"{describe(obj)}: nodeLabels {spec['nodeLabels']} are not labels of pool {name}")
            out += [
                f"{describe(obj)}: does not tolerate taint {t['key']}={t.get('value', '')}:{t['effect']} of pool {name}"
                for t in pool.taints
                if not _tolerates(spec.get("tolerations", []), t)
            ]
    return out


def _namespaces_and_rbac(idx: Index, policy: SchedulingPolicy) -> list[str]:
    out: list[str] = []
    groups = {g for team in policy.teams for g in team.groups}
    priorities = {t.priority for t in policy.teams}
    for (kind, ns, _name), obj in idx.items():
        if ns and ns not in EXTERNAL_NAMESPACES and not _has(idx, "Namespace", ns):
            out.append(f"{describe(obj)}: namespace {ns} is not created")
        for subject in obj.get("subjects", []):
            if subject["kind"] == "Group" and subject["name"] not in groups:
                out.append(f"{describe(obj)}: group {subject['name']} is not in any team's groups")
            if subject["kind"] == "ServiceAccount" and not _has(
                idx, "ServiceAccount", subject["name"], subject["namespace"]
            ):
                out.append(
                    f"{describe(obj)}: ServiceAccount {subject['namespace']}/{subject['name']} missing"
                )
        role = obj.get("roleRef", {})
        if role.get("kind") == "Role" and ns != "kube-system" and not _has(idx, "Role", role["name"], ns):
            out.append(f"{describe(obj)}: Role {obj['roleRef']['name']} missing")
        if kind == "ValidatingAdmissionPolicyBinding" and not _has(
            idx, "ValidatingAdmissionPolicy", obj["spec"]["policyName"]
        ):
            out.append(f"{describe(obj)}: ValidatingAdmissionPolicy {obj['spec']['policyName']} missing")
        if kind == "Deployment":
            pod = obj["spec"]["template"]["spec"]
            if not _has(idx, "ServiceAccount", pod.get("serviceAccountName", "default"), ns):
                out.append(f"{describe(obj)}: ServiceAccount {pod.get('serviceAccountName')} missing")
            for volume in pod.get("volumes", []):
                if "configMap" in volume and not _has(idx, "ConfigMap", volume["configMap"]["name"], ns):
                    out.append(f"{describe(obj)}: ConfigMap {volume['configMap']['name']} missing")
    out += [
        f"team default priority {p}: no WorkloadPriorityClass"
        for p in sorted(priorities)
        if not _has(idx, "WorkloadPriorityClass", p)
    ]
    return out


def reference_problems(
    objects: Sequence[dict[str, Any]], policy: SchedulingPolicy, pools: Sequence[PoolView]
) -> list[str]:
    idx = index(objects)
    if len(idx) != len(objects):
        return ["two objects share a kind, namespace and name"]
    return _kueue(idx, pools) + _namespaces_and_rbac(idx, policy)
