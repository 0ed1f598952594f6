"""The built-in `scripted` model, a litellm custom provider.

It is stateless like a real model: each answer is a pure function of the request (messages, tools
and the script in `extra_body`), so a Lambda retry or a replayed run gets the same answer. The turn
it is on is the number of assistant messages since the last user message.

Only `stepwise.llm.client` imports this module, lazily, because importing litellm costs seconds.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import litellm
from litellm import CustomLLM, ModelResponse
from litellm.llms.custom_llm import CustomLLMError
from litellm.types.llms.openai import ChatCompletionToolCallChunk, ChatCompletionUsageBlock
from litellm.types.utils import GenericStreamingChunk
from pydantic import TypeAdapter, ValidationError

from stepwise.llm.fake_args import example_arguments
from stepwise.llm.models import TOOL_IMAGES_PREFIX, ScriptTurn

PROVIDER = "scripted"
SCRIPT_FIELD = "script"  # the key under the request's `extra_body`

_RESULT_CLIP = 200  # characters of one tool result quoted in a summary
_SUMMARY_CLIP = 1500
_ECHO_CLIP = 200
_TEXT_CHUNKS = 3
_SCRIPT = TypeAdapter(list[ScriptTurn])


@dataclass(frozen=True)
class PlannedCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Reply:
    text: str | None = None
    tool_calls: list[PlannedCall] = field(default_factory=list)

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.tool_calls else "stop"


def register() -> None:
    """Make `scripted/<anything>` a litellm model; safe to call on every request."""
    if not any(entry.get("provider") == PROVIDER for entry in litellm.custom_provider_map):
        litellm.custom_provider_map.append({"provider": PROVIDER, "custom_handler": ScriptedLLM()})


class ScriptedLLM(CustomLLM):
    """The litellm side: unpack the request, decide with `reply`, pack an OpenAI-shaped response or stream."""

    def completion(self, *args: Any, **kwargs: Any) -> ModelResponse:
        model, messages, tools, answer = _decide(kwargs)
        return _response(model, messages, tools, answer)

    async def acompletion(self, *args: Any, **kwargs: Any) -> ModelResponse:
        return self.completion(*args, **kwargs)

    def streaming(self, *args: Any, **kwargs: Any) -> Iterator[GenericStreamingChunk]:
        # Decide before returning the iterator, so a bad script fails the call itself (a 400, exactly as
        # without streaming) instead of surfacing mid-stream.
        _, messages, tools, answer = _decide(kwargs)
        return iter(_chunks(messages, tools, answer))


def _decide(kwargs: dict[str, Any]) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]] | None, Reply]:
    # litellm's custom-provider router passes everything by keyword (main._complete_custom_providers).
    messages: list[dict[str, Any]] = kwargs["messages"]
    optional_params: dict[str, Any] = kwargs.get("optional_params") or {}
    tools = optional_params.get("tools") or None
    answer = reply(messages, tools, _script(optional_params))
    return kwargs.get("model") or PROVIDER, messages, tools, answer


def reply(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, script: list[ScriptTurn] | None
) -> Reply:
    """What the scripted model says next; `tools` None or empty means tools are withheld."""
    last_user = max((i for i, m in enumerate(messages) if _users_turn(m)), default=-1)
    since = messages[last_user + 1 :]
    turn = sum(1 for m in since if m.get("role") == "assistant")
    offered = [t["function"] for t in tools or [] if isinstance(t.get("function"), dict)]
    wrap_up = _summary(since) or _echo(messages[last_user] if last_user >= 0 else None)

    if script is not None:
        if turn >= len(script):
            return Reply(text=wrap_up)  # past the end: answer rather than loop forever
        step = script[turn]
        if step.tool_calls is None:
            return Reply(text=step.text)
        if not offered:
            return Reply(text=f"Step limit reached; tools withheld. {wrap_up}")
        planned = [(c.name, c.arguments) for c in step.tool_calls]
    elif turn == 0 and (own := [f for f in offered if f["name"] not in _read_backs()]):
        planned = [(f["name"], example_arguments(f.get("parameters") or {})) for f in own]
    else:
        return Reply(text=wrap_up)

    if not planned:
        return Reply(text=wrap_up)  # `tool_calls: []` asks for nothing: answer instead
    prefix = _call_prefix(messages, last_user, turn)
    return Reply(
        tool_calls=[PlannedCall(f"{prefix}_{i}", name, args) for i, (name, args) in enumerate(planned)]
    )


def _read_backs() -> frozenset[str]:
    """The builtins a run declares beside the agent's tools (result_read, attachment_read): they read
    back what the conversation holds, so unscripted the model calls the agent's own tools, as
    documented, and not these with made-up ids."""
    from stepwise.tools.registry import RUN_BUILTINS

    return RUN_BUILTINS


def _script(optional_params: dict[str, Any]) -> list[ScriptTurn] | None:
    extra = optional_params.get("extra_body") or {}
    raw = extra.get(SCRIPT_FIELD) if isinstance(extra, dict) else None
    if raw is None:
        return None
    try:
        return _SCRIPT.validate_python(raw)
    except ValidationError as exc:
        # A 400 reaches the caller as litellm.BadRequestError: not retryable, like any bad request.
        raise CustomLLMError(status_code=400, message=f"invalid script: {exc}") from exc


def _users_turn(message: dict[str, Any]) -> bool:
    """A user message that starts a turn: not the one carrying images that tools returned."""
    if message.get("role") != "user":
        return False
    content = message.get("content")
    first = content[0] if isinstance(content, list) and content else None
    return not (isinstance(first, dict) and first.get("text") == TOOL_IMAGES_PREFIX)


def _call_prefix(messages: list[dict[str, Any]], last_user: int, turn: int) -> str:
    # Unique within a run (the turn) and across the runs of one session (which user message this
    # answers, and how many came before it), yet the same on every retry of the same request.
    users = sum(1 for m in messages if m.get("role") == "user")
    anchor = _text(messages[last_user].get("content")) if last_user >= 0 else ""
    tag = hashlib.sha256(f"{users}\n{anchor}".encode()).hexdigest()[:8]
    return f"call_{tag}_{turn}"


def _summary(since: list[dict[str, Any]]) -> str:
    names = {
        call.get("id"): (call.get("function") or {}).get("name", "tool")
        for m in since
        if m.get("role") == "assistant"
        for call in m.get("tool_calls") or []
    }
    results = [
        f"{names.get(m.get('tool_call_id')) or m.get('name') or 'tool'} → "
        + _clip(_text(m.get("content")), _RESULT_CLIP)
        for m in since
        if m.get("role") == "tool"
    ]
    if not results:
        return ""
    noun = "tool" if len(results) == 1 else "tools"
    return _clip(f"Called {len(results)} {noun}: " + "; ".join(results), _SUMMARY_CLIP)


def _echo(user: dict[str, Any] | None) -> str:
    said = _text(user.get("content")) if user else ""
    return f"You said: {_clip(said, _ECHO_CLIP)}" if said else "Hello! There is nothing to answer yet."


def _text(content: Any) -> str:
    """Message content as plain text: a string, or the text parts of a multimodal content list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return json.dumps(content, sort_keys=True, default=str)


