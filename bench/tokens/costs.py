"""Tokens, reusable prefix and dollars of each recorded request.

Counts are litellm's offline token counter (stepwise.loop.compaction.count_tokens: tiktoken for OpenAI models,
the tokenizer bundled in litellm's wheel for Claude). The prefix a request shares with the previous one
is found on a rendering of the request in the order providers read it (tools, system prompt, messages),
and its length in tokens is counted the same way. Prices are litellm's cost map (bundled, offline).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from functools import cache
from typing import Any

from bench.tokens.replay import Request
from stepwise.loop.compaction import count_tokens

OPENAI_MODEL = "gpt-4.1"
ANTHROPIC_MODEL = "claude-sonnet-4-5"
OPENAI_MIN_PREFIX = 1_024  # OpenAI caches a prefix of at least this many tokens…
OPENAI_BLOCK = 128  # …in blocks of this many
ANTHROPIC_MIN_PREFIX = 1_024  # Claude Sonnet's minimum cacheable prompt


@dataclass
class CallFigures:
    run: int
    step: int
    input_tokens: int  # for the OpenAI model
    anthropic_input_tokens: int
    output_tokens: int
    prefix_tokens: int  # shared with the previous request, OpenAI tokenizer
    openai_cached_tokens: int  # of those, what OpenAI's rules can serve from cache
    prefix_percent: float  # openai_cached_tokens over the request
    previous_reused_percent: float | None  # openai_cached_tokens over the previous request
    # How much of the previous request this one repeats byte for byte from its start, both measured on
    # the rendering: what a cache mark at the previous request's end (Anthropic, Bedrock) reads again,
    # before any provider's block rounding.
    previous_prefix_percent: float | None
    anthropic_read_tokens: int
    anthropic_write_tokens: int
    openai_uncached: float
    openai_cached: float
    anthropic_uncached: float
    anthropic_cached: float
    compacted: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def measure(requests: list[Request], *, naive: bool) -> list[CallFigures]:
    out: list[CallFigures] = []
    previous: str | None = None
    previous_anthropic = previous_tokens = previous_rendered = 0
    for request in requests:
        rendered = render(request.tools, request.messages)
        head = render(request.tools, request.messages[:1])  # tools and system prompt: the first marks
        tokens = count_tokens(OPENAI_MODEL, request.messages, request.tools or None)
        claude = count_tokens(ANTHROPIC_MODEL, request.messages, request.tools or None)
        output = _text_tokens(OPENAI_MODEL, json.dumps(request.reply, sort_keys=True))
        shared = _common(previous, rendered)
        # The rendering's token count differs from the counter's (which lays tools out its own way):
        # the prefix is found and measured on the rendering, then applied as a share of the request.
        whole = max(1, _text_tokens(OPENAI_MODEL, rendered))
        shared_tokens = _text_tokens(OPENAI_MODEL, rendered[:shared]) if shared else 0
        share = shared_tokens / whole
        # No call can reuse more of the previous request than there was of it; the share is measured
        # on the rendering and the totals by the counter, whose layouts differ by a few tokens.
        prefix = min(int(share * tokens), previous_tokens)  # 0 on a run's first call: nothing before it
        cached = (prefix // OPENAI_BLOCK) * OPENAI_BLOCK if prefix >= OPENAI_MIN_PREFIX else 0
        read, write = 0, 0
        if not naive and claude >= ANTHROPIC_MIN_PREFIX:  # naive sends no marks: Anthropic caches nothing
            if previous is not None and shared == len(previous):
                read = previous_anthropic  # the last mark of the previous call: all of it
            elif shared >= len(head):
                read = int(_text_tokens(OPENAI_MODEL, head) / whole * claude)
            read = min(read, claude) if read >= ANTHROPIC_MIN_PREFIX else 0
            write = claude - read
        out.append(
            CallFigures(
                run=request.run,
                step=request.step,
                input_tokens=tokens,
                anthropic_input_tokens=claude,
                output_tokens=output,
                prefix_tokens=prefix,
                openai_cached_tokens=cached,
                prefix_percent=round(100 * cached / tokens, 1),
                previous_reused_percent=round(100 * cached / previous_tokens, 1) if previous_tokens else None,
                previous_prefix_percent=(
                    round(100 * min(shared_tokens, previous_rendered) / previous_rendered, 1)
                    if previous_rendered
                    else None
                ),
                anthropic_read_tokens=read,
                anthropic_write_tokens=write,
                openai_uncached=_price(OPENAI_MODEL, tokens, output),
                openai_cached=_price(OPENAI_MODEL, tokens, output, read=cached),
                anthropic_uncached=_price(ANTHROPIC_MODEL, claude, output),
                anthropic_cached=_price(ANTHROPIC_MODEL, claude, output, read=read, write=write),
                compacted=request.compacted,
            )
        )
        previous, previous_anthropic, previous_tokens = rendered, claude, tokens
        previous_rendered = whole
    return out


def render(tools: list[dict[str, Any]], messages: list[dict[str, Any]]) -> str:
    """The request as the provider lays it out: tool declarations, then the messages in order."""
    parts = [json.dumps(tools, ensure_ascii=False)] + [json.dumps(m, ensure_ascii=False) for m in messages]
    return "\n".join(parts)


def _common(previous: str | None, current: str) -> int:
    """Characters `current` shares with the start of `previous`."""
    if previous is None:
        return 0
    limit = min(len(previous), len(current))
    index = 0
    step = 4_096
    while index < limit and previous[index : index + step] == current[index : index + step]:
        index += step  # whole blocks first, then the block where they part
    while index < limit and previous[index] == current[index]:
        index += 1
    return min(index, limit)


def _text_tokens(model: str, text: str) -> int:
    from stepwise.loop.compaction import _litellm

    return int(_litellm().token_counter(model=model, text=text))


@cache
def _prices(model: str) -> dict[str, float]:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from stepwise.loop.compaction import _litellm

    entry = _litellm().model_cost[model]
    base = float(entry["input_cost_per_token"])
    return {
        "input": base,
        "output": float(entry["output_cost_per_token"]),
        "read": float(entry.get("cache_read_input_token_cost", base)),
        "write": float(entry.get("cache_creation_input_token_cost", base)),
    }


def _price(model: str, tokens: int, output: int, *, read: int = 0, write: int = 0) -> float:
    p = _prices(model)
    plain = max(0, tokens - read - write)
    return plain * p["input"] + read * p["read"] + write * p["write"] + output * p["output"]
