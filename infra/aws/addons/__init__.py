"""The EKS add-ons gpufleet installs on AWS: EKS-managed add-ons, the cluster-autoscaler, EFA and the VPC CNI.

Pure Helm values and add-on settings in one module each; `component` applies them with Pulumi.
"""
