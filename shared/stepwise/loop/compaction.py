"""What the model re-reads before every call, kept under its context window.

The stored session keeps every message; `fit` works on a copy, so compaction only changes what is sent.
Cheapest first:

1. placeholders: old tool results, oldest first, keep their small fields (ids, titles, status) and lose
   their bulk, with a note that the tool can be called again. The model's answers from those turns stay,
   so what it concluded at the time is not lost.
2. summary: when that is not enough and a summarizer is given, the older conversation becomes one message.

A compaction aims at COMPACT_TO of the window, below THRESHOLD where it starts, and the run keeps it
(`Compaction.kept`, in its context): the later calls apply it again unchanged (`reapply`) until the
conversation passes THRESHOLD again, so they repeat the previous request's bytes and a provider's
cache keeps serving them; only the call that compacts starts a new prefix.

Neither touches the current turn (from the last user message on): within a turn the model is still working
on its results, and taking them away makes it answer from memory. The last `KEEP_TURNS` user turns stay
whole, and the leading system message is never changed.

Token counts are offline estimates. litellm is imported on first use (only the model step pays for it), and
a model whose tokenizer litellm would download from the Hugging Face Hub (llama, cohere) is counted with the
tiktoken encodings bundled in litellm's wheel instead: a download costs seconds on a cold start, and without
egress it retries for about 20 seconds before giving up.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from stepwise.core import config, safejson
from stepwise.llm import client as llm_client
from stepwise.llm.models import TOOL_IMAGES_PREFIX
from stepwise.runs.state import Compacted

Message = dict[str, Any]

DEFAULT_WINDOW = 128_000
WINDOW_ENV = config.Compaction.variable("context_window")
THRESHOLD = 0.75
# A compaction aims lower than where it starts, and the calls after it send the same compacted prefix
# until the conversation passes THRESHOLD again: a provider caches a prefix only while it stays the
# same bytes, so shortening one more old result on every call would cost every call its cache.
COMPACT_TO = 0.5
# After a provider rejected the conversation as too long, aim for half of what it saw.
FORCED_THRESHOLD = 0.5
KEEP_TURNS = 3

SUMMARY_PREFIX = "Summary of the earlier conversation:\n"
PLACEHOLDER_NOTE = "Shortened to save context; call the tool again if you need the full result."
# A described table's whole is stored: reading it again costs no new call of the tool that made it.
DESCRIBED_PLACEHOLDER_NOTE = (
    "Shortened to save context; call result_read with this tool_call_id to read its rows."
)
PREVIEW_CHARS = 200  # of a text tool result, in its placeholder
SHORT_VALUE_CHARS = 80  # a string field this short is kept whatever its name
NAMED_VALUE_CHARS = 200  # an identifier-like field is kept, clipped to this
MAX_KEPT_FIELDS = 20
MAX_DEPTH = 2  # nested objects whose small fields are kept, as dotted paths ("error.code")
RENDER_CHARS = 4_000  # of one message, in the text a summarizer reads

# Field names worth keeping in a placeholder: what the model needs to refer back to a result.
_NAMED = re.compile(
    r"(?:^|_)(?:id|ids|uuid|key|name|title|status|state|url|uri|href|link|path|type|kind|code|error|"
    r"message|reason|count|total)$",
    re.IGNORECASE,
)
# Hugging Face tokenizers that ship inside litellm's wheel; the others are downloaded from the Hub.
_BUNDLED_TOKENIZERS = frozenset({"anthropic", "deepseek"})


@dataclass(frozen=True)
class Compaction:
    """What a `compaction` event records (all but `kept`). `tokens_after` above `window` means the
    call will likely fail."""

    tokens_before: int
    tokens_after: int
    shortened_tool_results: int  # how many tool results became placeholders
    summarized_messages: int  # how many messages the summary replaced
    stage: Literal["placeholders", "summary"]
    window: int
    kept: Compacted | None = None  # what the next calls apply again (`fit(kept=...)`)

    @property
    def over_window(self) -> bool:
        return self.tokens_after > self.window

    def event(self) -> dict[str, Any]:
        """The `compaction` event's fields (the summary text stays out of the event log)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "kept"}


