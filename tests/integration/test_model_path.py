"""The real model path: litellm over HTTP to a fake OpenAI-compatible server on loopback, through
the whole stack — streaming into batched chunk events, retries in the state machine, continuation,
compaction, cached-token usage."""

from collections.abc import Iterator
from typing import Any

import pytest

from stepwise.loop.chunks import CHUNK_CHARS
from stepwise_local.stack import LocalStack
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.receiver import Receiver, Reply
from tests.integration.support import tool, wait_for_run

MODEL = "openai/gpt-fake"


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")
    yield fake
    fake.close()


def fast_retries(definition: dict[str, Any]) -> dict[str, Any]:
    """The same state machine with every retry interval at 1 s: moto's interpreter really waits."""

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for retry in node.get("Retry", []):
                retry["IntervalSeconds"] = 1
                retry["MaxDelaySeconds"] = 1
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(definition)
    return definition


def run_with(stack: LocalStack, **agent: Any) -> dict[str, Any]:
    _, _, created = stack.invoke_api("POST", "/v1/agents", {"name": "real-model", "model": MODEL, **agent})
    _, _, accepted = stack.invoke_api("POST", f"/v1/agents/{created['agent_id']}/runs", {"message": "hello"})
    return wait_for_run(stack, accepted["run_id"])


