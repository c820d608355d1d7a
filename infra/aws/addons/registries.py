"""The Amazon ECR registry EKS replicates its add-on images to, per region.

EKS User Guide, "View Amazon container image registries for Amazon EKS add-ons" (add-ons-images): most
regions use account 602401143452, newer opt-in regions and the China partition have their own accounts (and
the China regions the `amazonaws.com.cn` domain). Nodes pull from their own region's registry; a chart whose
default image points at us-west-2 fails in China and GovCloud and pulls across regions everywhere else.
Regions missing here are refused for add-ons that need a registry (infra.rules), never guessed.
"""

from __future__ import annotations

COMMON_ACCOUNT = "602401143452"
_COMMON_REGIONS = (
    "us-east-1",
    "us-east-2",
    "us-west-1",
    "us-west-2",
    "ca-central-1",
    "sa-east-1",
    "eu-central-1",
    "eu-north-1",
    "eu-west-1",
    "eu-west-2",
    "eu-west-3",
    "ap-south-1",
    "ap-northeast-1",
    "ap-northeast-2",
    "ap-northeast-3",
    "ap-southeast-1",
    "ap-southeast-2",
)
_OWN_ACCOUNT = {
    "af-south-1": "877085696533",
    "ap-east-1": "800184023465",
    "ap-south-2": "900889452093",
    "ap-southeast-3": "296578399912",
    "ap-southeast-4": "491585149902",
    "ap-southeast-5": "151610086707",
    "ap-southeast-6": "333609536671",
    "ap-southeast-7": "121268973566",
    "cn-north-1": "918309763551",
    "cn-northwest-1": "961992271922",
}
EKS_ADDON_ACCOUNTS: dict[str, str] = {
    **dict.fromkeys(_COMMON_REGIONS, COMMON_ACCOUNT),
    **_OWN_ACCOUNT,
}


def eks_addon_registry(region: str) -> str | None:
    """`<account>.dkr.ecr.<region>.<domain>` for a region, or None when the table does not know it."""
    account = EKS_ADDON_ACCOUNTS.get(region)
    if account is None:
        return None
    domain = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"{account}.dkr.ecr.{region}.{domain}"
