"""Which kubectl commands `twin.api_reads` answers itself: only `get KIND [NAME] -o json` with a namespace,
every namespace or a selector; anything else is kubectl's. What it answers is checked against kubectl on a
twin in tests/twin/test_api_reads.py."""

from __future__ import annotations

import pytest

from twin.api_reads import Read, parse


@pytest.mark.parametrize(
    ("args", "read"),
    [
        (["get", "nodes", "-o", "json"], Read("nodes")),
        (["get", "pod", "p1", "-n", "team-a", "-o", "json"], Read("pod", "p1", "team-a")),
        (["get", "workloads.kueue.x-k8s.io", "-o", "json", "-A"], Read("workloads.kueue.x-k8s.io", all_namespaces=True)),
        (["get", "pods", "-o", "json", "-n", "kueue-system", "-l", "app=x"], Read("pods", namespace="kueue-system", selector="app=x")),
        (["get", "crd", "c.example.com", "-o", "json", "--ignore-not-found"], Read("crd", "c.example.com")),
        (["get", "cm", "--namespace=ns", "--output=json"], Read("cm", namespace="ns")),
    ],
)  # fmt: skip
def test_plain_reads_are_answered(args: list[str], read: Read) -> None:
    assert parse(args) == read


@pytest.mark.parametrize(
    "args",
    [
        ["get", "nodes"],  # a table
        ["get", "nodes", "-o", "yaml"],
        ["get", "nodes", "-o", "jsonpath={.items[0].metadata.name}"],
        ["get", "crd", "a", "b", "-o", "json"],  # several names
        ["get", "pods,jobs", "-o", "json"],
        ["get", "pod/p1", "-o", "json"],
        ["get", "pod", "p1", "-A", "-o", "json"],
        ["get", "pod", "p1", "-l", "a=b", "-o", "json"],
        ["get", "pods", "-o", "json", "--watch"],
        ["get", "--raw", "/metrics"],
        ["get"],
        ["apply", "-f", "-", "-o", "json"],
        ["auth", "can-i", "get", "pods"],
    ],
)
def test_everything_else_is_left_to_kubectl(args: list[str]) -> None:
    assert parse(args) is None
