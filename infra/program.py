"""The Pulumi program as a function: `build(spec)` creates every resource of a validated spec.

It takes a `ClusterSpec` that `infra.spec` already validated, runs the checks that need more than the spec's
own rules (the scheduling policy, and per platform what EKS or the AMIs add) so that a bad spec raises before
any resource exists, dispatches on the platform and returns the stack outputs. Nothing happens at import
time, so tests and other programs drive it under Pulumi's mocks or the Automation API.
"""

from __future__ import annotations

from typing import Any

from infra.spec import ClusterSpec


def check(spec: ClusterSpec) -> None:
    """Raise ConfigError for a spec the program could only half create (also when built without load_stack)."""
    from infra.errors import ConfigError
    from infra.rules import resolved_problems

    if problems := resolved_problems(spec):
        raise ConfigError(problems)
    if spec.cluster.orchestrator == "slurm":
        raise ConfigError(
            "gpufleet:cluster.orchestrator: slurm creates no Kubernetes objects; `invoke render` writes its files"
        )


def build(spec: ClusterSpec) -> dict[str, Any]:
    """The stack's outputs, with `rolloutFacts`: what the next preview compares the stack file against
    (infra.rollout)."""
    check(spec)
    from infra.rollout import rollout_facts

    if spec.platform == "aws":
        from infra.aws.platform import build_aws

        return {**build_aws(spec), "rolloutFacts": rollout_facts(spec)}
    from infra.existing.platform import build_existing

    return {**build_existing(spec), "rolloutFacts": rollout_facts(spec)}
