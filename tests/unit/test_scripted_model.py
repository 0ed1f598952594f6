"""The model layer, driven through real litellm against the built-in `scripted` provider."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import litellm
import pytest
from jsonschema import Draft202012Validator, FormatChecker
from litellm.llms.custom_llm import CustomLLMError

from stepwise.core import errors
from stepwise.llm import scripted
from stepwise.llm.client import (
    ContextTooLong,
    ModelTurn,
    complete,
    map_litellm_error,
    parse_arguments,
    resolve_model,
    usage_of,
)
from stepwise.llm.models import ScriptedToolCall, ScriptTurn, Usage

CALL_ID = re.compile(r"^[a-zA-Z0-9_-]+$")

LOOKUP = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 2},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "units": {"type": "string", "enum": ["metric", "imperial"]},
    },
    "required": ["city", "days"],
}
SEND_EMAIL = {
    "type": "object",
    "properties": {
        "to": {"type": "string", "format": "email"},
        "subject": {"type": "string", "maxLength": 40},
        "when": {"type": "string", "format": "date-time"},
    },
    "required": ["to", "subject", "when"],
    "additionalProperties": False,
}
SCHEMAS = {"lookup": LOOKUP, "send_email": SEND_EMAIL}
TOOLS = [
    {"type": "function", "function": {"name": name, "description": f"{name} tool", "parameters": schema}}
    for name, schema in SCHEMAS.items()
]


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("unit tests must not open network connections")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def conversation(message: str = "What is the weather in Paris?") -> list[dict[str, Any]]:
    return [{"role": "system", "content": "You are terse."}, {"role": "user", "content": message}]


def answer(messages: list[dict[str, Any]], turn: ModelTurn, results: dict[str, str]) -> list[dict[str, Any]]:
    """The history after `turn`, with each of its tool calls answered by tool name."""
    replies = [{"role": "tool", "tool_call_id": c.id, "content": results[c.name]} for c in turn.tool_calls]
    return [*messages, turn.assistant_message(), *replies]


# --- no script --------------------------------------------------------------------------------------


def test_without_script_first_step_calls_each_offered_tool_once_with_valid_arguments() -> None:
    turn = complete(model="scripted", messages=conversation(), tools=TOOLS)

    assert turn.finish_reason == "tool_calls"
    assert turn.text is None
    assert [c.name for c in turn.tool_calls] == ["lookup", "send_email"]
    for call in turn.tool_calls:
        Draft202012Validator(SCHEMAS[call.name], format_checker=FormatChecker()).validate(call.arguments)
        assert CALL_ID.match(call.id)
    assert len({c.id for c in turn.tool_calls}) == 2


def test_without_script_second_step_summarises_the_tool_results() -> None:
    messages = conversation()
    first = complete(model="scripted", messages=messages, tools=TOOLS)
    history = answer(messages, first, {"lookup": '{"temp": 21}', "send_email": '{"sent": true}'})

    second = complete(model="scripted", messages=history, tools=TOOLS)

    assert second.finish_reason == "stop"
    assert second.tool_calls == []
    assert second.text == 'Called 2 tools: lookup → {"temp": 21}; send_email → {"sent": true}'


def test_without_tools_answers_in_text_mentioning_the_message() -> None:
    turn = complete(model="scripted", messages=conversation("hello there"), tools=None)

    assert turn.finish_reason == "stop"
    assert turn.tool_calls == []
    assert turn.text == "You said: hello there"


def test_long_tool_results_are_clipped_in_the_summary() -> None:
    messages = conversation()
    first = complete(model="scripted", messages=messages, tools=TOOLS[:1])
    history = answer(messages, first, {"lookup": "x" * 5000})

    text = complete(model="scripted", messages=history, tools=TOOLS[:1]).text

    assert text is not None
    assert text.startswith("Called 1 tool: lookup → xxx")
    assert len(text) < 400


# --- with a script ----------------------------------------------------------------------------------

SCRIPT = [
    ScriptTurn(tool_calls=[ScriptedToolCall(name="lookup", arguments={"city": "Oslo", "days": 2})]),
    ScriptTurn(tool_calls=[ScriptedToolCall(name="send_email", arguments={"to": "a@b.co"})]),
    ScriptTurn(text="All done."),
]


def test_script_plays_its_turns_in_order_across_steps() -> None:
    messages = conversation()

    first = complete(model="scripted", messages=messages, tools=TOOLS, script=SCRIPT)
    messages = answer(messages, first, {"lookup": "sunny"})
    second = complete(model="scripted", messages=messages, tools=TOOLS, script=SCRIPT)
    messages = answer(messages, second, {"send_email": "sent"})
    third = complete(model="scripted", messages=messages, tools=TOOLS, script=SCRIPT)

    assert [(c.name, c.arguments) for c in first.tool_calls] == [("lookup", {"city": "Oslo", "days": 2})]
    # A scripted call is played as written, even when it would not validate: the executor judges it.
    assert [(c.name, c.arguments) for c in second.tool_calls] == [("send_email", {"to": "a@b.co"})]
    assert (third.text, third.finish_reason, third.tool_calls) == ("All done.", "stop", [])
    assert first.tool_calls[0].id != second.tool_calls[0].id


def test_script_tool_turn_with_tools_withheld_answers_in_text() -> None:
    turn = complete(model="scripted", messages=conversation("book it"), tools=None, script=SCRIPT)

    assert turn.tool_calls == []
    assert turn.finish_reason == "stop"
    assert turn.text == "Step limit reached; tools withheld. You said: book it"


def test_past_the_end_of_the_script_answers_with_a_summary() -> None:
    script = SCRIPT[:1]
    messages = conversation()
    first = complete(model="scripted", messages=messages, tools=TOOLS, script=script)
    messages = answer(messages, first, {"lookup": "sunny"})

    after = complete(model="scripted", messages=messages, tools=TOOLS, script=script)

    assert (after.text, after.finish_reason) == ("Called 1 tool: lookup → sunny", "stop")


def test_each_user_message_restarts_the_script() -> None:
    messages = conversation("first question")
    first = complete(model="scripted", messages=messages, tools=TOOLS, script=SCRIPT)
    messages = answer(messages, first, {"lookup": "sunny"})
    messages += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "second question"}]

    again = complete(model="scripted", messages=messages, tools=TOOLS, script=SCRIPT)

    assert [c.name for c in again.tool_calls] == ["lookup"]
    assert again.tool_calls[0].id != first.tool_calls[0].id  # a new run in the same session


def test_call_ids_are_the_same_for_the_same_request() -> None:
    ids = [
        [c.id for c in complete(model="scripted", messages=conversation(), tools=TOOLS).tool_calls]
        for _ in range(2)
    ]
    assert ids[0] == ids[1]


def test_an_invalid_script_is_a_model_error_through_the_real_path() -> None:
    broken = ScriptTurn.model_construct(text=None, tool_calls=None)  # skips the one-of check

    with pytest.raises(errors.ModelError, match="invalid script") as caught:
        complete(model="scripted", messages=conversation(), tools=TOOLS, script=[broken])
    assert type(caught.value) is errors.ModelError


def test_scripted_with_a_model_suffix_is_the_same_provider() -> None:
    turn = complete(model="scripted/demo", messages=conversation("hi"), tools=None)
    assert turn.text == "You said: hi"


def test_registering_twice_adds_the_provider_once() -> None:
    scripted.register()
    scripted.register()
    assert [e["provider"] for e in litellm.custom_provider_map].count("scripted") == 1


# --- streaming ----------------------------------------------------------------------------------------


def test_scripted_text_streams_in_a_few_deltas_through_on_text() -> None:
    deltas: list[str] = []

    turn = complete(
        model="scripted",
        messages=conversation("tell me a rather long story"),
        tools=None,
        on_text=deltas.append,
    )

    assert turn.text == "You said: tell me a rather long story"
    assert len(deltas) == 3
    assert "".join(deltas) == turn.text


def test_scripted_tool_calls_stream_no_text() -> None:
    deltas: list[str] = []

    turn = complete(
        model="scripted", messages=conversation(), tools=TOOLS, script=SCRIPT, on_text=deltas.append
    )

    assert deltas == []
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [("lookup", {"city": "Oslo", "days": 2})]


def test_scripted_stream_is_shaped_like_a_provider_stream() -> None:
    script = [
        {"tool_calls": [{"name": "lookup", "arguments": {"city": "Oslo", "days": 2}}, {"name": "send_email"}]}
    ]

    chunks = list(
        scripted.ScriptedLLM().streaming(
            messages=conversation(), optional_params={"tools": TOOLS, "extra_body": {"script": script}}
        )
    )

    *deltas, last = chunks
    assert not any(c["is_finished"] for c in deltas)
    assert (last["is_finished"], last["finish_reason"]) == (True, "tool_calls")
    assert last["usage"] is not None and last["usage"]["prompt_tokens"] > 0
    uses = [c["tool_use"] for c in deltas if c["tool_use"] is not None]
    assert [(u["index"], u["function"]["name"]) for u in uses] == [
        (0, "lookup"),
        (0, None),  # later deltas of a call carry only argument text, as OpenAI streams it
        (1, "send_email"),
        (1, None),
    ]
    assert all(u["function"]["arguments"] for u in uses[:2])  # the arguments really are split
    assert json.loads("".join(u["function"]["arguments"] for u in uses[:2])) == {"city": "Oslo", "days": 2}
    assert [u["id"] is not None for u in uses] == [True, False, True, False]


def test_streamed_and_unstreamed_scripted_answers_agree() -> None:
    handler = scripted.ScriptedLLM()
    for messages, tools in [(conversation(), TOOLS), (conversation("hi there"), None)]:
        unstreamed = handler.completion(messages=messages, optional_params={"tools": tools})

        turn = complete(model="scripted", messages=messages, tools=tools)

        message = unstreamed.model_dump()["choices"][0]["message"]
        assert turn.text == (message["content"] or None)
        assert [(c.id, c.name, c.arguments) for c in turn.tool_calls] == [
            (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in message.get("tool_calls") or []
        ]
        assert turn.usage == usage_of(unstreamed.model_dump()["usage"])


def test_a_bad_script_fails_the_streaming_call_itself_not_the_stream() -> None:
    with pytest.raises(CustomLLMError, match="invalid script"):
        scripted.ScriptedLLM().streaming(
            messages=conversation(), optional_params={"extra_body": {"script": [{"neither": 1}]}}
        )


@pytest.mark.parametrize(
    "text", ["", " ", "one", "a b", "  leading and  double  spaces ", "x" * 50, "a b c d e f g"]
)
def test_streamed_text_pieces_join_back_exactly(text: str) -> None:
    pieces = scripted._pieces(text, 3)

    assert "".join(pieces) == text
    assert len(pieces) <= 3 and all(pieces)


# --- usage ------------------------------------------------------------------------------------------


def test_usage_is_counted_and_deterministic() -> None:
    short = complete(model="scripted", messages=conversation("hi"), tools=None).usage
    again = complete(model="scripted", messages=conversation("hi"), tools=None).usage
    longer = complete(model="scripted", messages=conversation("hi " * 200), tools=None).usage

    assert short == again
    assert short.input_tokens > 0 and short.output_tokens > 0 and short.cached_tokens == 0
    assert longer.input_tokens > short.input_tokens
    assert (short + longer).input_tokens == short.input_tokens + longer.input_tokens


def test_usage_reads_openai_and_anthropic_cached_tokens() -> None:
    openai_style = litellm.Usage(
        prompt_tokens=100, completion_tokens=9, prompt_tokens_details={"cached_tokens": 64}
    )
    anthropic_style = {"prompt_tokens": 50, "completion_tokens": 5, "cache_read_input_tokens": 32}

    assert usage_of(openai_style).model_dump() == {
        "input_tokens": 100,
        "output_tokens": 9,
        "cached_tokens": 64,
        "cache_write_tokens": 0,
        "cost_usd": 0.0,  # priced by the caller, who knows the model
    }
    assert usage_of(anthropic_style).model_dump() == {
        "input_tokens": 50,
        "output_tokens": 5,
        "cached_tokens": 32,
        "cache_write_tokens": 0,
        "cost_usd": 0.0,
    }
    written = {"prompt_tokens": 50, "completion_tokens": 5, "cache_creation_input_tokens": 40}
    assert usage_of(written).cache_write_tokens == 40
    assert usage_of(None) == Usage()


# --- real providers ---------------------------------------------------------------------------------


def streamed(*deltas: dict[str, Any], finish_reason: str, usage: dict[str, Any] | None = None) -> list[Any]:
    """What litellm yields for a streamed OpenAI reply: the deltas, a finish chunk, a usage chunk."""
    choices: list[list[Any]] = [[{"index": 0, "delta": d}] for d in deltas]
    choices.append([{"index": 0, "delta": {}, "finish_reason": finish_reason}])
    chunks = [litellm.ModelResponseStream(id="r", model="gpt-4o", choices=c) for c in choices]
    if usage is not None:
        chunks.append(litellm.ModelResponseStream(id="r", model="gpt-4o", choices=[], usage=usage))
    return chunks


def test_a_real_model_is_streamed_with_no_script_no_retries_and_its_reply_is_parsed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent: dict[str, Any] = {}

    def fake_completion(**kwargs: Any) -> Iterator[Any]:
        sent.update(kwargs)
        call = {
            "index": 0,
            "id": "c1",
            "type": "function",
            "function": {"name": "lookup", "arguments": "{oo"},
        }
        return iter(
            streamed(
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"tool_calls": [{"index": 0, "function": {"arguments": "ps"}}]},
                {
                    "tool_calls": [
                        {"index": 1, "id": "c2", "type": "function", "function": {"name": "send_email"}}
                    ]
                },
                finish_reason="tool_calls",
                usage={
                    "prompt_tokens": 120,
                    "completion_tokens": 8,
                    "total_tokens": 128,
                    "prompt_tokens_details": {"cached_tokens": 100},
                },
            )
        )

    monkeypatch.setattr(litellm, "completion", fake_completion)

    turn = complete(model="gpt-4o", messages=conversation(), tools=TOOLS, temperature=0.2, script=SCRIPT)

    assert sent["model"] == "gpt-4o"
    assert (sent["num_retries"], sent["max_retries"], sent["temperature"]) == (0, 0, 0.2)
    assert (sent["stream"], sent["stream_options"]) == (True, {"include_usage": True})
    assert "extra_body" not in sent and "script" not in sent
    assert [(c.id, c.arguments) for c in turn.tool_calls] == [("c1", {"_raw": "{oops"}), ("c2", {})]
    assert turn.text is None
    assert turn.usage.model_dump(exclude={"cost_usd"}) == {
        "input_tokens": 120,
        "output_tokens": 8,
        "cached_tokens": 100,
        "cache_write_tokens": 0,
    }
    assert turn.usage.cost_usd is not None and turn.usage.cost_usd > 0  # gpt-4o is in the price map
    assert turn.assistant_message()["tool_calls"][0]["function"]["arguments"] == "{oops"


def test_anthropic_style_cached_tokens_survive_the_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    usage = {"prompt_tokens": 90, "completion_tokens": 3, "total_tokens": 93, "cache_read_input_tokens": 64}

    def fake_completion(**kwargs: Any) -> Iterator[Any]:
        return iter(streamed({"role": "assistant", "content": "hi"}, finish_reason="stop", usage=usage))

    monkeypatch.setattr(litellm, "completion", fake_completion)

    turn = complete(model="anthropic/claude-sonnet-4", messages=conversation(), tools=None)

    assert turn.usage == Usage(input_tokens=90, output_tokens=3, cached_tokens=64)


def test_tools_are_left_out_of_the_request_when_withheld(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: dict[str, Any] = {}

    def fake_completion(**kwargs: Any) -> Iterator[Any]:
        sent.update(kwargs)
        return iter(streamed({"role": "assistant", "content": "hi"}, finish_reason="stop"))

    monkeypatch.setattr(litellm, "completion", fake_completion)

    assert complete(model="gpt-4o", messages=conversation(), tools=[]).text == "hi"
    assert not {"tools", "temperature", "max_tokens"} & set(sent)


def test_a_stream_with_no_chunks_is_an_empty_turn_asked_again_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []

    def fake_completion(**kwargs: Any) -> Iterator[Any]:
        calls.append(kwargs)
        return iter([])

    monkeypatch.setattr(litellm, "completion", fake_completion)

    turn = complete(model="gpt-4o", messages=conversation(), tools=None)

    assert (turn.text, turn.tool_calls, turn.finish_reason, turn.usage) == (None, [], None, Usage())
    assert len(calls) == 2


def test_an_error_while_reading_the_stream_is_mapped_like_one_from_the_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    delivered: list[str] = []

    def fake_completion(**kwargs: Any) -> Iterator[Any]:
        yield from streamed({"role": "assistant", "content": "par"}, finish_reason="stop")[:1]
        raise litellm.RateLimitError(message="slow down", model=M, llm_provider=P)

    monkeypatch.setattr(litellm, "completion", fake_completion)

    with pytest.raises(errors.RateLimited, match="slow down"):
        complete(model="gpt-4o", messages=conversation(), tools=None, on_text=delivered.append)
    assert delivered == ["par"]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ("", {}),
        (None, {}),
        ("not json", {"_raw": "not json"}),
        ("[1, 2]", {"_raw": "[1, 2]"}),
    ],
)
def test_tool_call_arguments_are_parsed_or_kept_raw(raw: str | None, expected: dict[str, Any]) -> None:
    assert parse_arguments(raw) == expected


# --- resolve_model ----------------------------------------------------------------------------------


def test_resolve_model_prefers_the_agent_then_the_environment_then_scripted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STEPWISE_MODEL", "openai/gpt-4o-mini")
    assert resolve_model("anthropic/claude-sonnet-4") == "anthropic/claude-sonnet-4"
    assert resolve_model(None) == "openai/gpt-4o-mini"
    assert resolve_model("") == "openai/gpt-4o-mini"

    monkeypatch.delenv("STEPWISE_MODEL")
    assert resolve_model(None) == "scripted"
    monkeypatch.setenv("STEPWISE_MODEL", "  ")
    assert resolve_model(None) == "scripted"


# --- error mapping ----------------------------------------------------------------------------------

M, P = "gpt-4o", "openai"


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (litellm.RateLimitError(message="slow down", model=M, llm_provider=P), errors.RateLimited),
        (
            litellm.ServiceUnavailableError(message="down", model=M, llm_provider=P),
            errors.ProviderUnavailable,
        ),
        (litellm.InternalServerError(message="oops", model=M, llm_provider=P), errors.ProviderUnavailable),
        (litellm.APIConnectionError(message="reset", model=M, llm_provider=P), errors.ProviderUnavailable),
        (litellm.Timeout(message="too slow", model=M, llm_provider=P), errors.ProviderUnavailable),
        (litellm.BadGatewayError(message="bad gateway", model=M, llm_provider=P), errors.ProviderUnavailable),
        (
            litellm.APIError(status_code=504, message="gateway timeout", model=M, llm_provider=P),
            errors.ProviderUnavailable,
        ),
        (
            litellm.ContextWindowExceededError(message="too many tokens", model=M, llm_provider=P),
            ContextTooLong,
        ),
        (litellm.AuthenticationError(message="bad key", model=M, llm_provider=P), errors.ModelError),
        (litellm.BadRequestError(message="bad", model=M, llm_provider=P), errors.ModelError),
        (litellm.NotFoundError(message="no such model", model=M, llm_provider=P), errors.ModelError),
        (litellm.APIError(status_code=418, message="teapot", model=M, llm_provider=P), errors.ModelError),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else value.__name__,
)
def test_litellm_errors_map_to_step_errors(exc: Exception, expected: type[Exception]) -> None:
    mapped = map_litellm_error(exc, "gpt-4o")

    assert type(mapped) is expected
    assert "gpt-4o" in str(mapped)


def test_context_too_long_is_a_model_error_with_its_own_code() -> None:
    assert issubclass(ContextTooLong, errors.ModelError)
    assert ContextTooLong.code == "context_too_long"


def test_error_messages_never_carry_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACME_API_KEY", "acme-secret-value-123")
    exc = litellm.AuthenticationError(
        message="Incorrect API key provided: sk-proj-abcdef123456. Bearer abc.def "
        "api_key=plain-key-999 and acme-secret-value-123\nTraceback (most recent call last): ...",
        model=M,
        llm_provider=P,
    )

    text = str(map_litellm_error(exc, "gpt-4o"))

    for secret in ("sk-proj-abcdef123456", "abc.def", "plain-key-999", "acme-secret-value-123", "Traceback"):
        assert secret not in text
    assert text.startswith("gpt-4o failed (AuthenticationError):")


# --- import cost ------------------------------------------------------------------------------------


def test_importing_the_client_does_not_import_litellm() -> None:
    shared = Path(__file__).resolve().parents[2] / "shared"
    probe = "import sys, stepwise.llm.client; print('litellm' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": str(shared)}

    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)

    assert out.stdout.strip() == "False"


def test_tool_declarations_round_trip_as_json() -> None:
    # What the model step stores is JSON: a turn's assistant message must serialise as is.
    turn = complete(model="scripted", messages=conversation(), tools=TOOLS)
    assert json.loads(json.dumps(turn.assistant_message()))["tool_calls"][0]["function"]["name"] == "lookup"


_LOADED_PROBE = """
import json
from litellm.litellm_core_utils import streaming_handler
from stepwise.agents.models import ScriptTurn
from stepwise.llm.client import complete

