"""The model client against a real peer: real litellm, real HTTP, a fake OpenAI-compatible server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import litellm
import pytest

from stepwise.core import errors
from stepwise.llm.client import CONTINUE_PROMPT, MAX_CONTINUATIONS, ContextTooLong, ModelTurn, complete
from stepwise.llm.models import ScriptTurn, Usage
from tests.fakes.anthropic_server import AnthropicReply, FakeAnthropic
from tests.fakes.openai_server import DEFAULT_TEXT, FakeOpenAI, Reply

MODEL = "openai/fake-model"  # in no price map: its cost is null
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is the answer?"}]
LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a city up",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    # The environment route, as the local stack and the end-to-end tests configure a real provider.
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")
    yield server
    server.close()


def ask(**kwargs: Any) -> tuple[ModelTurn, list[str]]:
    """One turn of MODEL, with the text deltas it streamed."""
    deltas: list[str] = []
    arguments: dict[str, Any] = {"model": MODEL, "messages": MESSAGES, "tools": None, **kwargs}
    return complete(**arguments, on_text=deltas.append), deltas


# --- streaming --------------------------------------------------------------------------------------


def test_streamed_text_reaches_on_text_in_order_and_equals_the_answer(fake: FakeOpenAI) -> None:
    fake.text("The answer is forty-two, of course.", chunks=4)

    turn, deltas = ask()

    assert len(deltas) == 4
    assert "".join(deltas) == turn.text == "The answer is forty-two, of course."
    assert (turn.finish_reason, turn.tool_calls, turn.continuations) == ("stop", [], 0)
    sent = fake.bodies[0]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert sent["model"] == "fake-model" and sent["messages"] == MESSAGES


def test_tool_calls_are_assembled_from_split_argument_deltas(fake: FakeOpenAI) -> None:
    fake.tool_calls(
        [
            ("lookup", {"city": "Oslo", "days": 2, "units": "metric"}),
            ("send_email", {"to": "a@b.co", "subject": "Weather", "body": "Sunny all week."}),
            ("broken", '{"city": "Os'),
        ]
    )

    turn, deltas = ask(tools=[LOOKUP])

    assert deltas == [] and turn.text is None
    assert turn.finish_reason == "tool_calls"
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [
        ("lookup", {"city": "Oslo", "days": 2, "units": "metric"}),
        ("send_email", {"to": "a@b.co", "subject": "Weather", "body": "Sunny all week."}),
        ("broken", {"_raw": '{"city": "Os'}),
    ]
    assert len({c.id for c in turn.tool_calls}) == 3 and all(
        c.id.startswith("call_") for c in turn.tool_calls
    )


def test_text_alongside_tool_calls_is_kept(fake: FakeOpenAI) -> None:
    fake.tool_calls([("lookup", {"city": "Oslo"})], content="Let me check.")

    turn, deltas = ask(tools=[LOOKUP])

    assert "".join(deltas) == turn.text == "Let me check."
    assert [c.name for c in turn.tool_calls] == ["lookup"]


def test_usage_comes_from_the_stream_with_cached_tokens(fake: FakeOpenAI) -> None:
    fake.text("Hi.").usage(1200, 30, 1024)

    turn, _ = ask()

    assert turn.usage == Usage(input_tokens=1200, output_tokens=30, cached_tokens=1024, cost_usd=None)


def test_tools_temperature_and_max_tokens_are_sent_and_a_script_is_not(fake: FakeOpenAI) -> None:
    ask(tools=[LOOKUP], temperature=0.2, max_tokens=256, script=[ScriptTurn(text="scripted only")])
    ask(tools=None)
    ask(tools=[])

    with_tools, without, empty_list = fake.bodies
    assert with_tools["tools"] == [LOOKUP]
    assert (with_tools["temperature"], with_tools["max_tokens"]) == (0.2, 256)
    assert not {"script", "extra_body"} & set(with_tools)
    for body in (without, empty_list):
        assert not {"tools", "tool_choice", "temperature", "max_tokens"} & set(body)


def test_an_empty_queue_answers_the_default_text(fake: FakeOpenAI) -> None:
    assert ask()[0].text == DEFAULT_TEXT


# --- errors: mapped the same whether raised by the call or while reading the stream, never retried ----


def test_429_is_rate_limited_after_one_request(fake: FakeOpenAI) -> None:
    fake.rate_limited()

    with pytest.raises(errors.RateLimited, match="fake-model"):
        ask()
    assert len(fake.requests) == 1


def test_500_is_provider_unavailable_after_one_request(fake: FakeOpenAI) -> None:
    fake.error(500)

    with pytest.raises(errors.ProviderUnavailable):
        ask()
    assert len(fake.requests) == 1


def test_503_is_provider_unavailable(fake: FakeOpenAI) -> None:
    fake.error(503)

    with pytest.raises(errors.ProviderUnavailable):
        ask()
    assert len(fake.requests) == 1


def test_context_length_exceeded_is_context_too_long(fake: FakeOpenAI) -> None:
    fake.context_too_long()

    with pytest.raises(ContextTooLong, match="maximum context length"):
        ask()
    assert len(fake.requests) == 1


def test_a_stream_that_breaks_midway_is_provider_unavailable(fake: FakeOpenAI) -> None:
    fake.broken_stream("abcdefgh", after=2, chunks=4)
    deltas: list[str] = []

    with pytest.raises(errors.ProviderUnavailable):
        complete(model=MODEL, messages=MESSAGES, tools=None, on_text=deltas.append)
    assert deltas == ["ab", "cd"]  # what arrived before the break was delivered
    assert len(fake.requests) == 1


def test_an_error_in_on_text_is_not_taken_for_a_model_error(fake: FakeOpenAI) -> None:
    class SinkFailed(Exception):
        pass

    def sink(text: str) -> None:
        raise SinkFailed(text)

    with pytest.raises(SinkFailed):
        complete(model=MODEL, messages=MESSAGES, tools=None, on_text=sink)


# --- length continuation ------------------------------------------------------------------------------


def test_an_answer_cut_off_at_the_token_limit_is_continued_and_stitched(fake: FakeOpenAI) -> None:
    fake.length("The answer, after much thought, ").usage(100, 8, 64)
    fake.length("is forty-").usage(120, 4, 100)
    fake.text("two.").usage(130, 2, 120)

    turn, deltas = ask()

    assert turn.text == "The answer, after much thought, is forty-two."
    assert "".join(deltas) == turn.text
    assert (turn.finish_reason, turn.continuations) == ("stop", 2)
    assert turn.usage == Usage(input_tokens=350, output_tokens=14, cached_tokens=284, cost_usd=None)
    first, second, third = (body["messages"] for body in fake.bodies)
    assert first == MESSAGES
    assert second == [
        *MESSAGES,
        {"role": "assistant", "content": "The answer, after much thought, "},
        {"role": "user", "content": CONTINUE_PROMPT},
    ]
    # Appended, never rewritten: each request extends the previous one's prefix.
    assert third == [
        *second,
        {"role": "assistant", "content": "is forty-"},
        {"role": "user", "content": CONTINUE_PROMPT},
    ]


def test_continuation_stops_after_the_limit(fake: FakeOpenAI) -> None:
    for part in ("a ", "b ", "c ", "d ", "e "):
        fake.length(part)

    turn, _ = ask()

    assert len(fake.requests) == 1 + MAX_CONTINUATIONS == 4
    assert (turn.text, turn.finish_reason, turn.continuations) == ("a b c d ", "length", 3)


def test_tool_calls_cut_off_at_the_token_limit_are_not_continued(fake: FakeOpenAI) -> None:
    fake.push(Reply(calls=[("lookup", '{"city": "Os')], finish_reason="length"))

    turn, _ = ask(tools=[LOOKUP])

    assert len(fake.requests) == 1
    assert (turn.finish_reason, turn.continuations) == ("length", 0)
    assert turn.tool_calls[0].arguments == {"_raw": '{"city": "Os'}


def test_a_continuation_that_fails_fails_the_turn(fake: FakeOpenAI) -> None:
    fake.length("The answer is")
    fake.rate_limited()

    with pytest.raises(errors.RateLimited):
        ask()
    assert len(fake.requests) == 2


# --- empty turns --------------------------------------------------------------------------------------


def test_an_empty_turn_is_asked_again_once(fake: FakeOpenAI) -> None:
    fake.empty().usage(50, 0, 0)
    fake.text("Here it is.").usage(50, 4, 32)

    turn, _ = ask(tools=[LOOKUP])

    assert turn.text == "Here it is."
    assert turn.usage == Usage(input_tokens=100, output_tokens=4, cached_tokens=32, cost_usd=None)
    assert fake.bodies[0] == fake.bodies[1]  # the same request


def test_an_empty_turn_twice_is_returned_as_is(fake: FakeOpenAI) -> None:
    fake.empty().usage(50, 0, 0)
    fake.empty().usage(50, 1, 0)

    turn, deltas = ask()

    assert (turn.text, turn.tool_calls, turn.finish_reason) == (None, [], "stop")
    assert turn.usage == Usage(input_tokens=100, output_tokens=1, cached_tokens=0, cost_usd=None)
    assert deltas == [] and len(fake.requests) == 2


def test_an_empty_turn_then_a_cut_off_one_is_continued(fake: FakeOpenAI) -> None:
    fake.empty()
    fake.length("Half ")
    fake.text("and half.")

    turn, _ = ask()

    assert (turn.text, turn.continuations, len(fake.requests)) == ("Half and half.", 1, 3)


# --- configuration ------------------------------------------------------------------------------------


def test_openai_api_base_is_the_fallback_for_openai_base_url(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL")
    monkeypatch.setenv("OPENAI_API_BASE", fake.url)

    assert ask()[0].text == DEFAULT_TEXT
    assert fake.requests[0].headers["authorization"] == "Bearer sk-fake"


def test_the_fake_answers_unstreamed_requests_too(fake: FakeOpenAI) -> None:
    fake.tool_calls([("lookup", {"city": "Oslo"})], content="Checking.").usage(40, 6, 32)

    response = litellm.completion(model=MODEL, messages=MESSAGES, api_base=fake.url, api_key="sk-fake")

    payload = response.model_dump()
    message = payload["choices"][0]["message"]
    assert message["content"] == "Checking."
    assert message["tool_calls"][0]["function"] == {"name": "lookup", "arguments": '{"city": "Oslo"}'}
    assert payload["usage"]["prompt_tokens_details"]["cached_tokens"] == 32
    assert "stream" not in fake.bodies[0]


# --- prompt caching and cost ------------------------------------------------------------------------


@pytest.fixture
def anthropic(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAnthropic]:
    server = FakeAnthropic()
    monkeypatch.setenv("ANTHROPIC_API_BASE", server.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-fake")
    yield server
    server.close()


CLAUDE = "anthropic/claude-sonnet-4-5"
CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
]
SECOND_TOOL = {**LOOKUP, "function": {**LOOKUP["function"], "name": "zeta"}}


def _marked(block: Any) -> bool:
    return isinstance(block, dict) and block.get("cache_control") == {"type": "ephemeral"}


def test_anthropic_gets_the_stable_prefix_and_the_newest_message_marked(anthropic: FakeAnthropic) -> None:
    complete(model=CLAUDE, messages=CONVERSATION, tools=[LOOKUP, SECOND_TOOL])

    (sent,) = anthropic.requests
    assert [_marked(b) for b in sent["system"]] == [True]
    assert [_marked(t) for t in sent["tools"]] == [False, True]  # the last declaration closes the prefix
    last = sent["messages"][-1]["content"]
    assert last[-1]["type"] == "tool_result" and _marked(last[-1])
    blocks = [b for m in sent["messages"] if isinstance(m["content"], list) for b in m["content"]]
    marks = sum(_marked(b) for b in blocks)
    assert marks == 1  # one moving boundary; 3 of Anthropic's 4 marks in all


def test_the_prefix_is_byte_identical_across_the_calls_of_a_run(anthropic: FakeAnthropic) -> None:
    complete(model=CLAUDE, messages=CONVERSATION[:2], tools=[LOOKUP, SECOND_TOOL])
    complete(model=CLAUDE, messages=CONVERSATION, tools=[LOOKUP, SECOND_TOOL])

    first, second = anthropic.requests
    assert json.dumps(first["system"]) == json.dumps(second["system"])
    assert json.dumps(first["tools"]) == json.dumps(second["tools"])

    # The first call's history (its mark aside) is the start of the second's.
    def unmarked(message: dict[str, Any]) -> str:
        blocks = message["content"] if isinstance(message["content"], list) else [message["content"]]
        return json.dumps([{k: v for k, v in b.items() if k != "cache_control"} for b in blocks])

    assert unmarked(first["messages"][0]) == unmarked(second["messages"][0])


def test_openai_gets_no_cache_marks(fake: FakeOpenAI) -> None:
    fake.text("ok")
    complete(model=MODEL, messages=CONVERSATION, tools=[LOOKUP])

    assert "cache_control" not in json.dumps(fake.bodies[0])
    assert "cache_control_injection_points" not in fake.bodies[0]


def test_cache_reads_and_writes_are_counted_and_priced_from_the_map(anthropic: FakeAnthropic) -> None:
    reply = AnthropicReply(input_tokens=7, cache_read=1000, cache_write=200, output_tokens=5)
    anthropic.replies.append(reply)

    turn = complete(model=CLAUDE, messages=CONVERSATION, tools=[LOOKUP])

    usage = turn.usage
    assert (usage.input_tokens, usage.cached_tokens, usage.cache_write_tokens, usage.output_tokens) == (
        1207,  # the whole prompt: uncached, read and written
        1000,
        200,
        5,
    )
    price = litellm.model_cost["claude-sonnet-4-5"]
    expected = (
        7 * price["input_cost_per_token"]
        + 1000 * price["cache_read_input_token_cost"]
        + 200 * price["cache_creation_input_token_cost"]
        + 5 * price["output_cost_per_token"]
    )
    assert usage.cost_usd == pytest.approx(expected)
    assert usage.cost_usd < (1207 * price["input_cost_per_token"] + 5 * price["output_cost_per_token"])


def test_a_model_without_a_price_costs_null_and_a_run_total_stays_null(fake: FakeOpenAI) -> None:
    fake.text("ok")
    turn = complete(model=MODEL, messages=MESSAGES, tools=None)

    assert turn.usage.cost_usd is None
    assert (Usage(cost_usd=0.5) + turn.usage).cost_usd is None  # a total is never a guess
    assert (Usage(cost_usd=0.5) + Usage(cost_usd=0.25)).cost_usd == 0.75
