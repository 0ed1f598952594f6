"""The console's pure JavaScript, run in Node: how a run's events pair into the waterfall's spans, how a
duration reads, and how the runs filters become the API's query. The page weight stays within twice
what it was before the console named agents, filtered runs and drew waterfalls."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bench import console_weight
from stepwise.console import assets

STATIC = Path(assets.__file__).parent / "static"
CONFORMANCE_NODE = Path(__file__).resolve().parents[1] / "conformance" / "node_modules" / ".bin" / "node"
# GET /v1/console and what it loaded at c559f3a, before issue 28's goal 8 (bench/console_weight.py).
WEIGHT_BEFORE = 51_701


def run_node(tmp_path: Path, script: str, tz: str = "UTC") -> Any:
    node = str(CONFORMANCE_NODE) if CONFORMANCE_NODE.exists() else shutil.which("node")
    assert node, "node is needed (npm ci --prefix tests/conformance)"
    for file in STATIC.glob("*.js"):  # as ES modules whatever Node's default for .js
        shutil.copy(file, tmp_path / file.name)
    (tmp_path / "package.json").write_text('{"type": "module"}')
    (tmp_path / "main.js").write_text(script)
    done = subprocess.run(
        [node, "main.js"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
        env={"TZ": tz},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def event(seq: int, type_: str, ms: int, **data: Any) -> dict[str, Any]:
    return {
        "seq": seq,
        "type": type_,
        "at": f"2026-12-04T10:00:{ms // 1000:02d}.{ms % 1000:03d}Z",
        "data": data,
    }


def test_a_runs_events_pair_into_steps_model_calls_tool_calls_and_waits(tmp_path: Path) -> None:
    events = [
        event(1, "run_started", 0, agent_id="agt_1"),
        event(2, "step_started", 100, step=1),
        event(3, "chunk", 350, step=1, text="Let me", offset=0),
        event(4, "step_completed", 900, step=1, usage={"cost_usd": 0.0012}),
        event(5, "tool_call", 900, tool_call_id="c1", tool_name="lookup"),
        event(6, "tool_call", 900, tool_call_id="c2", tool_name="send"),
        event(7, "approval_requested", 950, interaction_id="int_1", tool_name="send"),
        event(8, "tool_result", 1400, tool_call_id="c1"),
        # a descendant's wait, copied to this stream: not this run's to draw
        event(9, "client_tool_requested", 1500, interaction_id="int_9", run_id="run_child"),
        event(10, "approval_decided", 5950, interaction_id="int_1"),
        event(11, "tool_result", 6200, tool_call_id="c2", error={"code": "boom"}),
        event(12, "step_started", 6300, step=2),
        event(13, "step_completed", 7000, step=2, usage={"cost_usd": None}),
        event(14, "run_completed", 7100),
    ]
    script = f"""
import {{ Spans }} from "./waterfall.js";
const spans = new Spans("run_1");
const closed = {json.dumps(events)}.map((e) => spans.add(e)?.label ?? null);
console.log(JSON.stringify({{ closed, first: spans.first, spans: spans.all.map(
  (s) => [s.kind, s.label, s.step ?? null, s.end - s.start, s.cost ?? null,
          s.first ? s.first - s.start : null, !!s.failed]) }}));
"""
    out = run_node(tmp_path, script)

    assert out["spans"] == [
        ["run", "Run", None, 7100, None, None, False],  # run_started to run_completed
        ["step", "Step 1", 1, 6100, 0.0012, None, False],  # to its last event, the wait included
        ["model", "model", 1, 800, 0.0012, 250, False],  # first token 250 ms in
        ["tool", "lookup", 1, 500, None, None, False],
        ["tool", "send", 1, 5300, None, None, True],
        ["wait", "approval send", 1, 5000, None, None, False],
        ["step", "Step 2", 2, 800, None, None, False],  # to run_completed
        ["model", "model", 2, 700, None, None, False],
    ]
    assert [c for c in out["closed"] if c] == ["model", "lookup", "approval send", "send", "model", "Run"]


def test_a_duration_reads_in_the_unit_that_fits(tmp_path: Path) -> None:
    values = [0, 999, 1000, 1250, 59_949, 65_000, 3_599_000, 7_380_000, -5]
    script = f"""
import {{ duration }} from "./dom.js";
console.log(JSON.stringify({json.dumps(values)}.map(duration)));
"""
    assert run_node(tmp_path, script) == [
        "0 ms",
        "999 ms",
        "1.0 s",
        "1.3 s",
        "59.9 s",
        "1 m 05 s",
        "59 m 59 s",
        "2 h 03 m",
        "0 ms",
    ]


@pytest.mark.parametrize(
    ("tz", "after", "before"),
    [
        ("UTC", "2026-12-01T00:00:00.000Z", "2026-12-05T00:00:00.000Z"),
        ("Asia/Kolkata", "2026-11-30T18:30:00.000Z", "2026-12-04T18:30:00.000Z"),  # the user's own days
    ],
)
def test_the_filters_in_the_hash_become_the_apis_query(
    tmp_path: Path, tz: str, after: str, before: str
) -> None:
    script = """
import { readFilters, toQuery } from "./filters.js";
const hash = "status=failed&agent=agt_1&user=ada&trigger=schedule&from=2026-12-01&to=2026-12-04&x=1";
const f = readFilters(hash);
console.log(JSON.stringify({ f, q: toQuery(f), bad: toQuery(readFilters("from=yesterday")) }));
"""
    out = run_node(tmp_path, script, tz)

    assert out["f"] == {
        "status": "failed",
        "agent": "agt_1",
        "user": "ada",
        "trigger": "schedule",
        "from": "2026-12-01",
        "to": "2026-12-04",
    }
    assert out["q"] == {
        "status": "failed",
        "agent_id": "agt_1",
        "user_id": "ada",
        "trigger": "schedule",
        "created_after": after,
        "created_before": before,  # the last day is included
    }
    assert out["bad"] == {}  # a date that is not one is left out, not sent


def test_the_page_weight_stays_within_twice_what_it_was() -> None:
    loaded = console_weight.loaded()
    total = sum(a.size for a in loaded)
    assert total <= 2 * WEIGHT_BEFORE, total
    # every module is built from data, never parsed markup (the CSP forbids inline code besides)
    parsed = re.compile(r"\.(?:inner|outer)HTML\s*=|insertAdjacentHTML\(|document\.write\(")
    assert not [a.name for a in loaded if parsed.search(a.body)]