submitted = []
submit = streaming_handler.executor.submit


def recording(fn, *args, **kwargs):
    submitted.append(fn.__name__)
    return submit(fn, *args, **kwargs)


streaming_handler.executor.submit = recording
text = " ".join(f"word{i}" for i in range(40))
turn = complete(model="scripted", messages=[{"role": "user", "content": "hi"}], tools=None,
                script=[ScriptTurn(text=text)], on_text=lambda delta: None)
print(json.dumps({
    "text": turn.text,
    "per_chunk_logs": submitted.count("run_success_logging_and_cache_storage"),
}))
"""


def test_once_litellm_is_loaded_no_streamed_chunk_is_logged() -> None:
    # In a fresh process: the model client's first call loads litellm, and with it the setting.
    shared = Path(__file__).resolve().parents[2] / "shared"
    env = {**os.environ, "PYTHONPATH": str(shared), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}

    out = subprocess.run(
        [sys.executable, "-c", _LOADED_PROBE], env=env, capture_output=True, text=True, check=True
    )
    seen = json.loads(out.stdout.strip().splitlines()[-1])

    assert seen["text"].startswith("word0 word1")
    # A streamed answer of many chunks hands none of them to litellm's logging thread; only the stream's
    # end is submitted (and returns at once: no callback is registered).
    assert seen["per_chunk_logs"] <= 1
