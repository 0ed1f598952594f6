"""Traces of runs on the local stack (the real ASL, every Step and Await its own handler invocation),
recorded by the SDK's in-memory exporter: one trace per run tree, a span per model call with the
GenAI attributes and token counts, a span per tool call with its name and call id, all parented on
the run's span, which the run's ending writes; a delegated child's spans in its root's trace."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from stepwise.core import tracing
from stepwise_local.stack import LocalStack
from tests.eventually import eventually
from tests.fakes.receiver import Receiver, Reply
from tests.integration.support import tool, wait_for_run


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    tracing.use(SimpleSpanProcessor(memory))
    yield memory
    tracing.reset()


def agent(stack: LocalStack, name: str, **body: Any) -> str:
    status, _, created = stack.invoke_api("POST", "/v1/agents", {"name": name, **body})
    assert status == 201, created
    return str(created["agent_id"])


def start(stack: LocalStack, agent_id: str, script: list[dict[str, Any]]) -> str:
    status, _, accepted = stack.invoke_api(
        "POST", f"/v1/agents/{agent_id}/runs", {"message": "go", "script": script}
    )
    assert status == 202, accepted
    return str(accepted["run_id"])


def events(stack: LocalStack, run_id: str, etype: str) -> list[dict[str, Any]]:
    _, _, page = stack.invoke_api("GET", f"/v1/runs/{run_id}/events?after=0")
    return [e["data"] for e in page["events"] if e["type"] == etype]


def of_run(exporter: InMemorySpanExporter, run_id: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if (s.attributes or {}).get("stepwise.run_id") == run_id]


def run_span(exporter: InMemorySpanExporter, run_id: str, steps: int) -> list[ReadableSpan]:
    """The run's spans once all are written: its own (at its ending) and its last Step's (which ends
    just after). A run's status turns terminal a moment before either."""

    def written() -> list[ReadableSpan]:
        spans = of_run(exporter, run_id)
        named = [s.name for s in spans]
        assert any(n.startswith("invoke_agent") for n in named) and named.count("stepwise.step") >= steps, (
            named
        )
        return spans

    return eventually(written, timeout=30, what=f"the spans of {run_id}")


