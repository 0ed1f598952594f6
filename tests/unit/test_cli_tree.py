"""`stepwise run` follows a delegation tree: each child's events in a block of its own, indented under
the call that started it, concurrent children at once with their lines whole, and a descendant's wait
(copied into the root's stream) shown once. Against the in-memory API of test_cli."""

from __future__ import annotations

import threading
from typing import Any

import httpx

from tests.unit.test_cli import RUN, FakeApi, Reply, cli, event, finished

CHILD_A, CHILD_B, GRANDCHILD = "run_a", "run_b", "run_g"


def page(*events: dict[str, Any], done: bool = True) -> dict[str, Any]:
    return {"events": list(events), "next": events[-1]["seq"] if events else 0, "done": done}


def started(seq: int, tool: str, child: str, call: str) -> dict[str, Any]:
    return event(
        seq, "delegation_started", tool_call_id=call, tool_name=tool, child_run_id=child, agent_id="agt_c"
    )


def completed(seq: int, child: str, call: str, status: str = "succeeded") -> dict[str, Any]:
    return event(seq, "delegation_completed", tool_call_id=call, child_run_id=child, status=status)


def child_stream(run_id: str, answer: str, *middle: dict[str, Any]) -> dict[str, Any]:
    seq = 2 + len(middle)
    return page(
        event(1, "run_started", agent_id="agt_c", session_id=f"ses_{run_id}", max_steps=5),
        *[{**e, "seq": i + 2} for i, e in enumerate(middle)],
        event(seq, "run_completed", output=answer, steps=1, usage={}),
    )


def test_two_concurrent_children_are_followed_at_once_each_under_its_call() -> None:
    api = FakeApi()
    api.routes[f"GET /v1/runs/{RUN}/events"] = api.events(
        page(
            event(1, "step_started", step=1),
            event(2, "tool_call", tool_call_id="c1", tool_name="research", arguments={"message": "one"}),
            event(3, "tool_call", tool_call_id="c2", tool_name="refund", arguments={"message": "two"}),
            started(4, "research", CHILD_A, "c1"),
            started(5, "refund", CHILD_B, "c2"),
            completed(6, CHILD_A, "c1"),
            completed(7, CHILD_B, "c2", "failed"),
            event(8, "tool_result", tool_call_id="c1", tool_name="research", output="found it"),
            event(9, "run_completed", output="all done", steps=2, usage={}),
        )
    )
    b_asked = threading.Event()

    def a_events(request: httpx.Request) -> Reply:
        # Answered only once B's stream has been asked for: followed one after the other, A would wait
        # here for ever (until the deadline), and B's lines would all come after A's.
        assert b_asked.wait(10), "the second child was not followed while the first was"
        streamed = event(2, "chunk", step=1, offset=0, text="Searching the\nweb now")
        return 200, child_stream(CHILD_A, "Searching the\nweb now", streamed)

    def b_events(request: httpx.Request) -> Reply:
        b_asked.set()
        return 200, child_stream(CHILD_B, "cannot refund")

    api.routes[f"GET /v1/runs/{CHILD_A}/events"] = a_events
    api.routes[f"GET /v1/runs/{CHILD_B}/events"] = b_events
    api.routes[f"GET /v1/runs/{RUN}"] = (200, finished("succeeded", output="all done"))

    outcome = cli(api, "runs", "follow", RUN)

    assert outcome.code == 0, outcome.err
    lines = outcome.out.splitlines()
    assert lines[:5] == [
        "step 1",
        '  -> research(message="one")',
        '  -> refund(message="two")',
        f"  => research: delegated to run {CHILD_A} (agent agt_c)",
        f"  => refund: delegated to run {CHILD_B} (agent agt_c)",
    ]
    research = [line for line in lines if line.startswith("  [research] ")]
    refund = [line for line in lines if line.startswith("  [refund] ")]
    assert research == [
        f"  [research] run {CHILD_A} started: agent agt_c, session ses_{CHILD_A}, up to 5 steps",
        "  [research]   Searching the",  # streamed text, each line whole and prefixed
        "  [research]   web now",
        "  [research] succeeded in 1 steps, tokens: 0 in, 0 out, 0 cached",
    ]
    assert refund == [
        f"  [refund] run {CHILD_B} started: agent agt_c, session ses_{CHILD_B}, up to 5 steps",
        "  [refund] answer: cannot refund",
        "  [refund] succeeded in 1 steps, tokens: 0 in, 0 out, 0 cached",
    ]
    # Each block closes before its completion line; the completion lines follow both blocks here.
    assert lines.index(f"  <= research: run {CHILD_A} succeeded") > lines.index(research[-1])
    assert lines.index(f"  <= refund: run {CHILD_B} failed") > lines.index(refund[-1])
    assert lines[-3:-1] == ["  <- research: found it", "answer: all done"]
    assert len(lines) == 5 + len(research) + len(refund) + 5


