"""The Pulumi program (`main: infra/` in Pulumi.yaml): read the stack's spec, build it, export the outputs."""

from __future__ import annotations

import sys
from pathlib import Path

# Pulumi runs this file with `infra/` as the program directory; the packages live one level up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pulumi

from infra.program import build
from infra.pulumi_config import load_pulumi_config

spec = load_pulumi_config()
outputs = build(spec)
for key, value in outputs.items():
    pulumi.export(key, value)
