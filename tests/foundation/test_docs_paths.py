"""Every repository path the docs and the README name exists, so a newcomer following them lands in a real room."""

from __future__ import annotations

import re

from tests.conftest import ROOT

DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
ROOTS = ("infra", "scheduler", "twin", "tests", "benchmarks", "scripts", "ansible", "docs")
PATH = re.compile(rf"(?<![\w./-])((?:{'|'.join(ROOTS)})/[\w./*<>{{}},-]*)")
# Named on purpose though not in the tree: where a room was before the layout redesign (decisions.md), and the
# FGD paper artifact's own script (simulation.md).
ELSEWHERE = {"infra/twin/", "scripts/generate_config_and_run.py"}


def candidates(mention: str) -> list[str]:
    """A mention as glob patterns: `<placeholder>` matches anything, `{a,b}` is either."""
    mention = mention.rstrip(".,:;")
    head, brace, rest = mention.partition("{")
    options, tail = rest.split("}", 1) if brace and "}" in rest else ("", rest)
    names = [head + option + tail for option in options.split(",")] if brace else [mention]
    return [re.sub(r"<[^>]*>", "*", name) for name in names]


def test_every_path_the_docs_name_exists() -> None:
    missing = [
        f"{doc.relative_to(ROOT)}:{n}: {pattern}"
        for doc in DOCS
        for n, line in enumerate(doc.read_text().splitlines(), 1)
        for found in PATH.finditer(line)
        if found.group(1).rstrip(".,:;") not in ELSEWHERE
        for pattern in candidates(found.group(1))
        if not any(ROOT.glob(pattern.rstrip("/")))
    ]
    assert missing == []
