"""Context management before every model call: the estimate, the placeholders, the summary."""

from __future__ import annotations

import copy
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from stepwise.core.config import ConfigError
from stepwise.loop.compaction import (
    COMPACT_TO,
    DEFAULT_WINDOW,
    FORCED_THRESHOLD,
    KEEP_TURNS,
    NAMED_VALUE_CHARS,
    PREVIEW_CHARS,
    SUMMARY_PREFIX,
    THRESHOLD,
    WINDOW_ENV,
    Compaction,
    context_window,
    count_tokens,
    fit,
    placeholder,
    reapply,
    summary_prompt,
)
from stepwise.runs.state import Compacted

Message = dict[str, Any]
MODEL = "scripted"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search_tickets",
            "description": "Search the ticket database",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        },
    }
]


def big_result(turn: int, rows: int = 60) -> str:
    return json.dumps(
        {
            "ticket_id": f"T-{turn}",
            "title": f"Ticket number {turn}",
            "status": "open",
            "url": f"https://tickets.example.com/T-{turn}",
            "rows": [
                {"line": i, "text": f"log line {i} of ticket {turn}, nothing remarkable"} for i in range(rows)
            ],
            "body": "lorem ipsum dolor sit amet " * 40,
        }
    )


def conversation(turns: int, *, rows: int = 60, current_results: int = 1) -> list[Message]:
    """A system prompt, then `turns` user turns each with one tool call and its result; the last turn (the
    current one) has `current_results` calls and no answer yet."""
    messages: list[Message] = [{"role": "system", "content": "You are a support agent."}]
    for turn in range(turns):
        current = turn == turns - 1
        messages.append({"role": "user", "content": f"Question {turn}: what about ticket T-{turn}?"})
        for call in range(current_results if current else 1):
            call_id = f"call_{turn}_{call}"
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {
                                "name": "search_tickets",
                                "arguments": json.dumps({"query": f"T-{turn}"}),
                            },
                        }
                    ],
                }
            )
            messages.append({"role": "tool", "tool_call_id": call_id, "content": big_result(turn, rows)})
        if not current:
            messages.append({"role": "assistant", "content": f"Ticket T-{turn} is open."})
    return messages


def user_indices(messages: list[Message]) -> list[int]:
    return [i for i, m in enumerate(messages) if m["role"] == "user"]


def is_compacted(message: Message) -> bool:
    try:
        return json.loads(message["content"]).get("compacted") is True
    except (TypeError, ValueError, AttributeError):
        return False


def pairing_errors(messages: list[Message]) -> list[str]:
    """What a provider would reject: a tool call without its result right after it (results of one assistant
    message may come in any order), or a tool result that does not answer the assistant message before it."""
    errors: list[str] = []
    pending: set[str] = set()
    for index, message in enumerate(messages):
        if message["role"] == "tool":
            if message.get("tool_call_id") not in pending:
                errors.append(f"message {index}: result {message.get('tool_call_id')} answers no open call")
            pending.discard(message.get("tool_call_id", ""))
            continue
        if pending:
            errors.append(f"message {index}: calls {sorted(pending)} have no result")
            pending.clear()
        if message["role"] == "assistant":
            pending = {call["id"] for call in message.get("tool_calls") or []}
    if pending:
        errors.append(f"end: calls {sorted(pending)} have no result")
    return errors


@pytest.fixture
def no_dns(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[object]]:
    """Name lookups fail and are recorded (the unit conftest blocks connections, not lookups), so a test can
    assert that nothing even tried to reach the network."""
    attempts: list[object] = []

    def refused(host: object, *args: object, **kwargs: object) -> Any:
        attempts.append(host)
        raise OSError(f"unit tests may not resolve {host!r}")

    monkeypatch.setattr(socket, "getaddrinfo", refused)
    yield attempts


# -- the validator the other tests rely on


def test_the_pairing_validator_catches_a_call_without_its_result_and_an_orphan_result() -> None:
    messages = conversation(2)
    assert pairing_errors(messages) == []
    without_result = [m for m in messages if m.get("tool_call_id") != "call_0_0"]
    orphan = [messages[0], messages[1], *messages[3:]]  # the assistant call of turn 0 is gone
    assert pairing_errors(without_result)
    assert pairing_errors(orphan)


# -- counting and windows


