"""`twin.api_reads` prints what kubectl prints: each read the tests and the twin's waits make, answered on a
kept-alive connection, against the same read through kubectl on the same twin; a read that fails is kubectl's
own, with kubectl's words."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from tests.support import eventually
from tests.twin.kube import Kube, name
from twin import api_reads


def through_kubectl(kube: Kube, *args: str) -> subprocess.CompletedProcess[str]:
    who = [f"--as={kube.user}", *(f"--as-group={g}" for g in kube.groups)] if kube.user else []
    argv = [str(kube.binary), f"--kubeconfig={kube.kubeconfig}", *who, *args]
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)


def both(kube: Kube, *args: str) -> tuple[Any, Any]:
    answered = api_reads.read(kube.kubeconfig, args, kube.user, kube.groups)
    assert answered is not None, f"{args} was left to kubectl"
    printed = through_kubectl(kube, *args)
    assert printed.returncode == 0, printed.stderr
    return json.loads(answered), json.loads(printed.stdout)


@pytest.fixture(scope="module")
def objects(metal_twin: Kube) -> tuple[str, str]:
    """A namespace with five labelled ConfigMaps (and one unlabelled), made for these reads; nothing else
    writes to them, so two reads of them see the same objects."""
    namespace = name("reads")
    maps = [{"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": f"m{i}", "namespace": namespace, "labels": {"set": "five"} if i < 5 else {}},
             "data": {"i": str(i)}} for i in range(6)]  # fmt: skip
    metal_twin.ok("create", "namespace", namespace)
    metal_twin.apply(maps)
    # the controller-manager adds its own ConfigMap to every namespace: waited for, so it is not added between
    # the two reads of a comparison
    eventually(lambda: metal_twin.attempt("get", "cm", "kube-root-ca.crt", "-n", namespace).ok,
               "the namespace's kube-root-ca.crt")  # fmt: skip
    return namespace, "set=five"


@pytest.mark.parametrize("kind", ["configmaps", "configmap", "cm", "ConfigMap"])
def test_a_namespaced_list_by_each_of_its_names(
    metal_twin: Kube, objects: tuple[str, str], kind: str
) -> None:
    namespace, _ = objects
    kind = (
        kind.rstrip(".") if kind.endswith("v1.") else kind
    )  # `configmaps.v1` names the core group's version
    mine, kubectls = both(metal_twin, "get", kind, "-n", namespace, "-o", "json")
    assert mine == kubectls
    assert sorted(m["metadata"]["name"] for m in mine["items"]) == [
        "kube-root-ca.crt",
        *(f"m{i}" for i in range(6)),
    ]


def test_one_object_a_selector_and_pages(
    metal_twin: Kube, objects: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    namespace, selector = objects
    mine, kubectls = both(metal_twin, "get", "configmap", "m3", "-n", namespace, "-o", "json")
    assert mine == kubectls and mine["data"] == {"i": "3"} and "managedFields" not in mine["metadata"]
    monkeypatch.setattr(api_reads, "PAGE", 2)  # five objects in three pages
    mine, kubectls = both(metal_twin, "get", "cm", "-n", namespace, "-l", selector, "-o", "json")
    assert mine == kubectls and len(mine["items"]) == 5


@pytest.mark.parametrize(
    "args",
    [
        ("get", "resourceflavors.kueue.x-k8s.io", "-o", "json"),  # a CRD, cluster-scoped, by group
        ("get", "ClusterQueue", "-o", "json"),  # by kind
        ("get", "priorityclasses", "-o", "json"),
        ("get", "localqueues", "-A", "-o", "json"),
        ("get", "crd", "clusterqueues.kueue.x-k8s.io", "-o", "json"),
    ],
)  # fmt: skip
def test_the_stacks_objects_read_as_kubectl_prints_them(metal_twin: Kube, args: tuple[str, ...]) -> None:
    mine, kubectls = both(metal_twin, *args)
    for doc in (mine, kubectls):  # Kueue writes queues' status as it goes; their spec and names stay
        for obj in doc.get("items", [doc]):
            obj.pop("status", None)
            obj["metadata"].pop("resourceVersion", None)
            obj["metadata"].pop("generation", None)
    assert mine == kubectls


def test_a_refused_or_missing_read_is_kubectls_own(metal_twin: Kube, objects: tuple[str, str]) -> None:
    """A team member's read of another namespace is refused by RBAC with kubectl's message; a missing object
    is kubectl's NotFound, or nothing with --ignore-not-found."""
    namespace, _ = objects
    member = metal_twin.as_member(("team:nobody",), user="mallory@example.com")
    assert (
        api_reads.read(
            member.kubeconfig, ("get", "cm", "-n", namespace, "-o", "json"), member.user, member.groups
        )
        is None
    )
    refused = member.attempt("get", "cm", "-n", namespace, "-o", "json")
    assert not refused.ok and "Forbidden" in refused.err and "mallory@example.com" in refused.err, refused
    missing = metal_twin.attempt("get", "cm", "nowhere", "-n", namespace, "-o", "json")
    assert not missing.ok and 'configmaps "nowhere" not found' in missing.err, missing
    ignored = metal_twin.attempt("get", "cm", "nowhere", "-n", namespace, "-o", "json", "--ignore-not-found")
    assert ignored.ok and ignored.out.strip() == "", ignored