def count_tokens(model: str, messages: list[Message], tools: list[dict[str, Any]] | None = None) -> int:
    """Estimate of the input tokens `messages` and the `tools` declarations cost `model`, counted offline."""
    litellm = _litellm()
    # With an `openai_tokenizer` given, litellm still picks the encoding by model name, and only ever picks
    # cl100k_base or o200k_base, both bundled; what it skips is the Hub download.
    tokenizer = None
    if not _tokenizer_is_bundled(model):
        tokenizer = {"type": "openai_tokenizer", "tokenizer": litellm.encoding}
    counted = litellm.token_counter(
        model=model, messages=messages, tools=tools or None, custom_tokenizer=tokenizer
    )
    return int(counted)


def context_window(model: str) -> int:
    """`STEPWISE_CONTEXT_WINDOW` when set, else the model's input limit from litellm's bundled model map,
    else DEFAULT_WINDOW (also for the scripted model)."""
    configured = config.compaction().context_window  # a ConfigError, naming the variable, when invalid
    if configured is not None:
        return configured
    if llm_client.is_scripted(model):
        return DEFAULT_WINDOW
    litellm = _litellm()
    try:
        info = litellm.get_model_info(model)
    except Exception:  # noqa: BLE001 — litellm raises a bare Exception for a model missing from its map
        return DEFAULT_WINDOW
    limit = info.get("max_input_tokens")
    return limit if isinstance(limit, int) and limit > 0 else DEFAULT_WINDOW


def fit(
    messages: list[Message],
    *,
    model: str,
    tools: list[dict[str, Any]] | None,
    window: int | None = None,
    threshold: float = THRESHOLD,
    summarize: Callable[[list[Message]], str] | None = None,
    force: bool = False,
    tokens: int | None = None,
    kept: Compacted | None = None,
) -> tuple[list[Message], Compaction | None]:
    """The messages to send `model`: `kept` (the run's last compaction) applied again as it was, and
    compacted anew when that takes more than `threshold` of its window.

    Without a new compaction, `messages` itself comes back (a copy with `kept` applied, when given)
    with None. Otherwise a copy compacted from the whole of `messages`, down to COMPACT_TO of the
    window, comes back with what was done and the `kept` the next calls pass, even when it still does
    not fit the window (the caller decides whether to call anyway). `summarize` gets the older
    messages (placeholders already in) and returns their summary; what it raises propagates. `force`
    (after a provider rejected the conversation as too long) compacts whatever the estimate says, down
    to half the window, or half the estimate when the estimate was under the window: the provider just
    showed that the estimate is short. `tokens`, when the caller knows it (the provider's last prompt
    size plus what was added since), is the size of what would be sent with `kept`, and spares
    counting the whole history.
    """
    window = window or context_window(model)
    sent = reapply(messages, kept)
    before = tokens if tokens is not None else count_tokens(model, sent, tools)
    if not force and before <= threshold * window:
        return sent, None
    target = FORCED_THRESHOLD * min(window, before) if force else min(threshold, COMPACT_TO) * window

    work = copy.deepcopy(messages)
    whole = before if sent is messages else count_tokens(model, messages, tools)
    head = _leading_system(work)
    protected = _protected_start(work, head)
    tokens, shortened, through = _shorten_tool_results(
        work, head, protected, model, tokens=whole, target=target
    )
    stage: Literal["placeholders", "summary"] = "placeholders"
    summarized, summary = 0, None
    if tokens > target and summarize is not None and protected > head:
        older = work[head:protected]
        summary = summarize(copy.deepcopy(older)).strip()
        work = [*work[:head], _summary_message(summary), *work[protected:]]
        stage, summarized, through = "summary", len(older), protected
    after = count_tokens(model, work, tools)
    again = Compacted(through=through, summary=summary)
    return work, Compaction(before, after, shortened, summarized, stage, window, kept=again)