@pytest.mark.parametrize(
    "model",
    [
        "scripted",
        "gpt-4o-mini",
        "claude-3-5-sonnet-20241022",
        "claude-sonnet-4-5",  # litellm's bundled Anthropic tokenizer
        "an-unknown-model",
        "groq/llama-3.1-8b-instant",  # litellm would download a llama tokenizer from the Hub
        "together_ai/meta-llama/Llama-2-7b-chat-hf",
    ],
)
def test_tokens_are_counted_offline(model: str, no_dns: list[object]) -> None:
    messages = conversation(2)

    short = count_tokens(model, messages[:2])
    full = count_tokens(model, messages)
    with_tools = count_tokens(model, messages, TOOLS)

    assert 0 < short < full < with_tools
    assert no_dns == []


def test_the_window_comes_from_litellm_for_a_known_model_and_defaults_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(WINDOW_ENV, raising=False)

    assert context_window("gpt-4o-mini") == 128_000
    assert context_window("claude-sonnet-4-5") == 200_000
    assert context_window("an-unknown-model") == DEFAULT_WINDOW == 128_000
    assert context_window("scripted") == 128_000


def test_the_environment_overrides_the_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(WINDOW_ENV, "32000")

    assert context_window("scripted") == 32_000
    assert context_window("claude-sonnet-4-5") == 32_000


