"""Simulating a stack before it is deployed: the cluster and workload as the stack deploys them (`stack`), the
static replay's run and report, and the dynamic comparison over time (`dynamic`, `dynamic_report`).

The simulators themselves live in `scheduler.sim`; this room maps a spec onto them and writes the reports.
"""