def reapply(messages: list[Message], kept: Compacted | None) -> list[Message]:
    """`messages` compacted exactly as `kept` says, the same bytes as when that compaction was made
    (placeholders are a pure function of the result), or `messages` itself without one. A `kept`
    past the end (another conversation) is ignored."""
    if kept is None or kept.through > len(messages):
        return messages
    head = _leading_system(messages)
    if kept.summary is not None:
        return [*messages[:head], _summary_message(kept.summary), *messages[kept.through :]]
    work = list(messages)
    for index in range(head, kept.through):
        if work[index].get("role") == "tool":
            short = placeholder(work[index].get("content"))
            if short is not None:
                work[index] = {**work[index], "content": short}
    return work


def _summary_message(summary: str) -> Message:
    return {"role": "user", "content": SUMMARY_PREFIX + summary}


def placeholder(content: Any) -> str | None:
    """What an old tool result becomes: its small fields and a note, or None when that would not be
    shorter (or it is a placeholder already)."""
    text = _text(content)
    try:
        parsed = safejson.loads(text)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and parsed.get("compacted") is True:
        return None
    short: dict[str, Any] = {"compacted": True}
    if isinstance(parsed, dict):
        kept, dropped = _small_fields(parsed)
        short["kept"] = kept
        if dropped:
            short["dropped"] = dict(list(dropped.items())[:MAX_KEPT_FIELDS])
    elif isinstance(parsed, list):
        first = _small_fields(parsed[0])[0] if parsed and isinstance(parsed[0], dict) else None
        short["kept"] = {"items": len(parsed), **({"first": first} if first else {})}
    else:
        short["preview"] = _clip(text, PREVIEW_CHARS)
    short["original_chars"] = len(text)
    described = isinstance(parsed, dict) and parsed.get("described") is True
    short["note"] = DESCRIBED_PLACEHOLDER_NOTE if described else PLACEHOLDER_NOTE
    rendered = json.dumps(short, ensure_ascii=False)
    return rendered if len(rendered) < len(text) else None


def summary_prompt(messages: list[Message]) -> list[Message]:
    """The request for a (light) summarizer model: `complete(model=light, messages=summary_prompt(older))`."""
    return [
        {"role": "system", "content": SUMMARY_INSTRUCTIONS},
        {"role": "user", "content": "The conversation to summarize:\n\n" + render(messages)},
    ]


SUMMARY_INSTRUCTIONS = """\
You condense the earlier part of a conversation between a user and an AI agent that calls tools, so that \
the agent can carry on without it. Write a concise summary that keeps:
- what the user asked for, with their preferences and constraints;
- the facts established and the decisions made, with their reasons;
- the key data from tool results exactly as written: ids, names, numbers, dates, URLs, statuses;
- the open questions and the unfinished work.
Leave out pleasantries and whatever a later message superseded. Never invent anything. Answer with the \
summary alone, in plain text."""


def render(messages: list[Message]) -> str:
    """The conversation as plain text, one block per message, each clipped to RENDER_CHARS."""
    tool_names: dict[str, str] = {}
    blocks: list[str] = []
    for message in messages:
        role = message.get("role")
        text = _clip(_text(message.get("content")), RENDER_CHARS)
        if role == "tool":
            name = tool_names.get(str(message.get("tool_call_id")), "tool")
            blocks.append(f"[{name} result] {text}")
            continue
        if text:
            blocks.append(f"[{role}] {text}")
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            tool_names[str(call.get("id"))] = str(function.get("name"))
            arguments = _clip(str(function.get("arguments") or ""), RENDER_CHARS)
            blocks.append(f"[{role} called {function.get('name')}] {arguments}")
    return "\n\n".join(blocks)


def _shorten_tool_results(
    work: list[Message], start: int, end: int, model: str, *, tokens: int, target: float
) -> tuple[int, int, int]:
    """Replace tool results in work[start:end] by placeholders, oldest first, until `tokens` reaches `target`.
    The count is kept by difference (litellm counts a sum over messages plus a constant): one message is
    recounted per replacement, not the whole conversation. Returns the tokens, how many results were
    shortened, and where the shortening stopped (every result before it that a placeholder shortens is
    one: `reapply` repeats it from that index alone)."""
    shortened = 0
    through = start
    for index in range(start, end):
        if tokens <= target:
            break
        through = index + 1
        message = work[index]
        if message.get("role") != "tool":
            continue
        short = placeholder(message.get("content"))
        if short is None:
            continue
        replacement = {**message, "content": short}
        tokens += count_tokens(model, [replacement]) - count_tokens(model, [message])
        work[index] = replacement
        shortened += 1
    return tokens, shortened, through


