"""The model client against a real peer: real litellm, real HTTP, a fake OpenAI-compatible server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import litellm
import pytest

from stepwise import errors
from stepwise.agents.models import ScriptTurn
from stepwise.llm.client import CONTINUE_PROMPT, MAX_CONTINUATIONS, ContextTooLong, ModelTurn, complete
from stepwise.runs.models import Usage
from tests.fakes.openai_server import DEFAULT_TEXT, FakeOpenAI, Reply

MODEL = "openai/fake-model"
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

    assert turn.usage == Usage(input_tokens=1200, output_tokens=30, cached_tokens=1024)


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
    assert turn.usage == Usage(input_tokens=350, output_tokens=14, cached_tokens=284)
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
    assert turn.usage == Usage(input_tokens=100, output_tokens=4, cached_tokens=32)
    assert fake.bodies[0] == fake.bodies[1]  # the same request


def test_an_empty_turn_twice_is_returned_as_is(fake: FakeOpenAI) -> None:
    fake.empty().usage(50, 0, 0)
    fake.empty().usage(50, 1, 0)

    turn, deltas = ask()

    assert (turn.text, turn.tool_calls, turn.finish_reason) == (None, [], "stop")
    assert turn.usage == Usage(input_tokens=100, output_tokens=1, cached_tokens=0)
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