def _clip(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _tokens(text: str) -> int:
    # A cheap deterministic estimate (about four characters a token), so usage sums can be tested.
    return max(1, len(text) // 4)


def _calls(answer: Reply) -> list[dict[str, Any]]:
    return [
        {
            "id": c.id,
            "type": "function",
            "function": {"name": c.name, "arguments": json.dumps(c.arguments, sort_keys=True)},
        }
        for c in answer.tool_calls
    ]


IMAGE_TOKENS = 1_000


def _without_images(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    placeholder = {"type": "image_url", "image_url": "x" * (4 * IMAGE_TOKENS)}
    return [
        {
            **m,
            "content": [
                placeholder if isinstance(p, dict) and p.get("type") == "image_url" else p for p in c
            ],
        }
        if isinstance(c := m.get("content"), list)
        else m
        for m in messages
    ]


def _usage(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, answer: Reply
) -> ChatCompletionUsageBlock:
    # An image counts as providers count one (a fixed tile budget), not as its base64 characters.
    prompt = json.dumps([_without_images(messages), tools or []], sort_keys=True, default=str)
    completion = answer.text if answer.text is not None else json.dumps(_calls(answer), sort_keys=True)
    prompt_tokens, completion_tokens = _tokens(prompt), _tokens(completion)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _response(
    model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, answer: Reply
) -> ModelResponse:
    calls = _calls(answer)
    message: dict[str, Any] = {"role": "assistant", "content": answer.text}
    if calls:
        message["tool_calls"] = calls
    usage = _usage(messages, tools, answer)
    seed = json.dumps([messages, tools or [], message], sort_keys=True, default=str)
    return ModelResponse(
        id="chatcmpl-scripted-" + hashlib.sha256(seed.encode()).hexdigest()[:16],
        model=f"{PROVIDER}/{model}",
        choices=[{"index": 0, "finish_reason": answer.finish_reason, "message": message}],
        usage=litellm.Usage(
            prompt_tokens=usage["prompt_tokens"],
            completion_tokens=usage["completion_tokens"],
            total_tokens=usage["total_tokens"],
        ),
    )


def _chunks(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, answer: Reply
) -> list[GenericStreamingChunk]:
    """The answer as a real provider streams it: the text in a few deltas, each tool call's arguments
    split across two, and the finish reason and usage on the last chunk."""

    def delta(text: str = "", tool_use: ChatCompletionToolCallChunk | None = None) -> GenericStreamingChunk:
        return {"text": text, "tool_use": tool_use, "is_finished": False, "finish_reason": "", "usage": None}

    out = [delta(text=piece) for piece in _pieces(answer.text or "", _TEXT_CHUNKS)]
    for index, call in enumerate(answer.tool_calls):
        arguments = json.dumps(call.arguments, sort_keys=True)
        half = len(arguments) // 2
        # Only the first delta of a call names it, as OpenAI streams; later ones carry argument text.
        out.append(delta(tool_use=_call_delta(index, call.id, call.name, arguments[:half])))
        out.append(delta(tool_use=_call_delta(index, None, None, arguments[half:])))
    finish: GenericStreamingChunk = {
        "text": "",
        "tool_use": None,
        "is_finished": True,
        "finish_reason": answer.finish_reason,
        "usage": _usage(messages, tools, answer),
    }
    return [*out, finish]


def _call_delta(index: int, call_id: str | None, name: str | None, part: str) -> ChatCompletionToolCallChunk:
    return {"id": call_id, "type": "function", "index": index, "function": {"name": name, "arguments": part}}


def _pieces(text: str, parts: int) -> list[str]:
    """`text` cut at spaces into at most `parts` pieces that join back to exactly `text`."""
    if not text:
        return []
    words = text.split(" ")
    size = -(-len(words) // parts)
    groups = [" ".join(words[i : i + size]) for i in range(0, len(words), size)]
    pieces = [group + " " for group in groups[:-1]] + groups[-1:]
    return [piece for piece in pieces if piece]