def called(name: str, *queries: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": {"q": q}} for q in queries]}


def ns(at: datetime) -> int:
    return int(at.timestamp() * 1e9)


def test_a_run_is_one_trace_of_its_steps_model_calls_and_tool_calls(
    stack: LocalStack, receiver: Receiver, exporter: InMemorySpanExporter
) -> None:
    receiver.replies["/broken"] = Reply(status=500, body={"boom": True})
    agent_id = agent(
        stack,
        "traced",
        tools=[
            tool("lookup", f"{receiver.url}/lookup", read_only=True),
            tool("broken", f"{receiver.url}/broken"),
        ],
    )
    # Step 1 runs two parallel-safe calls in threads, step 2 one call that fails, step 3 answers.
    run_id = start(stack, agent_id, [called("lookup", "a", "b"), called("broken", "c"), {"text": "done"}])
    run = wait_for_run(stack, run_id)
    assert run["status"] == "succeeded" and run["steps"] == 3, run

    spans = run_span(exporter, run_id, steps=3)

    trace = tracing.trace_id(run_id)
    assert {s.context.trace_id for s in spans} == {trace}  # across three Step invocations
    run_span_id = tracing.span_id("run", run_id)
    (root,) = [s for s in spans if s.name.startswith("invoke_agent")]
    assert root.context.span_id == run_span_id and root.parent is None
    assert root.attributes is not None
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["gen_ai.conversation.id"] == run["session_id"]
    assert root.attributes["stepwise.status"] == "succeeded"
    assert root.start_time == ns(datetime.fromisoformat(run["created_at"]))
    steps = sorted((s for s in spans if s.name == "stepwise.step"), key=lambda s: s.start_time or 0)
    assert [(s.attributes or {})["stepwise.step"] for s in steps] == [1, 2, 3]
    assert all(s.parent is not None and s.parent.span_id == run_span_id for s in steps)
    step_of = {s.context.span_id: (s.attributes or {})["stepwise.step"] for s in steps}

    chats = [s for s in spans if (s.attributes or {}).get("gen_ai.operation.name") == "chat"]
    assert len(chats) == 3
    for chat in chats:
        attributes = chat.attributes or {}
        assert chat.name == "chat scripted" and chat.kind.name == "CLIENT"
        assert attributes["gen_ai.request.model"] == "scripted"
        assert attributes["gen_ai.provider.name"] == attributes["gen_ai.system"] == "scripted"
        assert attributes["gen_ai.response.model"]
        assert attributes["stepwise.tenant_id"] and attributes["stepwise.session_id"] == run["session_id"]
        assert chat.parent is not None and step_of[chat.parent.span_id] == attributes["stepwise.step"]
    assert (
        sum(int((c.attributes or {})["gen_ai.usage.input_tokens"]) for c in chats)
        == run["usage"]["input_tokens"]
    )
    assert (
        sum(int((c.attributes or {})["gen_ai.usage.output_tokens"]) for c in chats)
        == run["usage"]["output_tokens"]
    )
    assert run["usage"]["input_tokens"] > 0 and run["usage"]["output_tokens"] > 0

    tools = [s for s in spans if (s.attributes or {}).get("gen_ai.operation.name") == "execute_tool"]
    calls = {c["tool_call_id"]: c["tool_name"] for c in events(stack, run_id, "tool_call")}
    assert {
        (s.attributes or {})["gen_ai.tool.call.id"]: (s.attributes or {})["gen_ai.tool.name"] for s in tools
    } == calls
    assert len(tools) == 3 and sorted(s.name for s in tools) == [
        "execute_tool broken",
        *["execute_tool lookup"] * 2,
    ]
    # The parallel calls ran in worker threads, still children of their step's span.
    assert [step_of[s.parent.span_id] for s in tools if s.parent is not None] == [1, 1, 2]
    (broken,) = [s for s in tools if s.name == "execute_tool broken"]
    assert broken.status.status_code is StatusCode.ERROR and (broken.attributes or {})["error.type"]
    assert all(s.status.status_code is not StatusCode.ERROR for s in tools if s is not broken)


def test_a_delegated_childs_spans_join_its_roots_trace_under_the_delegating_call(
    stack: LocalStack, exporter: InMemorySpanExporter
) -> None:
    researcher = agent(stack, "researcher")  # no tools: the scripted model echoes its message
    tools = [{"type": "agent", "name": "research", "description": "Ask.", "agent_id": researcher}]
    coordinator = agent(stack, "coordinator", tools=tools)
    script = [
        {"tool_calls": [{"name": "research", "arguments": {"message": "tallest tree"}}]},
        {"text": "ok"},
    ]
    run_id = start(stack, coordinator, script)
    run = wait_for_run(stack, run_id)
    assert run["status"] == "succeeded", run
    (child_id,) = run["children"]

    parent_spans = run_span(exporter, run_id, steps=2)
    child_spans = run_span(exporter, child_id, steps=1)

    trace = tracing.trace_id(run_id)
    assert {s.context.trace_id for s in parent_spans + child_spans} == {trace}
    (delegating,) = [s for s in parent_spans if s.name == "execute_tool research"]
    (started,) = events(stack, run_id, "delegation_started")
    (call,) = events(stack, run_id, "tool_call")
    assert (delegating.attributes or {})["gen_ai.tool.call.id"] == call["tool_call_id"]
    (child_run,) = [s for s in child_spans if s.name.startswith("invoke_agent")]
    assert child_run.parent is not None and child_run.parent.span_id == delegating.context.span_id
    assert (child_run.attributes or {})["stepwise.parent_run_id"] == run_id
    assert all((s.attributes or {})["stepwise.root_run_id"] == run_id for s in child_spans)
    (child_chat,) = [s for s in child_spans if s.name.startswith("chat ")]
    assert (child_chat.attributes or {})["gen_ai.usage.output_tokens"] > 0
    assert started["child_run_id"] == child_id
    # The Await invocation that started the child is in the trace too.
    assert any(s.name == "stepwise.await" for s in parent_spans)


def test_a_failed_run_ends_in_an_error_span(stack: LocalStack, exporter: InMemorySpanExporter) -> None:
    agent_id = agent(stack, "looping", tools=[tool("same", "http://127.0.0.1:9/same")])
    same = {"tool_calls": [{"name": "same", "arguments": {"q": "x"}}]}
    run_id = start(stack, agent_id, [same, same, same, {"text": "never"}])  # the doom-loop guard stops it
    run = wait_for_run(stack, run_id)
    assert run["status"] == "failed", run

    (ended,) = eventually(
        lambda: [s for s in of_run(exporter, run_id) if s.name.startswith("invoke_agent")],
        timeout=30,
        what="the run's span",
    )

    assert ended.status.status_code is StatusCode.ERROR
    assert (ended.attributes or {})["error.type"] == run["error"]["code"]
    assert (ended.attributes or {})["stepwise.status"] == "failed"
    assert ended.context.trace_id == tracing.trace_id(run_id)
