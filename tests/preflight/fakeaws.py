"""A real AWS API on loopback (moto's HTTP server), seeded in-process with what moto does not model.

moto 5.2.5 serves EC2 instance type offerings from real per-region data, but it has no EC2 vCPU quotas
(its Service Quotas backend knows only `vpc`), reserves `/aws/service/*` SSM names (a client may not write
them, just as on AWS), and has no DescribeCapacityReservations. `FakeAws` fills exactly those gaps inside the
server's process: public SSM parameters go straight into moto's SSM backend, and small handlers answer
`GetServiceQuota` and `GetAWSDefaultServiceQuota` for ec2, `DescribeCapacityReservations` and EKS
`DescribeAddonVersions` (moto has no add-on API; the reply has the shape of the EKS API reference's
DescribeAddonVersions response: `addons[].addonVersions[].addonVersion`) from per-test tables. IAM roles and
EKS node groups are moto's own. Our code talks to all of it over HTTP through boto3, exactly as it talks to
AWS.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import moto.eks.urls as eks_urls
from moto.core import DEFAULT_ACCOUNT_ID
from moto.core.responses import ActionResult
from moto.core.utils import utcnow
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.responses import EC2Response
from moto.eks.models import eks_backends
from moto.iam.models import iam_backends
from moto.server import ThreadedMotoServer
from moto.servicequotas.exceptions import NoSuchResource
from moto.servicequotas.models import ServiceQuotasBackend
from moto.servicequotas.responses import ServiceQuotasResponse
from moto.ssm.models import Parameter, ssm_backends

from infra import catalog
from infra.aws.addons.ebs_csi import ADDON as EBS_CSI_ADDON
from infra.aws.addons.eks_addons import MONITORING_ADDON
from infra.pools import capacity_types, karpenter_pools
from infra.preflight.ami import pool_release, system_release
from infra.preflight.checks import vcpu_demand
from infra.preflight.karpenter import SPOT_SERVICE_ROLE
from infra.spec import ClusterSpec

ORIGINAL_GET_QUOTA = ServiceQuotasBackend.get_service_quota


class FakeAws:
    """Per-test seed tables for the parts of AWS moto lacks."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.quotas: dict[str, float] = {}  # applied quotas (GetServiceQuota)
        self.defaults: dict[str, float] = {}  # AWS defaults (GetAWSDefaultServiceQuota)
        self.reservations: dict[str, dict[str, Any]] = {}
        self.reservations_error: tuple[str, str] | None = None  # (code, message) to answer instead
        self.ssm_regions: set[str] = set()
        self.addon_versions: dict[tuple[str, str], list[str]] = {}  # (add-on, k8s minor) -> versions
        self.iam_roles: list[str] = []
        self.eks_regions: set[str] = set()
        # cluster -> principal ARNs with an access entry (ListAccessEntries); moto's EKS keeps none
        # Kubernetes minor -> DescribeClusterVersions' ClusterVersionInformation (dates as epoch seconds)
        self.cluster_versions: dict[str, dict[str, Any]] = {}
        self.access_entries: dict[str, list[str]] = {}

    def client(self, service: str, region: str = "us-east-1") -> Any:
        # Its own keys: seeding and cleanup must work whatever credentials a test puts in the environment.
        return boto3.client(
            service,
            region_name=region,
            endpoint_url=self.url,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    # ---- seeding -------------------------------------------------------------------------------------
    def seed_quota(self, code: str, value: float) -> None:
        self.quotas[code] = value

    def seed_parameter(self, region: str, name: str, value: str = "ami-0123456789abcdef0") -> None:
        backend = ssm_backends[DEFAULT_ACCOUNT_ID][region]
        param = Parameter(
            account_id=DEFAULT_ACCOUNT_ID,
            name=name,
            value=value,
            parameter_type="String",
            description=None,
            allowed_pattern=None,
            keyid=None,
            last_modified_date=utcnow(),
            version=1,
            data_type="aws:ec2:image",
        )
        backend._parameters[name].append(param)
        self.ssm_regions.add(region)

    def seed_reservation(self, rid: str, **fields: Any) -> dict[str, Any]:
        self.reservations[rid] = {"CapacityReservationId": rid, **fields}
        return self.reservations[rid]

    def seed_addon_version(self, addon: str, minor: str, version: str) -> None:
        self.addon_versions.setdefault((addon, minor), []).append(version)

    def seed_role(self, arn: str) -> None:
        name = arn.split(":role/", 1)[1].rsplit("/", 1)[-1]
        self.client("iam").create_role(RoleName=name, AssumeRolePolicyDocument="{}")
        self.iam_roles.append(name)

    def seed_spot_service_role(self) -> None:
        """The EC2 Spot service-linked role under its real name and path (moto 5.2.5's CreateServiceLinkedRole
        names it `AWSServiceRoleForspot`, so it is created as a plain role)."""
        self.client("iam").create_role(
            RoleName=SPOT_SERVICE_ROLE,
            Path="/aws-service-role/spot.amazonaws.com/",
            AssumeRolePolicyDocument="{}",
        )
        self.iam_roles.append(SPOT_SERVICE_ROLE)

    def seed_cluster(self, region: str, cluster: str, version: str, creator: str | None = None) -> None:
        """An existing EKS cluster (moto's own EKS) with its creator's access entry, which EKS makes itself
        (`bootstrapClusterCreatorAdminPermissions`); the creator is the fake's own identity unless named."""
        eks = self.client("eks", region)
        eks.create_cluster(
            name=cluster,
            version=version,
            roleArn="arn:aws:iam::123456789012:role/eks",
            resourcesVpcConfig={"subnetIds": ["subnet-1"]},
        )
        self.access_entries[cluster] = [creator or self.client("sts").get_caller_identity()["Arn"]]
        self.eks_regions.add(region)

    def seed_node_group(
        self, region: str, cluster: str, name: str, *, version: str, release: str, desired: int
    ) -> None:
        """An existing EKS managed node group (moto's own EKS), as a previous deploy left it."""
        eks = self.client("eks", region)
        if cluster not in eks.list_clusters()["clusters"]:
            self.seed_cluster(region, cluster, version)
        eks.create_nodegroup(
            clusterName=cluster,
            nodegroupName=name,
            nodeRole="arn:aws:iam::123456789012:role/node",
            subnets=["subnet-1"],
            scalingConfig={"minSize": 0, "desiredSize": desired, "maxSize": max(desired, 1)},
            capacityType="CAPACITY_BLOCK",
            version=version,
            releaseVersion=release,
        )
        self.eks_regions.add(region)

    def seed_clean(self, spec: ClusterSpec, headroom: int = 0) -> None:
        """Everything `spec` needs to pass: quotas at exactly the demand, AMIs, fitting reservations."""
        for code, users in vcpu_demand(spec).items():
            self.seed_quota(code, sum(v for _, v in users) + headroom)
        self.seed_parameter(spec.region or "", system_release(spec).parameters[0])
        self.seed_addon_version(
            MONITORING_ADDON, spec.cluster.kubernetes_version, spec.versions.node_monitoring_agent_addon
        )
        self.seed_addon_version(
            EBS_CSI_ADDON, spec.cluster.kubernetes_version, spec.versions.ebs_csi_driver_addon
        )
        far = (datetime.now(UTC) + timedelta(days=365)).timestamp()
        self.cluster_versions[spec.cluster.kubernetes_version] = {
            "status": "STANDARD_SUPPORT",
            "endOfStandardSupportDate": far,
        }
        for arn in spec.cluster.admin_role_arns:
            self.seed_role(arn)
        if any("spot" in capacity_types(p) for p in karpenter_pools(spec)):
            self.seed_spot_service_role()
        for pool in spec.node_pools:
            self.seed_parameter(spec.region or "", pool_release(spec, pool).parameters[0])
            if pool.capacity_type == "CAPACITY_BLOCK" and pool.capacity_reservation_id:
                now = datetime.now(UTC)
                self.seed_reservation(
                    pool.capacity_reservation_id,
                    InstanceType=pool.instance_type,
                    AvailabilityZone=pool.availability_zone,
                    TotalInstanceCount=pool.max_size,
                    AvailableInstanceCount=pool.max_size,
                    State="active",
                    ReservationType="capacity-block",
                    StartDate=now - timedelta(days=1),
                    EndDate=now + timedelta(days=7),
                )

    def reset(self) -> None:
        for region in self.ssm_regions:
            ssm_backends[DEFAULT_ACCOUNT_ID][region]._parameters.clear()
        self.quotas.clear()
        self.defaults.clear()
        self.reservations.clear()
        self.reservations_error = None
        self.addon_versions.clear()
        iam = iam_backends[DEFAULT_ACCOUNT_ID]["global"]  # in-process: a test may have made moto check keys
        for name in self.iam_roles:
            iam.delete_role(name)
        self.iam_roles.clear()
        for region in self.eks_regions:
            eks_backends[DEFAULT_ACCOUNT_ID][region].clusters.clear()
        self.eks_regions.clear()
        self.access_entries.clear()
        self.cluster_versions.clear()


CURRENT: list[FakeAws] = []


def _quota(quota_code: str, value: float) -> dict[str, Any]:
    return {
        "ServiceCode": "ec2",
        "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
        "QuotaCode": quota_code,
        "QuotaName": catalog.QUOTA_NAMES.get(quota_code, quota_code),
        "Value": value,
        "Unit": "None",
        "Adjustable": True,
        "GlobalQuota": False,
    }


def _get_service_quota(self: ServiceQuotasBackend, service_code: str, quota_code: str) -> dict[str, Any]:
    fake = CURRENT[-1] if CURRENT else None
    if service_code == "ec2" and fake is not None and quota_code in fake.quotas:
        return _quota(quota_code, fake.quotas[quota_code])
    return ORIGINAL_GET_QUOTA(
        self, service_code, quota_code
    )  # ec2: NoSuchResourceException, as for an unchanged quota


def _get_aws_default_service_quota(self: ServiceQuotasResponse) -> str:
    params = json.loads(self.body)
    fake, code = CURRENT[-1], str(params.get("QuotaCode"))
    if params.get("ServiceCode") != "ec2" or code not in fake.defaults:
        raise NoSuchResource
    return json.dumps({"Quota": _quota(code, fake.defaults[code])})


def _describe_capacity_reservations(self: EC2Response) -> ActionResult:
    fake = CURRENT[-1]
    if fake.reservations_error is not None:
        raise EC2ClientError(*fake.reservations_error)
    wanted = self._get_param("CapacityReservationIds", []) or list(fake.reservations)
    for rid in wanted:
        if rid not in fake.reservations:
            raise EC2ClientError(
                "InvalidCapacityReservationId.NotFound", f"The capacity reservation ID '{rid}' does not exist"
            )
    return ActionResult({"CapacityReservations": [fake.reservations[rid] for rid in wanted]})


def _describe_addon_versions(request: Any, full_url: str, headers: Any) -> tuple[int, dict[str, str], str]:
    """GET /addons/supported-versions?addonName=&kubernetesVersion= (EKS API DescribeAddonVersions)."""
    from urllib.parse import parse_qs, urlparse

    query = parse_qs(urlparse(full_url).query)
    addon, minor = query.get("addonName", [""])[0], query.get("kubernetesVersion", [""])[0]
    versions = CURRENT[-1].addon_versions.get((addon, minor), [])
    body = {
        "addons": [
            {
                "addonName": addon,
                "type": "observability",
                "addonVersions": [
                    {
                        "addonVersion": v,
                        "compatibilities": [{"clusterVersion": minor, "defaultVersion": i == 0}],
                    }
                    for i, v in enumerate(versions)
                ],
            }
        ]
        if versions
        else []
    }
    return 200, {"Content-Type": "application/json"}, json.dumps(body)


def _list_access_entries(request: Any, full_url: str, headers: Any) -> tuple[int, dict[str, str], str]:
    """GET /clusters/<name>/access-entries (EKS API ListAccessEntries): the principal ARNs, one page."""
    from urllib.parse import unquote, urlparse

    cluster = unquote(urlparse(full_url).path.split("/")[2])
    entries = CURRENT[-1].access_entries.get(cluster)
    if entries is None:
        body = {"message": f"No cluster found for name: {cluster}."}
        return (
            404,
            {"Content-Type": "application/json", "x-amzn-ErrorType": "ResourceNotFoundException"},
            json.dumps(body),
        )
    return 200, {"Content-Type": "application/json"}, json.dumps({"accessEntries": entries})


def _describe_cluster_versions(request: Any, full_url: str, headers: Any) -> tuple[int, dict[str, str], str]:
    """GET /cluster-versions?clusterVersions=<minor> (EKS API DescribeClusterVersions), from the seed table."""
    from urllib.parse import parse_qs, urlparse

    wanted = parse_qs(urlparse(full_url).query).get("clusterVersions", [])
    table = CURRENT[-1].cluster_versions
    found = [{"clusterVersion": v, **table[v]} for v in wanted if v in table]
    return 200, {"Content-Type": "application/json"}, json.dumps({"clusterVersions": found})


EKS_ROUTES = {
    "{0}/cluster-versions$": _describe_cluster_versions,
    "{0}/addons/supported-versions$": _describe_addon_versions,
    "{0}/clusters/(?P<name>[^/]+)/access-entries$": _list_access_entries,
}

PATCHES = (
    (ServiceQuotasBackend, "get_service_quota", _get_service_quota),
    (ServiceQuotasResponse, "get_aws_default_service_quota", _get_aws_default_service_quota),
    (EC2Response, "describe_capacity_reservations", _describe_capacity_reservations),
)


@contextmanager
def fake_aws_server() -> Iterator[str]:
    """moto's HTTP server on a free loopback port, with the handlers above installed; yields its URL.

    Nests safely (each exit restores exactly what its entry found), so two test directories may each start one.
    """
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    saved = [(cls, name, cls.__dict__.get(name)) for cls, name, _ in PATCHES]
    for cls, name, handler in PATCHES:
        setattr(cls, name, handler)
    eks_urls.url_paths.update(EKS_ROUTES)  # read when the server first builds its EKS app
    try:
        yield f"http://{host}:{port}"
    finally:
        for route in EKS_ROUTES:
            eks_urls.url_paths.pop(route, None)
        for cls, name, before in saved:
            if before is None:
                delattr(cls, name)
            else:
                setattr(cls, name, before)
        server.stop()
