"""Agents as the API takes and the store keeps them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator

from stepwise.core.schema import Strict, Timestamp
from stepwise.llm.models import ScriptTurn
from stepwise.memory.models import MEMORY_TOP_K_LIMIT
from stepwise.tools.models import DeclaredTool, Tool
from stepwise.webhooks.models import WebhookConfig

DEFAULT_MAX_STEPS = 25
MAX_STEPS_LIMIT = 200


class Permissions(Strict):
    default: Literal["allow", "ask", "deny", "allow_reads"] = "allow"


class MemoryConfig(Strict):
    """Long-term memory per end user (stepwise.memory): with `enabled`, a run that names a `user_id`
    gets memory_save, memory_search and memory_delete, and with `auto_recall` the `top_k` memories most
    relevant to its message are given to the model inside the user turn."""

    enabled: bool = False
    auto_recall: bool = True
    top_k: int = Field(default=5, ge=1, le=MEMORY_TOP_K_LIMIT)
    # memory_save asks a person first when the run has read a tool's result: what it would save may be
    # text a web page or an email put there, recalled into every later conversation with the user.
    approve_saves_after_tools: bool = False


class Door(Strict):
    """Whether the agent answers through a protocol door (stepwise.protocols): A2A's card and JSON-RPC,
    or a tool of the tenant's MCP server. Off by default: a door opens only when asked to."""

    enabled: bool = False


class AgentFields(Strict):
    model: str | None = Field(default=None, min_length=1, max_length=256)
    system_prompt: str | None = Field(default=None, max_length=100_000)
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_steps: int | None = Field(default=None, ge=1, le=MAX_STEPS_LIMIT)
    max_tokens_budget: int | None = Field(default=None, ge=1)
    permissions: Permissions = Field(default_factory=Permissions)
    script: list[ScriptTurn] | None = None
    webhook: WebhookConfig | None = None  # for the agent's runs that name none themselves
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    a2a: Door = Field(default_factory=Door)
    mcp: Door = Field(default_factory=Door)
    # The kill switch for one agent: new runs are refused (409 `agent_paused`), its runs in flight go on.
    paused: bool = False


class AgentCreate(AgentFields):
    name: str = Field(min_length=1, max_length=128)
    tools: list[Tool] = Field(default_factory=list)

    @field_validator("tools")
    @classmethod
    def _unique_names(cls, tools: list[Tool]) -> list[Tool]:
        names = [t.name for t in tools]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"tool names must be unique: {', '.join(duplicates)}")
        return tools


class AgentPatch(Strict):
    """Fields to change; `null` clears an optional field, an absent field is left alone."""

    name: str | None = Field(default=None, min_length=1, max_length=128)
    model: str | None = Field(default=None, min_length=1, max_length=256)
    system_prompt: str | None = Field(default=None, max_length=100_000)
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_steps: int | None = Field(default=None, ge=1, le=MAX_STEPS_LIMIT)
    max_tokens_budget: int | None = Field(default=None, ge=1)
    permissions: Permissions | None = None
    script: list[ScriptTurn] | None = None
    webhook: WebhookConfig | None = None
    memory: MemoryConfig | None = None  # null turns memory off (what was remembered stays, unread)
    a2a: Door | None = None  # null closes the door
    mcp: Door | None = None
    paused: bool | None = None

    @field_validator("name")
    @classmethod
    def _name_not_null(cls, value: str | None) -> str:
        if value is None:
            raise ValueError("name cannot be cleared")
        return value

    @field_validator("paused")
    @classmethod
    def _paused_not_null(cls, value: bool | None) -> bool:
        if value is None:
            raise ValueError("paused is true or false")
        return value


class Agent(AgentCreate):
    model_config = ConfigDict(extra="ignore")

    agent_id: str
    created_at: Timestamp
    updated_at: Timestamp
    # Lifecycle hooks, kept in the agent's item so a run reads its agent and hooks in one read; managed
    # through /v1/agents/{id}/hooks and parsed by stepwise.hooks (which imports this module).
    hooks: list[dict[str, Any]] = Field(default_factory=list)
    # MCP servers with their cached tools, likewise in the agent's item; managed through
    # /v1/agents/{id}/mcp-servers and parsed by stepwise.mcp (which imports this module).
    mcp_servers: list[dict[str, Any]] = Field(default_factory=list)
    # Schedule and event deliveries skipped since the agent was last paused (stepwise.schedules.triggers):
    # a delivery to a paused agent starts nothing and is counted here instead.
    skipped_while_paused: int = 0

    def tool(self, name: str) -> DeclaredTool | None:
        return next((t for t in self.tools if t.name == name), None)
