"""A stand-in for cluster-autoscaler 1.35 on aws twins: the release the stacks deploy for Kubernetes 1.35
(`infra.versions.PER_MINOR`), played from its source at tag cluster-autoscaler-1.35.2, because the Go module
proxy refuses every version of k8s.io/autoscaler/cluster-autoscaler and it cannot be built here.

What it plays (each module cites the source it follows):
- the node groups it discovers and what it knows of each: templates, sizes, scale-down settings, boot times
  (`groups`);
- scale-up for unschedulable pods: only a group whose template the pod fits (taints, selectors, resources, in
  the scheduler's words), enough nodes for the pods by first-fit, the priority expander's tiers then least
  waste, and the `TriggeredScaleUp` / `NotTriggerScaleUp` events on the pods (`fit`, `loop`);
- ProvisioningRequests of class best-effort-atomic-scale-up, with the autoscaler's conditions, reasons,
  retry back-off and booking expiry (`provisioning`);
- scale-down of empty nodes above their group's minimum after the group's unneeded time, not within the
  cool-down after a scale-up (`loop`).
What it leaves out: draining under-utilised nodes whose pods could move elsewhere (gpufleet's GPU groups forbid
it for busy GPU nodes anyway, `infra.aws.tags.scale_down_options`), node-group balancing, failed boots and
their back-off, and the capacity a booked request holds against other requests. Karpenter's pools are not its
to scale.
"""

from twin.autoscaler.loop import Autoscaler

__all__ = ["Autoscaler"]
