"""kwok, the kubelet of the twin's nodes, and the pod lifecycle the twin promises.

kwok needs its stages in its configuration file or it exits ("no stages found", kubernetes-sigs/kwok@v0.8.0
pkg/kwok/cmd/root.go). The twin loads kwok's own stage files from its module zip
(`kustomize/stage/...`), keeps node-initialize (which keeps the capacity a node was created with) and the
lease heartbeat (without it the node-lifecycle controller marks the nodes Unknown and taints them), pod-ready
and pod-delete, and replaces pod-complete (which finishes every Job pod at once) with the twin's one convention:

    a pod on a twin node stays Running until it is deleted, or finishes (Succeeded, exit code 0) after the
    seconds in its `gpufleet.io/twin-duration` annotation.

The duration is read with kwok's `delay.durationFrom` JQ expression, a Go duration string
(pkg/utils/lifecycle/value_duration_from.go: time.ParseDuration), so the annotation's seconds get an "s".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from twin.nodes import KWOK_ANNOTATION, KWOK_LABEL, KWOK_VALUE
from twin.processes import Process, Supervisor, free_port, http_ok, wait_until

DURATION_ANNOTATION = "gpufleet.io/twin-duration"
LEASE_SECONDS = 40  # the kubelet's default node lease duration
STAGE_FILES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-delete.yaml",
)
# The upstream stage the twin's completion is made from (its status template, a new selector and a delay).
COMPLETE_FROM = "pod/fast/pod-complete.yaml"
NAMED = '.metadata.annotations["gpufleet.io/twin-duration"]'


def _load(stages: Path, relative: str) -> dict[str, Any]:
    doc = yaml.safe_load((stages / relative).read_text())
    if not isinstance(doc, dict) or doc.get("kind") != "Stage":
        raise ValueError(f"{relative}: not a kwok Stage")
    return doc


def timed_completion(stages: Path) -> dict[str, Any]:
    """kwok's pod-complete stage, for pods that carry the duration annotation (any owner) after that long."""
    stage = _load(stages, COMPLETE_FROM)
    stage["metadata"] = {"name": "pod-complete-after-twin-duration"}
    stage["spec"]["selector"] = {
        "matchExpressions": [
            {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
            {"key": ".status.phase", "operator": "In", "values": ["Running"]},
            {"key": NAMED, "operator": "Exists"},
        ]
    }
    stage["spec"]["delay"] = {
        "durationMilliseconds": 0,
        "durationFrom": {"jq": {"expression": f'{NAMED} + "s"'}},
    }
    return stage


def kwok_config(stages: Path) -> list[dict[str, Any]]:
    """The documents of kwok's `--config`: its stages (the upstream ones kept, the twin's completion)."""
    return [*(_load(stages, f) for f in STAGE_FILES), timed_completion(stages)]


def start_kwok(
    kwok: Path, stages: Path, kubeconfig: Path, sup: Supervisor, folder: Path, *, by_annotation: bool = False
) -> Process:
    """kwok for the twin's nodes: those labelled `type=kwok`, or with `by_annotation` every node annotated
    `kwok.x-k8s.io/node: fake`, which the twin's nodes are and the nodes Karpenter's kwok provider launches are
    too (kwok/cloudprovider/cloudprovider.go @v1.14.1 `addKwokAnnotation`; they carry no `type` label)."""
    config = folder / "kwok.yaml"
    config.write_text(yaml.safe_dump_all(kwok_config(stages), sort_keys=False))
    port = free_port()
    proc = sup.start(
        "kwok",
        [
            kwok,
            f"--kubeconfig={kubeconfig}",
            f"--config={config}",
            f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake"
            if by_annotation
            else f"--manage-nodes-with-label-selector={KWOK_LABEL}={KWOK_VALUE}",
            "--cidr=10.244.0.0/16",
            f"--node-lease-duration-seconds={LEASE_SECONDS}",
            f"--server-address=127.0.0.1:{port}",
        ],
    )
    wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), "kwok /healthz", proc, 60)
    return proc
