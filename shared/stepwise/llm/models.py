"""What the model layer speaks: the turns of the built-in `scripted` model's scripts, and what model
calls spent."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, model_validator

from stepwise.core.schema import Strict
from stepwise.tools.models import TOOL_NAME

# The user message that carries images tools returned, right after their results: providers take images
# in user turns only (OpenAI refuses them in tool messages). It is not a new turn of the user's, and
# what counts turns (the scripted model, compaction) recognises it by this opening.
TOOL_IMAGES_PREFIX = "[Images returned by the tool calls above]"


class ScriptedToolCall(Strict):
    name: str = Field(pattern=TOOL_NAME)
    arguments: dict[str, Any] = Field(default_factory=dict)


class ScriptTurn(Strict):
    """One model step of a script: either text or tool calls."""

    text: str | None = None
    tool_calls: list[ScriptedToolCall] | None = None

    @model_validator(mode="after")
    def _one_of(self) -> ScriptTurn:
        if (self.text is None) == (self.tool_calls is None):
            raise ValueError("a script turn has exactly one of 'text' or 'tool_calls'")
        return self


class Usage(BaseModel):
    """What model calls spent. `input_tokens` is the whole prompt, of which `cached_tokens` were read
    from the provider's cache and `cache_write_tokens` written to it; `cost_usd` is priced from
    litellm's cost map (cache reads and writes at their own prices) and null as soon as any call was
    of a model without a known price: a total is never a guess."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float | None = 0.0

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        cost = None if self.cost_usd is None or other.cost_usd is None else self.cost_usd + other.cost_usd
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            cost_usd=cost,
        )
