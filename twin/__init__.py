"""The twin: the stack's cluster on real Kubernetes components, as local processes (`invoke twin`).

etcd, kube-apiserver, kube-controller-manager, the default kube-scheduler, kwok (the kubelet of fake nodes),
Kueue, the stack's `gpu-binpack` scheduler and the extender, all built from their Go modules at the pinned
versions (`toolchain`), started in a network namespace of their own that has only `lo` (`netns`), with the
stack's pools registered as kwok nodes exactly as they register on the real platform (`nodes`) and the stack's
scheduling policy deployed through the real Pulumi engine (`lifecycle`). docs/twin.md says what it is and is not.
"""
