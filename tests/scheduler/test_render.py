"""Rendering for GitOps: one file per object, stable names and order, a kustomization, and a whole-output snapshot."""

from __future__ import annotations

from pathlib import Path

import yaml
from syrupy.assertion import SnapshotAssertion

from scheduler import compile, kueue_values, render
from scheduler.kueue import as_stored
from tests.scheduler.examples import PROD, PROD_POOLS, SMALL, SMALL_POOLS


def _tree(out: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(out.iterdir())}


def test_one_file_per_object_listed_in_apply_order(tmp_path: Path) -> None:
    objects = compile(PROD, PROD_POOLS)
    render(objects, tmp_path)
    kustomization = yaml.safe_load((tmp_path / "kustomization.yaml").read_text())
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert kustomization["kind"] == "Kustomization"
    files = kustomization["resources"]
    assert len(files) == len(objects) == len(set(files))
    assert files == sorted(files)  # the rank prefix makes a directory listing the apply order
    # Written as the API server stores them (Kueue quotas as quantity strings, scheduler.kueue.as_stored).
    assert [yaml.safe_load((tmp_path / f).read_text()) for f in files] == [as_stored(o) for o in objects]
    assert "00-namespace-team-llm.yaml" in files
    assert "16-clusterqueue-llm-training.yaml" in files
    assert "17-localqueue-team-llm-default.yaml" in files


def test_rendering_is_byte_stable_and_drops_removed_objects(tmp_path: Path) -> None:
    render(compile(PROD, PROD_POOLS), tmp_path, kueue_values=kueue_values(PROD))
    first = _tree(tmp_path)
    (tmp_path / "README.md").write_text("kept")
    render(compile(PROD, PROD_POOLS), tmp_path, kueue_values=kueue_values(PROD))
    assert _tree(tmp_path) == {**first, "README.md": "kept"}
    fewer = PROD.__class__(**{**PROD.__dict__, "teams": PROD.teams[:1]})
    render(compile(fewer, PROD_POOLS), tmp_path)
    names = set(_tree(tmp_path))
    assert "00-namespace-team-research.yaml" not in names
    assert "README.md" in names  # only files the renderer wrote are replaced


def test_embedded_config_files_render_as_readable_blocks(tmp_path: Path) -> None:
    render(compile(PROD, PROD_POOLS), tmp_path, kueue_values=kueue_values(PROD))
    text = (tmp_path / "kueue-values.yaml").read_text()
    assert "controllerManagerConfigYaml: |" in text
    assert "waitForPodsReady:" in text


def test_whole_output_snapshot_of_a_small_policy(tmp_path: Path, snapshot: SnapshotAssertion) -> None:
    render(compile(SMALL, SMALL_POOLS), tmp_path, kueue_values=kueue_values(SMALL))
    assert _tree(tmp_path) == snapshot


def test_rendered_output_has_no_yaml_anchors_or_aliases(tmp_path: Path) -> None:
    """PyYAML writes `&id001`/`*id001` for an object it meets twice; nothing rendered may contain them, in
    the files or in the config files embedded in ConfigMaps and Helm values."""
    from tests.scheduler.examples import METAL, METAL_POOLS

    for policy, pools in ((PROD, PROD_POOLS), (METAL, METAL_POOLS)):
        render(compile(policy, pools), tmp_path, kueue_values=kueue_values(policy))
        for path in tmp_path.glob("*.yaml"):
            events = list(yaml.parse(path.read_text()))
            assert not [e for e in events if isinstance(e, yaml.AliasEvent) or getattr(e, "anchor", None)], (
                path
            )
            for doc in yaml.safe_load_all(path.read_text()):
                for text in (doc.get("data") or {}).values() if isinstance(doc, dict) else ():
                    embedded = list(yaml.parse(text))
                    assert not [e for e in embedded if getattr(e, "anchor", None)], path
