"""Settings as the API takes and returns them. A value is write-only: no model here carries one out."""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from stepwise.core.schema import Strict, Timestamp

# Environment-variable style (EXA_API_KEY, DATABASE_URL), or a model provider's key that a model call
# uses instead of the deployment's (`providers.openai.api_key`, stepwise.settings.providers). The one
# rule: the API's path parameter and `is_valid_key` both read it.
PROVIDER_KEY_PATTERN = r"providers\.[a-z][a-z0-9_]{0,31}\.api_key"
KEY_PATTERN = rf"^(?:[A-Z][A-Z0-9_]{{0,63}}|{PROVIDER_KEY_PATTERN})$"
MAX_VALUE_CHARS = 16_384  # room for a PEM key or a service-account JSON; at most 64 KB as UTF-8
# An agent's own setting is stored under this prefix, so its encryption context names the agent too.
AGENT_PREFIX = "agent#"

_KEY = re.compile(KEY_PATTERN)
_PROVIDER_KEY = re.compile(PROVIDER_KEY_PATTERN)


def is_valid_key(key: str) -> bool:
    return _KEY.fullmatch(key) is not None


def is_provider_key(key: str) -> bool:
    return _PROVIDER_KEY.fullmatch(key) is not None


def provider_key(provider: str) -> str:
    """The setting that holds `provider`'s API key (litellm's provider name)."""
    return f"providers.{provider}.api_key"


def stored_key(key: str, agent_id: str | None) -> str:
    """The item's key: the setting's own name, or under the agent's prefix for an agent's setting."""
    return f"{AGENT_PREFIX}{agent_id}#{key}" if agent_id else key


def parse_stored(stored: str) -> tuple[str, str | None]:
    """(the setting's name, its agent or None) from an item's key."""
    if stored.startswith(AGENT_PREFIX):
        agent_id, _, key = stored.removeprefix(AGENT_PREFIX).partition("#")
        return key, agent_id
    return stored, None


class SettingPut(Strict):
    value: str = Field(min_length=1, max_length=MAX_VALUE_CHARS)


class SettingInfo(BaseModel):
    """A setting's name and when it last changed; never its value. `agent_id` names the agent whose own
    setting it is (only a provider's key may be an agent's), else it is the tenant's."""

    key: str
    updated_at: Timestamp
    agent_id: str | None = None


class SettingList(BaseModel):
    settings: list[SettingInfo]
