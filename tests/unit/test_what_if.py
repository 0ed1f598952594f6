"""What-if's pure parts: the record read from a run's messages, the matching rule, the first divergence,
the request's validation (an agent edit's), and the CLI's `runs what-if` and `runs compare`."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import ValidationError

from stepwise.agents.models import AgentCreate
from stepwise.core.errors import Conflict, Gone, NotFound
from stepwise.core.schema import utcnow
from stepwise.evals.compare import CallStatus, TrajectoryCall, first_divergence
from stepwise.evals.whatif import WhatIf, start_what_if
from stepwise.loop.whatif import Replay
from stepwise.runs import ports
from stepwise.runs.models import Run, RunStatus
from stepwise.runs.record import canonical, recorded_calls
from tests.fakes.stores import FakeStores
from tests.unit.test_cli import RUN, FakeApi, cli, finished

CLI = "stepwise --url http://stepwise.test"


def assistant(*calls: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, n, a in calls
        ],
    }


def answer(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


MESSAGES = [
    {"role": "user", "content": "go"},
    assistant(("c1", "lookup", {"q": "a", "n": 1}), ("c2", "lookup", {"n": 2, "q": "b"}), ("c3", "mail", {})),
    answer("c1", "A"),
    answer("c2", "B"),  # c3 was never answered: the run ended first
    assistant(("c4", "lookup", {"q": "a", "n": 1})),
    answer("c4", "A again"),
]


def test_the_record_is_every_answered_call_in_the_model_s_order() -> None:
    record = recorded_calls(MESSAGES)

    assert [(r.call_id, r.name, r.message["content"]) for r in record] == [
        ("c1", "lookup", "A"),
        ("c2", "lookup", "B"),
        ("c4", "lookup", "A again"),
    ]
    assert record[1].arguments == canonical({"q": "b", "n": 2}) == '{"n":2,"q":"b"}'


def test_arguments_match_canonically_unused_first_then_again() -> None:
    replay = Replay(match="arguments", live_reads=False, record=tuple(recorded_calls(MESSAGES)))

    def serve(name: str, arguments: dict[str, Any], call_id: str) -> str | None:
        found = replay.find(name, arguments)
        if found is not None:
            replay.calls[call_id] = f"served:{found.call_id}"
        return found.call_id if found else None

    assert serve("lookup", {"n": 1, "q": "a"}, "w1") == "c1"
    assert serve("lookup", {"q": "a", "n": 1}, "w2") == "c4"  # the next unused one of the same call
    assert serve("lookup", {"q": "a", "n": 1}, "w3") == "c1"  # all used: the same question, the same answer
    assert serve("lookup", {"q": "z"}, "w4") is None
    assert serve("mail", {}, "w5") is None  # asked but never answered in the original: no record


def test_match_by_name_takes_the_next_unused_call_of_the_tool() -> None:
    replay = Replay(match="name", live_reads=False, record=tuple(recorded_calls(MESSAGES)))
    served = []
    for call_id in ("w1", "w2", "w3", "w4"):
        found = replay.find("lookup", {"anything": call_id})
        if found is not None:
            replay.calls[call_id] = f"served:{found.call_id}"
        served.append(found.call_id if found else None)

    assert served == ["c1", "c2", "c4", None]


def call(index: int, tool: str, status: CallStatus = "executed", **arguments: Any) -> TrajectoryCall:
    return TrajectoryCall(index=index, call_id=f"c{index}", tool=tool, arguments=arguments, status=status)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ([call(0, "x", q=1)], [call(0, "x", "served", q=1)], None),
        ([call(0, "x", q=1)], [call(0, "y", "diverged")], (0, "tool")),
        (
            [call(0, "x", q=1), call(1, "x", q=2)],
            [call(0, "x", "served", q=1), call(1, "x", "diverged", q=3)],
            (1, "arguments"),
        ),
        ([call(0, "x", q=1)], [call(0, "x", "served", q=9)], None),  # served by name: its record's answer
        ([call(0, "x", q=1)], [call(0, "x", "diverged", q=1)], (0, "diverged")),  # refused by the new config
        ([call(0, "x")], [], (0, "only_in_a")),
        ([], [call(0, "x", "diverged")], (0, "only_in_b")),
    ],
)
def test_the_first_divergence(
    a: list[TrajectoryCall], b: list[TrajectoryCall], expected: tuple[int, str] | None
) -> None:
    found = first_divergence(a, b)

    assert (None if found is None else (found.index, found.reason)) == expected


def test_a_what_if_is_validated_like_an_agent_edit() -> None:
    assert WhatIf(model="gpt-4o", temperature=0.5).request() == {
        "model": "gpt-4o",
        "temperature": 0.5,
        "match": "arguments",
        "live_reads": False,
        "webhooks": False,
    }
    for bad in ({"temperature": 3}, {"max_steps": 0}, {"system_prompt": "x" * 100_001}, {"nope": 1}):
        with pytest.raises(ValidationError):
            WhatIf.model_validate(bad)
    duplicated = [{"name": "web_search"}, {"name": "web_search"}]
    with pytest.raises(ValidationError, match="tool names must be unique"):
        WhatIf.model_validate({"tools": duplicated})


COMPARED: dict[str, Any] = {
    "a": {
        "run_id": "run_a",
        "agent_id": "agt_1",
        "status": "succeeded",
        "output": "Told Ada.",
        "steps": 3,
        "input_tokens": 100,
        "cached_tokens": 0,
        "output_tokens": 20,
        "cost_usd": 0.002,
        "wall_seconds": 4.0,
        "trajectory": [
            {"index": 0, "call_id": "c1", "tool": "lookup", "arguments": {"q": "a"}, "status": "matched"},
            {"index": 1, "call_id": "c2", "tool": "mail", "arguments": {"to": "ada"}, "status": "executed"},
        ],
    },
    "b": {
        "run_id": "run_b",
        "agent_id": "agt_1",
        "status": "succeeded",
        "output": "Told Grace.",
        "steps": 2,
        "input_tokens": 80,
        "cached_tokens": 0,
        "output_tokens": 15,
        "cost_usd": 0.0015,
        "wall_seconds": 1.5,
        "trajectory": [
            {
                "index": 0,
                "call_id": "w1",
                "tool": "lookup",
                "arguments": {"q": "a"},
                "status": "served",
                "served_from": "c1",
            },
            {
                "index": 1,
                "call_id": "w2",
                "tool": "mail",
                "arguments": {"to": "grace"},
                "status": "diverged",
                "error": "not_recorded",
            },
        ],
    },
    "deltas": {
        "steps": -1,
        "input_tokens": -20,
        "cached_tokens": 0,
        "output_tokens": -5,
        "cost_usd": -0.0005,
        "wall_seconds": -2.5,
    },
    "first_divergence": None,
    "summary": {
        "same_answer": False,
        "same_trajectory": False,
        "calls_a": 2,
        "calls_b": 2,
        "served": 1,
        "live_reads": 0,
        "divergences": 1,
        "first_divergence_index": 1,
        "deltas": {
            "steps": -1,
            "input_tokens": -20,
            "cached_tokens": 0,
            "output_tokens": -5,
            "cost_usd": -0.0005,
            "wall_seconds": -2.5,
        },
    },
}


def test_runs_compare_prints_the_two_runs_side_by_side() -> None:
    api = FakeApi()
    divergence = {
        "index": 1,
        "reason": "arguments",
        "a": COMPARED["a"]["trajectory"][1],
        "b": COMPARED["b"]["trajectory"][1],
    }
    api.routes["GET /v1/runs/run_a/compare/run_b"] = (200, {**COMPARED, "first_divergence": divergence})

    shown = cli(api, "runs", "compare", "run_a", "run_b")

    assert shown.code == 0, shown.err
    lines = shown.out.splitlines()
    assert lines[:7] == [
        "               run_a  run_b   DELTA",
        "steps          3      2       -1",
        "input_tokens   100    80      -20",
        "cached_tokens  0      0       +0",
        "output_tokens  20     15      -5",
        "cost_usd       0.002  0.0015  -0.0005",
        "wall_seconds   4.0    1.5     -2.5",
    ]
    assert lines[8:11] == [
        "#  A                          B",
        '0  lookup(q="a") [matched]    lookup(q="a") [served]',
        '1  mail(to="ada") [executed]  mail(to="grace") [diverged]',
    ]
    assert lines[12:] == [
        "first divergence: call 1 (arguments)",
        "answer A: Told Ada.",
        "answer B: Told Grace.",
    ]


def test_runs_what_if_sends_the_model_and_the_prompt_file(tmp_path: Any) -> None:
    api = FakeApi()
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("Be terse.\n")
    created = finished("queued", trigger="what_if", what_if_of="run_0", served=0, live_reads=0, divergences=0)
    api.routes["POST /v1/runs/run_0/what-if"] = (201, created)

    shown = cli(api, "runs", "what-if", "run_0", "--model", "gpt-4o", "--prompt-file", str(prompt))

    assert shown.code == 0, shown.err
    assert json.loads(api.requests[0].content) == {"model": "gpt-4o", "system_prompt": "Be terse.\n"}
    assert shown.out.splitlines() == [
        f"run {RUN} queued: a what-if of run_0",
        f"follow it: {CLI} runs follow {RUN}",
        f"then compare: {CLI} runs compare run_0 {RUN}",
    ]


@pytest.fixture
def fakes() -> Iterator[FakeStores]:
    fakes = FakeStores()
    with ports.using(fakes.stores()):
        yield fakes


def recorded_run(fakes: FakeStores, status: RunStatus = "succeeded") -> Run:
    suffix = uuid.uuid4().hex[:10]
    agent_id, session_id = f"agt_{suffix}", f"ses_{suffix}"
    fakes.agents.create("t1", agent_id, AgentCreate(name="helper"))
    fakes.sessions.create("t1", session_id, agent_id)
    run = Run(
        run_id=f"run_{suffix}",
        agent_id=agent_id,
        session_id=session_id,
        status=status,
        input="go",
        created_at=utcnow(),
    )
    return fakes.runs.create("t1", run)


def test_a_what_if_of_an_unknown_active_or_unrecorded_run_is_refused_before_anything_starts(
    fakes: FakeStores,
) -> None:
    with pytest.raises(NotFound):
        start_what_if("t1", "run_nope", WhatIf())
    done = recorded_run(fakes)
    with pytest.raises(NotFound):  # another tenant's run is as unknown as a made-up one
        start_what_if("t2", done.run_id, WhatIf())
    active = recorded_run(fakes, "waiting")
    with pytest.raises(Conflict) as refused:
        start_what_if("t1", active.run_id, WhatIf())
    assert refused.value.code == "run_active"
    with pytest.raises(Gone) as gone:  # its messages are past retention: nothing to serve from
        start_what_if("t1", done.run_id, WhatIf())
    assert gone.value.code == "input_gone"
    assert len(fakes.runs.items) == 2  # nothing was started


def test_runs_get_shows_a_what_if_s_original_and_counters() -> None:
    api = FakeApi()
    shown = finished(
        "succeeded", trigger="what_if", what_if_of="run_0", served=3, live_reads=1, divergences=2
    )
    api.routes[f"GET /v1/runs/{RUN}"] = (200, shown)

    lines = cli(api, "runs", "get", RUN).out.splitlines()

    assert "what-if of  run_0" in lines
    assert "served      3, live reads 1, divergences 2" in lines
