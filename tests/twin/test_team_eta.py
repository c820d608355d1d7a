"""`kubectl gpufleet eta` as a team member on the metal twin: the estimate is seeded from what the member's own
access reads on the real API server (their Workloads and Jobs, the ClusterQueues; not the nodes, not the other
team's Workloads), and says so.

metal: h100 is 4 hosts x 8 GPUs; vision and nlp each hold 16, borrowing up to 8. nlp runs 16 (unseen by vision
but for its queue's use), vision runs 16 with a duration hint of 10 minutes; vision's next 8-GPU job starts
when that one ends or when nlp frees 8 GPUs to borrow, whichever is first: nlp's jobs, whose starts vision
cannot read, are taken as caught partway through runs as long as vision's hinted one, so the estimate is
earlier than 10 minutes, spread by the draws. A 16-GPU manifest (of lower priority than next) waits for
vision's own job's end.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.explain.durations import HINT
from tests.support import eventually
from tests.twin.kube import Kube, name
from tests.twin.test_team_console import (
    considered,
    eight,
    h100_in_use,
    plugin,
    recorded,
    reserved,
    workload_of,
)


def normalized(text: str) -> list[str]:
    """Lines without what moves from run to run: the jobs' random suffixes, the clock, minutes counted."""
    text = re.sub(r"-[0-9a-f]{6}(-[0-9a-f]{5})?\b", "-XXXXXX", text)  # a job's, and its Workload's
    text = re.sub(r"\d\d:\d\d:\d\d UTC", "HH:MM:SS UTC", text)
    text = re.sub(r"in \d+ (s|min) \(", "in N min (", text)
    return [line.rstrip() for line in text.strip().splitlines()]


STARTS = re.compile(r"estimated start in (\d+) (s|min) \(\S+ UTC\) \(p50\), in (\d+) (s|min)")


def seconds(count: str, unit: str) -> int:
    """A time as the answer rounds it, in seconds."""
    return int(count) * (60 if unit == "min" else 1)


def hinted(job: dict[str, Any], hint: str) -> dict[str, Any]:
    job["metadata"]["annotations"] = {HINT: hint}
    return job


@pytest.fixture
def busy(metal_twin: Kube) -> Iterator[dict[str, str]]:
    made: list[tuple[str, str]] = []
    names = {"nlp": name("nlp"), "run": name("run"), "next": name("next")}
    # No history: the jobs earlier tests finished on this shared twin would be the teams' past durations (seconds
    # long), from which eta draws the unknown remaining times; these tests state what it says without any.
    for ns in ("vision", "nlp"):
        for done in metal_twin.items("jobs", ns):
            if done.get("status", {}).get("completionTime"):
                metal_twin.ok("delete", "job", done["metadata"]["name"], "-n", ns, "--wait=true")
    try:
        for key, ns, hint in (("nlp", "nlp", "2h"), ("run", "vision", "10m")):
            member = metal_twin.as_member((f"{ns}-team",))
            assert member.create(hinted(eight(names[key], ns, pods=2), hint)).ok
            made.append((ns, names[key]))
            eventually(lambda k=key, n=ns: reserved(metal_twin, n, names[k]), f"{key} admitted", 90)
        for team in ("vision", "nlp"):
            eventually(lambda t=team: h100_in_use(metal_twin, t) == 16, f"{team}'s queue to count 16", 60)
        assert metal_twin.as_member(("vision-team",)).create(eight(names["next"], "vision")).ok
        made.append(("vision", names["next"]))
        eventually(lambda: considered(metal_twin, "vision", names["next"]), "Kueue to consider next", 90)
        yield names
    finally:
        for ns, job_name in made:
            metal_twin.delete("job", job_name, ns)
        for ns, job_name in made:
            eventually(lambda n=ns, j=job_name: workload_of(metal_twin, n, j) is None, f"{job_name} gone", 90)


def test_eta_from_what_the_member_may_read(
    metal_twin: Kube, busy: dict[str, str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = plugin(metal_twin, "vision-team", "eta", busy["next"], "-n", "vision", capsys=capsys)
    assert code == 0, err
    found = STARTS.search(out)
    assert found, out
    p50, p90 = seconds(found[1], found[2]), seconds(found[3], found[4])
    # the first of nlp's two jobs to end, each with a uniform part of 10 min left (the median of the first of two
    # is 176 s, its 90th percentile 410 s), never later than vision's own job's end in 10 min
    assert 30 <= p50 < p90 <= 600 and p50 <= 300, out
    assert "your access may not list them" in out and "nlp 16 GPUs" in out, out
    assert "recorded as an Event" in out, out
    assert normalized(recorded("kubectl gpufleet eta next -n vision")) == normalized(out), out
    events = json.loads(metal_twin.ok("get", "events", "-n", "vision", "-o", "json"))["items"]
    ours = [e for e in events if e.get("reason") == "EstimatedStart"]
    wl = workload_of(metal_twin, "vision", busy["next"]) or {}
    assert any(e["involvedObject"]["name"] == wl["metadata"]["name"] for e in ours), ours
    assert all(e["message"].startswith("estimated start in") for e in ours)

    # A dry run: 16 more GPUs fit only once vision's own job ends (next, ahead of it, borrows nlp's first 8 freed);
    # vision cannot read nlp's hint and has no finished job to learn from, so nlp's work is taken to be partway
    # through runs as long as vision's hinted jobs (run's 10 min), and the answer says so
    manifest = tmp_path / "big.yaml"
    big = eight("big", "vision", pods=2, priority="preemptible")
    manifest.write_text(yaml.safe_dump(big))
    code, out, err = plugin(
        metal_twin, "vision-team", "eta", "-f", str(manifest), "-n", "vision", capsys=capsys
    )
    assert code == 0, err
    minutes = re.search(r"estimated start in (\d+) min", out)
    assert minutes and 8 <= int(minutes[1]) <= 11, out
    said = "other teams' running work was taken to be partway through runs as long as your team's 1 job with a hint"
    assert said in out, out
    assert "a dry run" in out and workload_of(metal_twin, "vision", "big") is None

    code, out, err = plugin(metal_twin, "vision-team", "eta", busy["nlp"], "-n", "nlp", capsys=capsys)
    assert code == 3 and "forbidden" in err.lower() and busy["nlp"] not in out, (out, err)
    code, out, err = plugin(metal_twin, "vision-team", "eta", busy["run"], "-n", "vision", capsys=capsys)
    assert code == 0 and "already started" in out, (out, err)