def test_a_grandchild_is_indented_under_its_parent_and_its_copied_approval_shows_once() -> None:
    api = FakeApi()
    approval = {
        "interaction_id": "int_1",
        "tool_call_id": "g1",
        "tool_name": "send",
        "arguments": {"to": "x"},
    }
    api.routes[f"GET /v1/runs/{RUN}/events"] = api.events(
        page(
            event(1, "step_started", step=1),
            started(2, "to_middle", CHILD_A, "c1"),
            event(3, "approval_requested", run_id=GRANDCHILD, **approval),  # the root's copy
            completed(4, CHILD_A, "c1"),
            event(5, "run_completed", output="root done", steps=2, usage={}),
        )
    )
    api.routes[f"GET /v1/runs/{CHILD_A}/events"] = (
        200,
        child_stream(
            CHILD_A, "middle done", started(0, "to_leaf", GRANDCHILD, "m1"), completed(0, GRANDCHILD, "m1")
        ),
    )
    api.routes[f"GET /v1/runs/{GRANDCHILD}/events"] = (
        200,
        child_stream(GRANDCHILD, "leaf done", event(0, "approval_requested", **approval)),
    )
    api.routes[f"GET /v1/runs/{RUN}"] = (200, finished("succeeded", output="root done"))

    outcome = cli(api, "runs", "follow", RUN)

    assert outcome.code == 0, outcome.err
    lines = outcome.out.splitlines()
    assert [line for line in lines if "approval needed" in line] == [
        '    [to_leaf]   ! approval needed: send(to="x")'
    ]
    approve = f"approve: stepwise --url http://stepwise.test approve {GRANDCHILD} --tool-call g1"
    assert f"    [to_leaf]       {approve}" in lines  # the grandchild's own run answers it
    opened = lines.index(f"  [to_middle]   => to_leaf: delegated to run {GRANDCHILD} (agent agt_c)")
    closed = lines.index(f"  [to_middle]   <= to_leaf: run {GRANDCHILD} succeeded")
    leaf = [i for i, line in enumerate(lines) if line.startswith("    [to_leaf] ")]
    assert leaf and opened < min(leaf) and max(leaf) < closed  # the grandchild's block, inside its call
    assert closed < lines.index(f"  <= to_middle: run {CHILD_A} succeeded")
    assert lines[-2] == "answer: root done"


def test_a_child_that_cannot_be_followed_ends_only_its_block_and_a_cancelled_root_still_exits_1() -> None:
    api = FakeApi()  # no route for the child's events: 404, as for a run of another tenant
    api.routes[f"GET /v1/runs/{RUN}/events"] = api.events(
        page(
            event(1, "step_started", step=1),
            started(2, "research", CHILD_A, "c1"),
            event(3, "run_cancelled", reason="cancelled on request"),
        )
    )
    api.routes[f"GET /v1/runs/{RUN}"] = (200, finished("cancelled"))

    outcome = cli(api, "runs", "follow", RUN)

    assert outcome.code == 1
    assert outcome.out.splitlines() == [
        "step 1",
        f"  => research: delegated to run {CHILD_A} (agent agt_c)",
        f"  [research] cannot follow run {CHILD_A}: route_not_found: no such route",
        "cancelled: cancelled on request",
    ]