def _leading_system(messages: list[Message]) -> int:
    """Index of the first message after the leading system message(s)."""
    index = 0
    while index < len(messages) and messages[index].get("role") == "system":
        index += 1
    return index


def _protected_start(messages: list[Message], head: int) -> int:
    """Where the last KEEP_TURNS user turns begin (a turn is a user message and what follows up to the next
    one; the current turn is the last). An earlier summary is not a turn: compacting again folds it in."""
    starts = [
        index
        for index in range(head, len(messages))
        if messages[index].get("role") == "user" and not _is_summary(messages[index])
    ]
    if not starts:
        return head  # no user message: all of it is the current turn
    return starts[-KEEP_TURNS] if len(starts) >= KEEP_TURNS else starts[0]


def _is_summary(message: Message) -> bool:
    """A summary, or the message that carries tools' images: neither is a turn of the user's."""
    content = message.get("content")
    if isinstance(content, list) and content and isinstance(content[0], dict):
        return content[0].get("text") == TOOL_IMAGES_PREFIX
    return isinstance(content, str) and content.startswith(SUMMARY_PREFIX)


def _small_fields(obj: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The fields of a JSON object worth keeping (identifier-like names first, then short values), and the
    size of each top-level field dropped ("120 items"), so the model knows what a new call would bring."""
    named: dict[str, Any] = {}
    short: dict[str, Any] = {}

    def walk(node: dict[str, Any], prefix: str, depth: int) -> None:
        for key, value in node.items():
            path = f"{prefix}{key}"
            if isinstance(value, dict):
                if depth < MAX_DEPTH:
                    walk(value, f"{path}.", depth + 1)
            elif isinstance(value, str):
                if _NAMED.search(str(key)):
                    named[path] = _clip(value, NAMED_VALUE_CHARS)
                elif len(value) <= SHORT_VALUE_CHARS:
                    short[path] = value
            elif value is None or isinstance(value, bool | int | float):
                (named if _NAMED.search(str(key)) else short)[path] = value

    walk(obj, "", 1)
    kept = dict(list({**named, **short}.items())[:MAX_KEPT_FIELDS])
    kept_roots = {path.split(".", 1)[0] for path in kept}
    dropped = {key: _size(value) for key, value in obj.items() if key not in kept_roots}
    return kept, dropped


def _size(value: Any) -> str:
    if isinstance(value, list):
        return f"{len(value)} items"
    if isinstance(value, str):
        return f"{len(value)} chars"
    return "object" if isinstance(value, dict) else "value"


def _text(content: Any) -> str:
    """A message's content as text; the text parts of a multi-part content."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            part.get("text", "") if part.get("type") == "text" else f"[{part.get('type')}]"
            for part in content
            if isinstance(part, dict)
        ]
        return "\n".join(parts)
    return json.dumps(content, ensure_ascii=False)


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"…[{len(text) - limit} more characters]"


def _tokenizer_is_bundled(model: str) -> bool:
    """Whether litellm would count `model` with a tokenizer from its own wheel. tiktoken's encodings are
    (litellm points TIKTOKEN_CACHE_DIR at them); llama and cohere tokenizers come from the Hub."""
    if llm_client.is_scripted(model):
        return False
    try:
        from litellm.utils import huggingface_tokenizer_kind
    except ImportError:  # a litellm without it: never risk a download
        return False
    kind = huggingface_tokenizer_kind(model)
    return kind is None or kind in _BUNDLED_TOKENIZERS


def _litellm() -> Any:
    llm_client.warm()  # imports litellm once: local cost map, no feedback banner in the logs
    import litellm

    return litellm
