"""Operating the fleet: the metrics stack, alert rules, dashboards, GPU self-healing and the usage report.

Pure builders (no pulumi at import time) turn the spec into Helm values and Kubernetes objects;
`infra.gpu_stack.operations` applies them. `rules` holds the monitoring spec rules; `usage` reads a running
Prometheus for `invoke usage`.
"""
