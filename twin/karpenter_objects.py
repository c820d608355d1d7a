"""What the real Karpenter runs against on a Karpenter stack's twin: pure data from the spec.

The twin runs the core's kwok cloud provider (`sigs.k8s.io/karpenter/kwok` at the stack's Karpenter release,
`twin.karpenter`): Karpenter's own provisioner, disruption, termination and NodePool controllers, with a
provider whose instances are Nodes it creates itself (kwok/cloudprovider/cloudprovider.go @v1.14.1). What that
provider cannot take from AWS is built here:

- **Instance types**, the JSON list the provider reads from `INSTANCE_TYPES_FILE_PATH`
  (kwok/cloudprovider/helpers.go `InstanceTypeOptions`: name, offerings with requirements and a price,
  architecture, operating systems, resources). One entry per instance type a Karpenter pool allows, its cpu and
  memory from `infra.catalog`, its GPUs and EFA interfaces from the pool's node template
  (`infra.aws.nodepools.node_template_resources`, what its Kueue flavor counts), pods 110 (the kubelet
  default). One offering per zone of the pools that use it and per capacity type: On-Demand at the catalog's
  list price, Spot below it. The AWS provider launches Spot whenever the NodeClaim allows Spot
  (karpenter-provider-aws@v1.14.1 pkg/providers/instance/instance.go:745-759, `getCapacityType`); kwok picks the
  cheapest offering (`toNode`), so a Spot price below On-Demand makes the two agree. Reserved capacity (ODCRs,
  capacity blocks) gets no offering: kwok/main.go never sets `cloudprovider.ReservationIDLabel`, so the
  provider at v1.14.1 cannot offer it; a pool that is only reserved cannot launch on the twin (its types are left
  out of the file), a pool with an On-Demand fallback launches On-Demand.
- **A KWOKNodeClass per pool** instead of its EC2NodeClass (the provider supports no other class,
  `GetSupportedNodeClasses`), its `nodeRegistrationDelay` the pool's boot time (`infra.catalog.provision_delay_s`,
  the one the cluster-autoscaler stand-in and the simulator use) times the twin's time scale.
- **The stack's NodePools as rendered** (`infra.aws.karpenter.pools.node_pool`), with the class reference
  pointed at the KWOKNodeClass and one template annotation holding a digest of the pool's EC2NodeClass spec.
  On AWS an EC2NodeClass change (an AMI release, user data, volumes) drifts the pool's NodeClaims through the
  provider (karpenter-provider-aws@v1.14.1 pkg/cloudprovider/drift.go:44-60, `NodeClassDrift`, `AMIDrift`); the
  kwok provider never reports drift (`IsDrifted`), so on the twin that change reaches Karpenter as a template
  change, which the core drifts the same way (pkg/apis/v1/nodepool.go:336-342, the template hash).
- **The feature gates** the stack's chart values set (`infra.aws.karpenter.values`, `settings.featureGates`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from infra import catalog
from infra.aws.karpenter.disruption import do_not_disrupt_policy
from infra.aws.karpenter.pools import ARCHES, node_class, node_pool
from infra.aws.karpenter.values import karpenter_values
from infra.aws.nodepools import node_template_resources
from infra.pools import allowed_instance_types, capacity_types, karpenter_pools, zones
from infra.scheduling import pool_view
from infra.spec import ClusterSpec, NodePool

KWOK_API = "karpenter.kwok.sh/v1alpha1"
KWOK_GROUP = "karpenter.kwok.sh"
KWOK_CLASS = "KWOKNodeClass"
CLASS_HASH = "gpufleet.io/ec2nodeclass-hash"  # on the twin's NodePool templates: the EC2NodeClass as deployed
CAPACITY_TYPE = "karpenter.sh/capacity-type"
ZONE = "topology.kubernetes.io/zone"
MAX_PODS = "110"
# Any ratio below 1 gives Spot the precedence the AWS provider gives it; the catalog holds no Spot prices.
SPOT_PRICE_RATIO = 0.4
OFFERED = ("on-demand", "spot")
REGISTRATION_TIMEOUT_S = 900  # the capacity types the kwok provider can offer at v1.14.1


def _price(itype: catalog.InstanceType, capacity_type: str) -> float | None:
    if itype.price_per_hour is None:
        return None
    return itype.price_per_hour * (SPOT_PRICE_RATIO if capacity_type == "spot" else 1.0)


def instance_types(spec: ClusterSpec) -> list[dict[str, Any]]:
    """The kwok provider's instance types for the stack's Karpenter pools, sorted by name."""
    resources: dict[str, dict[str, str]] = {}
    offerings: dict[str, set[tuple[str, str]]] = {}
    for pool in karpenter_pools(spec):
        view = pool_view(spec, pool)
        for name in allowed_instance_types(pool):
            itype = catalog.CATALOG[name]
            extended = node_template_resources(view, itype.efa_interfaces if pool.efa else 0)
            entry = resources.setdefault(
                name, {"cpu": str(itype.vcpus), "memory": f"{itype.memory_gib}Gi", "pods": MAX_PODS}
            )
            for key, value in extended.items():
                entry[key] = str(max(int(entry.get(key, "0")), value))
            offered = [c for c in capacity_types(pool) if c in OFFERED and _price(itype, c) is not None]
            offerings.setdefault(name, set()).update((c, z) for c in offered for z in zones(spec, pool))
    out = []
    for name in sorted(n for n in resources if offerings[n]):  # a type with no offering cannot launch
        itype = catalog.CATALOG[name]
        out.append(
            {
                "name": name,
                "offerings": [
                    {
                        "Price": _price(itype, kind),
                        "Available": True,
                        "Requirements": [
                            {"key": CAPACITY_TYPE, "operator": "In", "values": [kind]},
                            {"key": ZONE, "operator": "In", "values": [zone]},
                        ],
                    }
                    for kind, zone in sorted(offerings[name])
                ],
                "architecture": ARCHES[itype.arch],
                "operatingSystems": ["linux"],
                "resources": resources[name],
            }
        )
    return out


def registration_delay(pool: NodePool, time_scale: float = 1.0) -> str:
    """The pool's boot time as a KWOKNodeClass `nodeRegistrationDelay` (whole seconds, at least one), below
    Karpenter's registration timeout: it deletes a NodeClaim whose node has not registered within 15 minutes
    (pkg/controllers/nodeclaim/lifecycle/liveness.go:52 @v1.14.1), and the catalog's boot time runs to a Ready
    GPU node, of which the kubelet's registration is the first part."""
    family = catalog.CATALOG[pool.instance_type or ""].family
    seconds = min(catalog.provision_delay_s(family), REGISTRATION_TIMEOUT_S - 60) * time_scale
    return f"{max(1, round(seconds))}s"


