"""Launch-template data for EKS managed node groups, as plain `aws.ec2.LaunchTemplate` arguments.

EKS merges this template with what it generates itself, under rules that reject a template setting what the
node group already sets (AMI, IAM instance profile, subnets) and, for everything but capacity blocks, the
instance type. What belongs here:

- IMDSv2 required with a hop limit of 1: pods on the pod network cannot reach the node's instance role;
  every add-on we install gets credentials through IRSA and is told its region, and host-network daemons
  (VPC CNI, node monitoring agent) are one hop away like the node itself.
- an encrypted gp3 volume of the pool's size on the device the AMI family keeps its data on: the root
  device `/dev/xvda` on AL2023, the data volume `/dev/xvdb` on Bottlerocket (whose `/dev/xvda` is the small
  read-only OS image);
- EFA interfaces with the cluster security group: an EFA (with ENA) interface as the primary (network card 0,
  device index 0) and `efa-only` interfaces on every other network card at device index 0 (EC2 User Guide,
  "Maximize network bandwidth on instances with multiple network cards": an EFA-only interface cannot be
  the primary and takes no IP address). A p5.48xlarge therefore takes one VPC address for its interfaces,
  not 32; the VPC CNI leaves EFA-only interfaces alone;
- the node user data (AL2023 NVIDIA: see infra.aws.userdata);
- a cluster placement group for EFA pools on on-demand or spot capacity (never with a reservation, whose
  instances are already placed);
- for capacity blocks: the `capacity-block` market type, the reservation id and the instance type.
"""

from __future__ import annotations

from typing import Any

IMDS_HOP_LIMIT = 1
ROOT_DEVICE = {"AL2023_NVIDIA": "/dev/xvda", "AL2023": "/dev/xvda", "BOTTLEROCKET_NVIDIA": "/dev/xvdb"}


def metadata_options() -> dict[str, Any]:
    return {
        "http_endpoint": "enabled",
        "http_tokens": "required",
        "http_put_response_hop_limit": IMDS_HOP_LIMIT,
        "instance_metadata_tags": "disabled",
    }


def block_devices(ami_family: str, size_gib: int) -> list[dict[str, Any]]:
    return [
        {
            "device_name": ROOT_DEVICE[ami_family],
            "ebs": {
                "volume_size": size_gib,
                "volume_type": "gp3",
                "encrypted": "true",
                "delete_on_termination": "true",
            },
        }
    ]


def efa_interfaces(count: int, security_group_id: Any) -> list[dict[str, Any]]:
    """One EFA per network card: EFA with ENA on card 0, EFA-only on the others; subnets come from the group."""
    return [
        {
            "device_index": 0,
            "network_card_index": card,
            "interface_type": "efa" if card == 0 else "efa-only",
            "security_groups": [security_group_id],
            "delete_on_termination": "true",
        }
        for card in range(count)
    ]


def launch_template_data(
    *,
    ami_family: str,
    volume_gib: int,
    tags: dict[str, str],
    efa_count: int = 0,
    security_group_id: Any = None,
    placement_group: Any = None,
    capacity_reservation_id: str | None = None,
    instance_type: str | None = None,
    user_data: str | None = None,
) -> dict[str, Any]:
    """Keyword arguments for `aws.ec2.LaunchTemplate` (besides name and options)."""
    data: dict[str, Any] = {
        "metadata_options": metadata_options(),
        "block_device_mappings": block_devices(ami_family, volume_gib),
        "tag_specifications": [{"resource_type": kind, "tags": tags} for kind in ("instance", "volume")],
        "update_default_version": True,
    }
    if user_data:
        data["user_data"] = user_data
    if efa_count:
        data["network_interfaces"] = efa_interfaces(efa_count, security_group_id)
    if placement_group is not None:
        if capacity_reservation_id:
            raise ValueError("a capacity reservation already fixes placement; no placement group with it")
        data["placement"] = {"group_name": placement_group}
    if capacity_reservation_id:
        data["instance_market_options"] = {"market_type": "capacity-block"}
        data["capacity_reservation_specification"] = {
            "capacity_reservation_target": {"capacity_reservation_id": capacity_reservation_id}
        }
        data["instance_type"] = instance_type
    return data
