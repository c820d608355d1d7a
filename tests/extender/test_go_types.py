"""The Go reader that stands in for the YAML extracts on machines with only the fetched upstream files."""

from __future__ import annotations

from pathlib import Path

from tests.extender.go_types import load_types, parse_go

SNIPPET = """package v1

const (
\t// Lowest.
\tMinThing int64 = 0

\tMaxThing int64 = 10
)

// Args is a request.
type Args struct {
\t// Pod being scheduled
\tPod *v1.Pod
\tNodeNames *[]string
}

type Tagged struct {
\tURLPrefix string `json:"urlPrefix"`
\tWeight int64 `json:"weight,omitempty"`
}
"""


def test_parse_go_reads_untagged_and_tagged_fields_and_constants() -> None:
    doc = parse_go(SNIPPET)
    by = {t["name"]: [f["json"] for f in t["fields"]] for t in doc["types"]}
    assert by == {"Args": ["Pod", "NodeNames"], "Tagged": ["urlPrefix", "weight"]}
    assert {c["name"]: c["value"] for c in doc["constants"]} == {"MinThing": "0", "MaxThing": "10"}


def test_the_extract_and_the_go_reader_agree_on_the_wire_names(shared_dir: Path, tmp_path: Path) -> None:
    """Same struct and field names either way: the extract's json names are what parse_go gives for Go."""
    extract = load_types(shared_dir, "extender-v1-types.yaml", "none.go")
    go = "\n".join(
        ["package v1", "const (", *(f"\t{c['name']} int64 = {c['value']}" for c in extract["constants"]), ")"]
        + [
            f"type {t['name']} struct {{\n" + "".join(f"\t{f['go']} {f['type']}\n" for f in t["fields"]) + "}"
            for t in extract["types"]
            if t.get("kind") == "struct"
        ]
    )
    (tmp_path / "kube-scheduler" / "upstream").mkdir(parents=True)
    (tmp_path / "kube-scheduler" / "upstream" / "x.go").write_text(go + "\n")
    parsed = load_types(tmp_path, "missing.yaml", "x.go")
    want = {
        t["name"]: [f["json"] for f in t["fields"]] for t in extract["types"] if t.get("kind") == "struct"
    }
    assert {t["name"]: [f["json"] for f in t["fields"]] for t in parsed["types"]} == want
    assert parsed["constants"] == [{"name": c["name"], "value": c["value"]} for c in extract["constants"]]
