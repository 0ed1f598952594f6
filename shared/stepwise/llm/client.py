"""One model turn through litellm, for the model-step Lambda.

A turn is streamed, so text reaches `on_text` as it is written, and may take more than one request:
an empty reply is asked again once, and an answer cut off at the token limit is continued up to
MAX_CONTINUATIONS times and stitched into one.

litellm is imported on the first call, not at import: it takes seconds to load, and nothing but the
model step should pay for it. Retries belong to Step Functions (Retry on RateLimited and
ProviderUnavailable, with backoff and jitter), so litellm is told never to retry or sleep.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from stepwise.core import config, credentials, errors, safejson
from stepwise.llm.models import ScriptTurn, Usage

SCRIPTED = config.SCRIPTED_MODEL
MAX_CONTINUATIONS = 3
CONTINUE_PROMPT = "Continue exactly where you left off. Do not repeat anything."
_DETAIL_CLIP = 500

TextSink = Callable[[str], None]

# litellm's provider → the deployment secret that holds its API key (stepwise.core.credentials). Bedrock
# needs none: the model step's role signs its requests (bedrock:InvokeModel*).
PROVIDER_KEYS = {"openai": credentials.OPENAI_API_KEY, "anthropic": credentials.ANTHROPIC_API_KEY}


ContextTooLong = errors.ContextTooLong  # lives in errors so the lifecycle functions can name its code


@dataclass(frozen=True)
class ToolCallOut:
    id: str
    name: str
    arguments: dict[str, Any]  # `{"_raw": text}` when the model wrote arguments that are not a JSON object


@dataclass(frozen=True)
class ModelTurn:
    text: str | None
    tool_calls: list[ToolCallOut]
    usage: Usage  # summed over every request the turn took
    finish_reason: str | None  # of the last request
    continuations: int = 0  # requests made to continue an answer cut off at the token limit
    model: str | None = None  # the model that answered, as the provider names it (of the last request)
    # Whose key paid: "agent" | "tenant" | "deployment" (stepwise.settings.providers), set by the caller
    # that chose the key; a usage line records it as `key_owner`.
    key_owner: str = "deployment"

    @property
    def empty(self) -> bool:
        return not self.text and not self.tool_calls

    def assistant_message(self) -> dict[str, Any]:
        """This turn as the OpenAI-format assistant message that goes back into the history."""
        message: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": _arguments_text(call.arguments)},
                }
                for call in self.tool_calls
            ]
        return message


def resolve_model(agent_model: str | None) -> str:
    """The agent's model, else `STEPWISE_MODEL`, else the built-in scripted model."""
    if agent_model and agent_model.strip():
        return agent_model.strip()
    return config.models().default_model


def is_scripted(model: str) -> bool:
    return model == SCRIPTED or model.startswith(f"{SCRIPTED}/")


def complete(
    *,
    model: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    temperature: float | None = None,
    script: list[ScriptTurn] | None = None,
    on_text: TextSink | None = None,
    max_tokens: int | None = None,
    api_key: str | None = None,
    response_format: dict[str, Any] | None = None,
) -> ModelTurn:
    """One model turn, streamed: `on_text` gets each text delta as it arrives, across continuations.

    `tools` None (or empty) withholds tools; `script` only reaches the scripted model; `max_tokens`
    caps each request, not the stitched answer; `api_key` (a tenant's or an agent's own) replaces the
    deployment's. `response_format` (a JSON Schema) asks for an answer that matches it, from providers
    that take one (litellm.supports_response_schema); the others get none. Raises RateLimited,
    ProviderUnavailable, ContextTooLong or ModelError, also when the stream breaks after some text was
    delivered.
    """
    request = _request(model, tools, temperature, script, max_tokens, api_key, response_format)
    turn = _stream(request, messages, model, on_text)
    usage = turn.usage
    if turn.empty:
        # Providers now and then answer with nothing at all; the same request again usually does better.
        turn = _stream(request, messages, model, on_text)
        usage += turn.usage
    history, parts, continuations = list(messages), [turn.text or ""], 0
    while _cut_off(turn) and continuations < MAX_CONTINUATIONS:
        # Each continuation appends to the history rather than rewriting it, so the requests share a
        # growing prefix that providers can cache.
        history += [{"role": "assistant", "content": turn.text}, {"role": "user", "content": CONTINUE_PROMPT}]
        turn = _stream(request, history, model, on_text)
        usage += turn.usage
        continuations += 1
        parts.append(turn.text or "")
    return ModelTurn(
        text="".join(parts) or None,
        tool_calls=turn.tool_calls,
        usage=usage,
        finish_reason=turn.finish_reason,
        continuations=continuations,
        model=turn.model,
    )