def node_class_hash(spec: ClusterSpec, pool: NodePool) -> str:
    """A digest of the pool's EC2NodeClass spec as the stack deploys it."""
    body = json.dumps(node_class(spec, pool)["spec"], sort_keys=True, default=str)
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def kwok_node_class(pool: NodePool, time_scale: float = 1.0) -> dict[str, Any]:
    return {
        "apiVersion": KWOK_API,
        "kind": KWOK_CLASS,
        "metadata": {"name": pool.name},
        "spec": {"nodeRegistrationDelay": registration_delay(pool, time_scale)},
    }


def twin_node_pool(spec: ClusterSpec, pool: NodePool) -> dict[str, Any]:
    """The stack's NodePool for the kwok provider: its class reference and the EC2NodeClass digest changed,
    everything else (requirements, labels, taints, limits, weight, disruption, grace period) as deployed."""
    obj = node_pool(spec, pool)
    template = obj["spec"]["template"]
    template["spec"]["nodeClassRef"] = {"group": KWOK_GROUP, "kind": KWOK_CLASS, "name": pool.name}
    annotations = template["metadata"].setdefault("annotations", {})
    annotations[CLASS_HASH] = node_class_hash(spec, pool)
    return obj


def twin_karpenter_objects(spec: ClusterSpec, time_scale: float = 1.0) -> list[dict[str, Any]]:
    """Every KWOKNodeClass, then every NodePool, then the do-not-disrupt policy, in apply order."""
    pools = karpenter_pools(spec)
    return [
        *(kwok_node_class(p, time_scale) for p in pools),
        *(twin_node_pool(spec, p) for p in pools),
        *do_not_disrupt_policy(spec),
    ]


def feature_gates(spec: ClusterSpec) -> str:
    """`FEATURE_GATES` as the chart builds it from `settings.featureGates` (the chart's deployment template
    names each gate with a capital first letter)."""
    gates = karpenter_values(spec, "", "")["settings"]["featureGates"]
    return ",".join(f"{k[0].upper()}{k[1:]}={str(v).lower()}" for k, v in sorted(gates.items()))