@pytest.mark.parametrize("value", ["0", "-5", "lots", "1.5"])
def test_a_bad_window_setting_fails_with_its_name(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(WINDOW_ENV, value)

    with pytest.raises(ConfigError, match=WINDOW_ENV):
        context_window("scripted")


# -- under the threshold


def test_under_the_threshold_nothing_changes() -> None:
    messages = conversation(6)

    sent, compaction = fit(messages, model=MODEL, tools=TOOLS, window=1_000_000)

    assert sent is messages
    assert compaction is None


# -- placeholders


def window_for(messages: list[Message], share: float) -> int:
    """A window whose threshold is `share` of what `messages` weigh."""
    return int(count_tokens(MODEL, messages, TOOLS) * share / THRESHOLD)


def test_old_tool_results_are_shortened_oldest_first_until_under_the_threshold() -> None:
    messages = conversation(12)
    original = copy.deepcopy(messages)
    window = window_for(messages, 0.8)

    sent, compaction = fit(messages, model=MODEL, tools=TOOLS, window=window)

    assert compaction is not None and compaction.stage == "placeholders"
    results = [i for i, m in enumerate(sent) if m["role"] == "tool"]
    shortened = [i for i in results if is_compacted(sent[i])]
    assert shortened == results[: len(shortened)]  # the oldest ones, with no gap
    assert 0 < len(shortened) == compaction.shortened_tool_results < len(results) - KEEP_TURNS
    # it aims below the threshold, so the calls after it have room to grow before the next one
    assert compaction.tokens_after == count_tokens(MODEL, sent, TOOLS) <= COMPACT_TO * window
    assert compaction.tokens_before == count_tokens(MODEL, messages, TOOLS) > compaction.tokens_after
    # it stopped as soon as it got there: with the last placeholder undone it would not
    undone = [*sent[: shortened[-1]], messages[shortened[-1]], *sent[shortened[-1] + 1 :]]
    assert count_tokens(MODEL, undone, TOOLS) > COMPACT_TO * window
    assert messages == original
    assert pairing_errors(sent) == []


def test_a_placeholder_keeps_ids_titles_and_status() -> None:
    messages = conversation(8)

    sent, _ = fit(messages, model=MODEL, tools=TOOLS, window=window_for(messages, 0.5))

    first = json.loads(sent[3]["content"])
    assert sent[3]["tool_call_id"] == "call_0_0"
    assert first["compacted"] is True
    assert first["kept"] == {
        "ticket_id": "T-0",
        "title": "Ticket number 0",
        "status": "open",
        "url": "https://tickets.example.com/T-0",
    }
    assert first["dropped"] == {
        "rows": "60 items",
        "body": f"{len('lorem ipsum dolor sit amet ') * 40} chars",
    }
    assert first["original_chars"] == len(messages[3]["content"])
    assert "call the tool again" in first["note"]


def test_the_last_three_user_turns_and_the_system_prompt_stay_whole() -> None:
    messages = conversation(10)
    third_last_turn = user_indices(messages)[-3]

    sent, compaction = fit(messages, model=MODEL, tools=TOOLS, window=100)  # nothing could fit

    assert compaction is not None and compaction.over_window
    assert sent[0] == messages[0]
    assert sent[third_last_turn:] == messages[third_last_turn:]
    old_results = [m for m in sent[:third_last_turn] if m["role"] == "tool"]
    assert old_results and all(is_compacted(m) for m in old_results)
    assert compaction.shortened_tool_results == len(old_results)


def test_the_current_turn_is_never_touched_however_long_it_grows() -> None:
    # one user turn, many tool results: a long run
    messages = conversation(1, current_results=12)

    sent, compaction = fit(messages, model=MODEL, tools=TOOLS, window=1_000)

    assert sent == messages
    assert compaction is not None
    assert compaction == Compaction(
        tokens_before=compaction.tokens_before,
        tokens_after=compaction.tokens_before,
        shortened_tool_results=0,
        summarized_messages=0,
        stage="placeholders",
        window=1_000,
        kept=Compacted(through=1),  # nothing before the current turn: nothing to apply again
    )
    assert compaction.over_window


def test_small_results_and_placeholders_are_left_alone() -> None:
    assert placeholder('{"error": {"code": "timeout", "message": "took too long"}}') is None
    assert placeholder("ok") is None
    already = placeholder(big_result(1))
    assert already is not None
    assert placeholder(already) is None


def test_a_text_result_keeps_its_beginning() -> None:
    text = "Report for Q3. " + "x" * 5_000

    short = json.loads(placeholder(text) or "")

    assert short["compacted"] is True
    assert short["preview"].startswith(text[:PREVIEW_CHARS])
    assert len(short["preview"]) < 300
    assert short["original_chars"] == len(text)


def test_a_list_result_keeps_its_length_and_the_small_fields_of_its_first_item() -> None:
    rows = [{"id": i, "name": f"row {i}", "payload": "p" * 300} for i in range(50)]

    short = json.loads(placeholder(json.dumps(rows)) or "")

    assert short["kept"] == {"items": 50, "first": {"id": 0, "name": "row 0"}}


def test_nested_small_fields_are_kept_by_path_and_long_values_are_clipped() -> None:
    result = {
        "data": {"order_id": "O-7", "total": 42.5, "lines": ["l"] * 500, "deep": {"deeper": {"id": "gone"}}},
        "message": "m" * 1_000,
        "notes": "n" * 100,  # neither short nor named
    }

    short = json.loads(placeholder(json.dumps(result)) or "")

    assert short["kept"]["data.order_id"] == "O-7"
    assert short["kept"]["data.total"] == 42.5
    assert short["kept"]["message"].startswith("m" * NAMED_VALUE_CHARS)
    assert len(short["kept"]["message"]) < 250
    assert "notes" not in short["kept"]
    assert short["dropped"] == {"notes": "100 chars"}
    assert not any(path.startswith("data.deep") for path in short["kept"])


# -- summary


class FakeSummarizer:
    def __init__(self) -> None:
        self.received: list[list[Message]] = []

    def __call__(self, messages: list[Message]) -> str:
        self.received.append(messages)
        return f"  {len(messages)} messages about tickets.  "


def test_the_summary_replaces_the_older_conversation_after_the_system_prompt() -> None:
    messages = conversation(10)
    original = copy.deepcopy(messages)
    third_last_turn = user_indices(messages)[-3]
    summarizer = FakeSummarizer()

    sent, compaction = fit(
        messages, model=MODEL, tools=TOOLS, window=window_for(messages, 0.3), summarize=summarizer
    )

    assert compaction is not None and compaction.stage == "summary"
    assert len(summarizer.received) == 1
    older = summarizer.received[0]
    assert len(older) == third_last_turn - 1 == compaction.summarized_messages
    assert older[0]["content"].startswith("Question 0")  # from the first message after the system prompt
    assert sent[0] == messages[0]
    assert sent[1] == {
        "role": "user",
        "content": f"Summary of the earlier conversation:\n{len(older)} messages about tickets.",
    }
    assert sent[2:] == messages[third_last_turn:]
    assert compaction.tokens_after == count_tokens(MODEL, sent, TOOLS) < compaction.tokens_before
    assert pairing_errors(sent) == []
    assert messages == original


def test_no_summary_when_the_placeholders_are_enough() -> None:
    messages = conversation(10)
    summarizer = FakeSummarizer()

    _, compaction = fit(
        messages, model=MODEL, tools=TOOLS, window=window_for(messages, 0.8), summarize=summarizer
    )

    assert compaction is not None and compaction.stage == "placeholders"
    assert summarizer.received == []


def test_compacting_a_compacted_conversation_folds_the_old_summary_into_the_new_one() -> None:
    messages = conversation(10)
    summarizer = FakeSummarizer()
    once, _ = fit(messages, model=MODEL, tools=TOOLS, window=window_for(messages, 0.3), summarize=summarizer)
    grown = [*once, {"role": "assistant", "content": "Done."}, *conversation(3)[1:]]

    again, compaction = fit(
        grown, model=MODEL, tools=TOOLS, window=window_for(grown, 0.3), summarize=summarizer
    )

    assert compaction is not None and compaction.stage == "summary"
    assert summarizer.received[-1][0] == once[1]  # the first summary is among what the second replaces
    assert sum(1 for m in again if m["content"] and str(m["content"]).startswith(SUMMARY_PREFIX)) == 1
    assert pairing_errors(again) == []


def test_the_summary_prompt_renders_the_conversation_for_a_light_model() -> None:
    messages = conversation(2)[1:]
    messages.append({"role": "assistant", "content": "y" * 10_000})

    prompt = summary_prompt(messages)

    assert [m["role"] for m in prompt] == ["system", "user"]
    assert "decisions" in prompt[0]["content"] and "open questions" in prompt[0]["content"]
    text = prompt[1]["content"]
    assert "Question 0: what about ticket T-0?" in text
    assert '[assistant called search_tickets] {"query": "T-0"}' in text
    assert "[search_tickets result] {" in text and '"ticket_id": "T-0"' in text
    assert "Ticket T-0 is open." in text
    assert "more characters]" in text and len(text) < 30_000


# -- force


def test_force_compacts_even_when_the_estimate_is_under_the_threshold() -> None:
    messages = conversation(10)
    window = window_for(messages, 2.0)  # the estimate says it fits easily
    assert fit(messages, model=MODEL, tools=TOOLS, window=window)[1] is None

    sent, compaction = fit(messages, model=MODEL, tools=TOOLS, window=window, force=True)

    assert compaction is not None and compaction.shortened_tool_results > 0
    # the provider disagreed with the estimate, so it aims at half of what was rejected
    assert compaction.tokens_after <= FORCED_THRESHOLD * compaction.tokens_before
    assert pairing_errors(sent) == []


def test_force_aims_at_half_the_window_when_the_estimate_is_over_it() -> None:
    messages = conversation(12)
    window = window_for(messages, 0.9 * THRESHOLD)  # the estimate is over the window itself
    summarizer = FakeSummarizer()

    _, gentle = fit(messages, model=MODEL, tools=TOOLS, window=window, summarize=summarizer)
    _, forced = fit(messages, model=MODEL, tools=TOOLS, window=window, summarize=summarizer, force=True)

    assert gentle is not None and forced is not None
    assert gentle.tokens_after <= COMPACT_TO * window
    assert forced.tokens_after <= FORCED_THRESHOLD * window < forced.tokens_before


# -- a compaction kept for the run's later calls


def step(messages: list[Message], n: int) -> list[Message]:
    """`messages` with one more step of the current turn: a small call and its result."""
    call_id = f"call_more_{n}"
    call = {"id": call_id, "type": "function", "function": {"name": "search_tickets", "arguments": "{}"}}
    return [
        *messages,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": f"small result {n}"},
    ]


def test_the_calls_after_a_compaction_send_its_prefix_unchanged_until_the_threshold_is_passed_again() -> None:
    messages = conversation(12)
    window = window_for(messages, 0.8)
    first, compaction = fit(messages, model=MODEL, tools=TOOLS, window=window)
    assert compaction is not None and compaction.kept is not None
    kept = compaction.kept

    grown = step(messages, 1)
    second, again = fit(grown, model=MODEL, tools=TOOLS, window=window, kept=kept)

    # no new compaction: the previous request is this one's prefix, byte for byte
    assert again is None
    assert json.dumps(second[: len(first)]) == json.dumps(first) and len(second) == len(first) + 2
    # without it every call over the threshold would compact again (and summarize again, with a model)
    assert fit(grown, model=MODEL, tools=TOOLS, window=window)[1] is not None

    # once the kept compaction no longer fits, a new one starts from the whole conversation
    later = grown
    for n in range(2, 400):
        later = step(later, n)
        if count_tokens(MODEL, reapply(later, kept), TOOLS) > THRESHOLD * window:
            break
    _, third = fit(later, model=MODEL, tools=TOOLS, window=window, kept=kept)
    assert third is not None and third.kept is not None and third.kept.through > kept.through
    assert third.tokens_after < third.tokens_before


def test_a_kept_summary_is_sent_again_without_summarizing_again() -> None:
    messages = conversation(10)
    window = window_for(messages, 0.4)  # placeholders are not enough; the summary is, under the threshold
    summarizer = FakeSummarizer()
    first, compaction = fit(messages, model=MODEL, tools=TOOLS, window=window, summarize=summarizer)
    assert compaction is not None and compaction.stage == "summary" and compaction.kept is not None

    grown = step(messages, 1)
    second, again = fit(
        grown, model=MODEL, tools=TOOLS, window=window, summarize=summarizer, kept=compaction.kept
    )

    assert again is None and len(summarizer.received) == 1
    assert second[: len(first)] == first and second[-2:] == grown[-2:]
    assert pairing_errors(second) == []