def _cut_off(turn: ModelTurn) -> bool:
    """An answer in text that hit the token limit (a cut-off tool call cannot be continued)."""
    return turn.finish_reason == "length" and bool(turn.text) and not turn.tool_calls


def _request(
    model: str,
    tools: list[dict[str, Any]] | None,
    temperature: float | None,
    script: list[ScriptTurn] | None,
    max_tokens: int | None,
    api_key: str | None = None,
    response_format: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The litellm.completion arguments for `model`, all but the messages."""
    # litellm never rejects `stream_options` (utils.PROVIDER_UNVALIDATED_PARAMS) and forwards it only to
    # providers that take it; the others report usage their own way, or litellm counts the tokens.
    request: dict[str, Any] = {
        "model": model,
        "stream": True,
        "stream_options": {"include_usage": True},
        "num_retries": 0,
        "max_retries": 0,
    }
    if is_scripted(model):
        from stepwise.llm import scripted

        scripted.register()
        # litellm needs `provider/model`; a bare "scripted" is the agent-facing name.
        request["model"] = model if "/" in model else f"{SCRIPTED}/{SCRIPTED}"
        if script is not None:
            # For a custom provider litellm copies non-OpenAI params into `optional_params` verbatim, and
            # `extra_body` is the OpenAI channel for provider-specific request fields, so the script
            # rides with the request exactly as a real model's inputs would.
            turns = [t.model_dump(mode="json", exclude_none=True) for t in script]
            request["extra_body"] = {scripted.SCRIPT_FIELD: turns}
    else:
        key = api_key or provider_key(model)
        if key is not None:
            # In AWS the key is not in the environment (where litellm would look): it comes from
            # Secrets Manager, refreshed, and rides with each request.
            request["api_key"] = key
        points = cache_points(model)
        if points:
            request["cache_control_injection_points"] = points
        if response_format is not None and _supports_schema(model):
            # Not strict: OpenAI's strict mode refuses most schemas users write (every property
            # required, no additionalProperties); the answer is validated after, as for any provider.
            schema = {"name": "output", "schema": response_format, "strict": False}
            request["response_format"] = {"type": "json_schema", "json_schema": schema}
    if tools:
        request["tools"] = tools
    if temperature is not None:
        request["temperature"] = temperature
    if max_tokens is not None:
        request["max_tokens"] = max_tokens
    return request


def _supports_schema(model: str) -> bool:
    try:
        return bool(_litellm().supports_response_schema(model=model))
    except Exception:  # noqa: BLE001 - a model litellm cannot place takes no response_format
        return False


def provider_of(model: str) -> str | None:
    """litellm's name for `model`'s provider ("openai", "bedrock", ...; "scripted"), None if unknown."""
    if is_scripted(model):
        return SCRIPTED
    try:
        return str(_litellm().get_llm_provider(model)[1])
    except Exception:  # noqa: BLE001 - a model litellm cannot place: its call reports it, classified
        return None


def provider_key(model: str) -> str | None:
    """The API key of `model`'s provider from the deployment's secrets, or None (none needed, or none
    set: litellm then reports the missing key itself, as a ModelError)."""
    litellm = _litellm()
    try:
        _, provider, _, _ = litellm.get_llm_provider(model)
    except litellm.BadRequestError:  # a model litellm does not know: its own call will say so, classified
        return None
    name = PROVIDER_KEYS.get(provider)
    return credentials.get(name) if name else None


# Providers that cache a prompt only where it is marked. OpenAI, DeepSeek and Gemini's implicit cache
# need nothing, and an unasked-for mark is at best ignored there.
_MARKED_PROVIDERS = {"anthropic"}
_MARKED_FAMILIES = {"bedrock": ("anthropic.", "claude", "nova"), "vertex_ai": ("claude",)}
# The stable prefix (system prompt, then tool declarations: litellm marks the last tool) and the
# moving boundary (the newest message), so each call reads what the previous one wrote. Three of the
# four marks Anthropic allows; litellm translates them to Bedrock's cachePoints.
CACHE_POINTS: tuple[dict[str, Any], ...] = (
    {"location": "message", "role": "system"},
    {"location": "tool_config"},
    {"location": "message", "index": -1},
)


def cache_points(model: str) -> list[dict[str, Any]]:
    """litellm's cache-control injection points for `model`, empty where caching needs no marks."""
    try:
        provider = _litellm().get_llm_provider(model)[1]
    except Exception:  # noqa: BLE001 - a model litellm cannot place gets no marks; the call reports it
        return []
    name = model.lower()
    if provider in _MARKED_PROVIDERS or any(f in name for f in _MARKED_FAMILIES.get(provider, ())):
        return [dict(point) for point in CACHE_POINTS]
    return []


def _stream(
    request: dict[str, Any], messages: list[dict[str, Any]], model: str, on_text: TextSink | None
) -> ModelTurn:
    """One streamed request, its text passed to `on_text` delta by delta, rebuilt into a turn."""
    litellm = _litellm()
    try:
        stream = litellm.completion(messages=messages, **request)
    except Exception as exc:  # everything litellm raises is classified; nothing else runs in this block
        raise map_litellm_error(exc, model) from exc
    chunks: list[Any] = []
    try:
        for chunk in _classified(stream, model):
            chunks.append(chunk)
            text = _delta_text(chunk)
            if text and on_text is not None:
                on_text(text)
    except BaseException:
        _close(stream)  # a failing `on_text` must not leave the connection open
        raise
    try:
        # It rebuilds tool calls from their argument fragments and keeps the provider's usage, cached
        # tokens included (OpenAI- and Anthropic-style; tests/integration/test_model_client.py checks it).
        built = litellm.stream_chunk_builder(chunks, messages=messages) if chunks else None
    except Exception as exc:  # a stream litellm itself cannot assemble would fail the same way again
        raise errors.ModelError(f"{model} sent a stream that could not be assembled: {_detail(exc)}") from exc
    if built is None:
        return ModelTurn(text=None, tool_calls=[], usage=Usage(), finish_reason=None)  # nothing reported
    turn = _turn(built)
    return dataclasses.replace(turn, usage=_priced(built, model, turn.usage))


def _classified(stream: Iterable[Any], model: str) -> Iterator[Any]:
    """The stream's chunks; an error raised while reading it is mapped like one raised by the call."""
    iterator = iter(stream)
    while True:
        try:
            chunk = next(iterator)
        except StopIteration:
            return
        except Exception as exc:  # only litellm's iteration runs here, never the caller's callback
            raise map_litellm_error(exc, model) from exc
        yield chunk


def _delta_text(chunk: Any) -> str | None:
    choices = getattr(chunk, "choices", None)
    if not choices:
        return None  # e.g. the usage-only chunk that ends an OpenAI stream
    delta = getattr(choices[0], "delta", None)
    content = getattr(delta, "content", None)
    return content if isinstance(content, str) else None


def _close(stream: Any) -> None:
    close = getattr(stream, "close", None)
    if callable(close):
        close()


def map_litellm_error(exc: BaseException, model: str) -> Exception:
    """The step error for a litellm exception; the ASL retries RateLimited and ProviderUnavailable."""
    import litellm

    detail = _detail(exc)
    status = getattr(exc, "status_code", None)
    if isinstance(exc, litellm.ContextWindowExceededError):
        return ContextTooLong(f"the conversation is too long for {model}: {detail}")
    if isinstance(exc, litellm.RateLimitError) or status == 429:
        return errors.RateLimited(f"{model} is rate limiting requests: {detail}")
    unavailable = (
        litellm.Timeout,
        litellm.APIConnectionError,
        litellm.ServiceUnavailableError,
        litellm.InternalServerError,
        litellm.BadGatewayError,
    )
    if isinstance(exc, unavailable) or (isinstance(status, int) and (status >= 500 or status == 408)):
        return errors.ProviderUnavailable(f"{model} is unavailable: {detail}")
    return errors.ModelError(f"{model} failed ({type(exc).__name__}): {detail}")


def parse_arguments(raw: str | None) -> dict[str, Any]:
    """Tool-call arguments as the model wrote them; non-object JSON is kept raw for the executor to reject."""
    if raw is None or not raw.strip():
        return {}  # providers send "" for a call without arguments
    try:
        parsed = safejson.loads(raw)
    except ValueError:  # not JSON, or nested past the cap: the step answers it with an error result
        return {"_raw": raw}
    return parsed if isinstance(parsed, dict) else {"_raw": raw}


def usage_of(usage: Any) -> Usage:
    """Token counts from a litellm usage object. litellm counts the whole prompt in `prompt_tokens`
    for every provider (Anthropic's cache reads and writes included) and details the cached part
    OpenAI-style or Anthropic-style. The cost is priced separately (`_priced`)."""
    if usage is None:
        return Usage()
    details = _field(usage, "prompt_tokens_details")
    cached = _field(details, "cached_tokens") or _field(usage, "cache_read_input_tokens") or 0
    written = _field(details, "cache_write_tokens") or _field(usage, "cache_creation_input_tokens") or 0
    return Usage(
        input_tokens=_field(usage, "prompt_tokens") or 0,
        output_tokens=_field(usage, "completion_tokens") or 0,
        cached_tokens=cached,
        cache_write_tokens=written,
    )


def _priced(response: Any, model: str, usage: Usage) -> Usage:
    """The call's cost from litellm's local cost map, each provider's cache-read and cache-write
    prices included; None for a model the map does not price. The scripted model costs nothing."""
    if is_scripted(model):
        return usage.model_copy(update={"cost_usd": 0.0})
    litellm = _litellm()
    try:
        cost = litellm.completion_cost(completion_response=response, model=model)
    except Exception:  # noqa: BLE001 - litellm raises several kinds for "not priced"; none is a failure
        return usage.model_copy(update={"cost_usd": None})
    return usage.model_copy(update={"cost_usd": float(cost) if cost is not None else None})


@functools.cache
def _litellm() -> Any:
    # The cost map bundled with litellm is enough for us; fetching the remote one would add a network
    # round trip to every cold start (and hang without egress). An operator's explicit setting wins.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True  # its "Give Feedback" banner would otherwise land in every error log
    # Stepwise registers no litellm callbacks: it reads usage and prices the call itself (_priced). Left
    # on, litellm hands every streamed chunk to a logging thread that starts an asyncio loop per chunk,
    # CPU a step pays for on every delta (half of a scripted model call). The one success log at the end
    # of a stream still runs.
    litellm.disable_streaming_logging = True
    return litellm


def warm() -> None:
    """Import litellm ahead of the first model call (it takes seconds), e.g. while a server starts."""
    _litellm()


def _turn(response: Any) -> ModelTurn:
    choice = response.choices[0]
    message = choice.message
    calls = [
        ToolCallOut(id=call.id, name=call.function.name, arguments=parse_arguments(call.function.arguments))
        for call in message.tool_calls or []
    ]
    return ModelTurn(
        text=message.content or None,
        tool_calls=calls,
        usage=usage_of(getattr(response, "usage", None)),
        finish_reason=choice.finish_reason,
        model=_field(response, "model"),
    )


def _arguments_text(arguments: dict[str, Any]) -> str:
    if set(arguments) == {"_raw"} and isinstance(arguments["_raw"], str):
        return arguments["_raw"]  # hand the model back exactly what it wrote
    return json.dumps(arguments)


def _field(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


# Credentials that could appear in a provider's error text: key-shaped tokens, auth headers, and
# `key=value` pairs; plus the literal values of credential-looking environment variables.
_SECRET_SHAPES = (
    re.compile(r"\bsk-[A-Za-z0-9_\-]{6,}"),
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/\-]+=*"),
    re.compile(
        r"(?i)((?:api[_-]?key|x-api-key|authorization|access[_-]?token|secret)[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]+"
    ),
)


def _detail(exc: BaseException) -> str:
    """The first line of the exception's message, clipped and with credentials masked."""
    text = str(getattr(exc, "message", None) or exc)
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)
    for value in config.credential_values(min_length=8):
        first = first.replace(value, "***")
    for shape in _SECRET_SHAPES:
        first = shape.sub(lambda m: (m.group(1) if m.groups() else "") + "***", first)
    return first if len(first) <= _DETAIL_CLIP else first[: _DETAIL_CLIP - 1] + "…"
