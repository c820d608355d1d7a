"""The `existing` platform: an already-running cluster reached through a kubeconfig (bare metal, on-prem)."""