def all_events(stack: LocalStack, run_id: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    after, done = 0, False
    while not done:
        _, _, page = stack.invoke_api("GET", f"/v1/runs/{run_id}/events?after={after}&wait=5")
        events += page["events"]
        after, done = page["next"], page["done"]
    return events


def test_a_streamed_answer_arrives_as_a_few_batched_chunks(stack: LocalStack, model: FakeOpenAI) -> None:
    answer = " ".join(f"word{i}" for i in range(400))  # ~2,700 characters in 60 deltas
    model.text(answer, chunks=60).usage(50, 700, cached=20)

    run = run_with(stack)

    assert run["status"] == "succeeded" and run["output"] == answer
    chunks = [e["data"] for e in all_events(stack, run["run_id"]) if e["type"] == "chunk"]
    assert "".join(c["text"] for c in chunks) == answer
    assert [c["offset"] for c in chunks] == [
        sum(len(c["text"]) for c in chunks[:i]) for i in range(len(chunks))
    ]
    assert len(chunks) <= len(answer) // CHUNK_CHARS + 2 < 60  # batched, not one write per delta
    assert run["usage"] == {
        "input_tokens": 50,
        "output_tokens": 700,
        "cached_tokens": 20,
        "cache_write_tokens": 0,
        "cost_usd": None,  # the fake model has no price
    }
    assert model.bodies[0]["stream"] is True


def test_tool_calls_assembled_from_deltas_reach_the_tool(
    stack: LocalStack, model: FakeOpenAI, receiver: Receiver
) -> None:
    model.tool_calls([("lookup", {"q": "split across deltas"})]).usage(10, 5)
    model.text("found it").usage(30, 3, cached=10)

    run = run_with(stack, tools=[tool("lookup", f"{receiver.url}/lookup")])

    assert run["status"] == "succeeded" and run["output"] == "found it"
    assert [r.json() for r in receiver.to("/lookup")] == [{"q": "split across deltas"}]
    assert run["usage"] == {
        "input_tokens": 40,
        "output_tokens": 8,
        "cached_tokens": 10,
        "cache_write_tokens": 0,
        "cost_usd": None,
    }
    second = model.bodies[1]["messages"]
    assert second[-1]["role"] == "tool" and second[-2]["tool_calls"][0]["function"]["name"] == "lookup"


def test_a_rate_limit_is_retried_by_the_state_machine(stack: LocalStack, model: FakeOpenAI) -> None:
    model.rate_limited()
    model.text("after the wait")

    with stack.redefined(fast_retries):
        run = run_with(stack)

    assert run["status"] == "succeeded" and run["output"] == "after the wait"
    assert len(model.requests) == 2


@pytest.mark.parametrize(("status", "code"), [(429, "rate_limited"), (500, "provider_unavailable")])
def test_spent_retries_fail_the_run_with_a_clear_code(
    stack: LocalStack, model: FakeOpenAI, status: int, code: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With the provider's circuit on, five refusals would park the run instead (test_provider_circuits):
    # this is the path of a deployment that turned circuits off.
    monkeypatch.setenv("STEPWISE_CIRCUIT_THRESHOLD", "0")
    for _ in range(10):
        model.rate_limited() if status == 429 else model.error(500, {"error": {"message": "boom"}})

    with stack.redefined(fast_retries):
        run = run_with(stack)

    assert run["status"] == "failed" and run["error"]["code"] == code
    assert 2 <= len(model.requests) <= 7  # retried, then given up: never stuck


def test_output_cut_by_length_is_continued_and_stitched(stack: LocalStack, model: FakeOpenAI) -> None:
    model.length("The first half, ")
    model.text("and the second.")

    run = run_with(stack)

    assert run["output"] == "The first half, and the second."
    assert model.bodies[1]["messages"][-1]["role"] == "user"  # "continue where you left off"


def test_a_context_too_long_error_compacts_and_retries(
    stack: LocalStack, model: FakeOpenAI, receiver: Receiver
) -> None:
    receiver.replies["/lookup"] = Reply(body={"rows": ["x" * 200] * 50, "id": "r1"})
    model.tool_calls([("lookup", {"q": "a"})])
    model.context_too_long()
    model.text("fits now")

    run = run_with(stack, tools=[tool("lookup", f"{receiver.url}/lookup")])

    assert run["status"] == "succeeded" and run["output"] == "fits now"
    compactions = [e["data"] for e in all_events(stack, run["run_id"]) if e["type"] == "compaction"]
    assert compactions and compactions[0]["forced"] is True
    assert compactions[0]["tokens_after"] <= compactions[0]["tokens_before"]


def test_a_small_window_compacts_old_tool_results_before_the_call(
    stack: LocalStack, model: FakeOpenAI, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEPWISE_CONTEXT_WINDOW", "3000")
    _, _, created = stack.invoke_api(
        "POST",
        "/v1/agents",
        {"name": "compact", "model": MODEL, "tools": [tool("lookup", f"{receiver.url}/lookup")]},
    )
    session_id = None
    for turn in range(4):  # four user turns, each with one tool result; the first one large
        body = "lorem " * (2_000 if turn == 0 else 100)
        receiver.replies["/lookup"] = Reply(body={"id": f"doc-{turn}", "title": "Doc", "body": body})
        model.tool_calls([("lookup", {"q": str(turn)})])
        if turn == 3:  # the last run takes one more step after the one that compacts
            model.tool_calls([("lookup", {"q": "more"})])
        model.text(f"answer {turn}")
        body = {"message": f"question {turn}", **({"session_id": session_id} if session_id else {})}
        _, _, accepted = stack.invoke_api("POST", f"/v1/agents/{created['agent_id']}/runs", body)
        run = wait_for_run(stack, accepted["run_id"])
        assert run["status"] == "succeeded", (run["error"], all_events(stack, run["run_id"])[-3:])
        session_id = run["session_id"]

    compactions = [e["data"] for e in all_events(stack, run["run_id"]) if e["type"] == "compaction"]
    # once: the run's next call applies that compaction again instead of compacting anew
    assert len(compactions) == 1, compactions
    assert compactions[0]["stage"] == "placeholders" and compactions[0]["shortened_tool_results"] >= 1
    assert compactions[0]["tokens_after"] < compactions[0]["tokens_before"]
    before, sent = model.bodies[-2]["messages"], model.bodies[-1]["messages"]
    assert any('"compacted": true' in (m.get("content") or "") for m in sent if m["role"] == "tool")
    assert sent[: len(before)] == before  # the previous request, compaction included, is this one's prefix
    _, _, session = stack.invoke_api("GET", f"/v1/sessions/{session_id}")
    assert not any("compacted" in (m.get("content") or "") for m in session["messages"])  # stored whole
