"""Builtin tools. Each module is one tool and exports the same shape:

    NAME: str                       the tool's name, as agents list it and the model calls it
    DESCRIPTION: str                what the model reads
    INPUT_SCHEMA: dict              JSON Schema of the model's arguments (an object)
    READ_ONLY: bool                 parallel-safe, and allowed under `allow_reads`
    EFFECT: "none" | "idempotent" | "undeclared"
    KEY_FIELDS: list[str]           for idempotent tools: the arguments naming the target
    Config: type[pydantic.BaseModel]  the per-agent `config` of the tool (may have no fields)
    def run(arguments: dict, *, scope: ToolScope, settings: Settings, config: Config) -> ToolResult

`run` never raises for anything the model, the tenant's configuration or a provider can cause: a
missing setting, a provider's 5xx or 429, a timeout are error results the model can read. The model
supplies only the tool's own arguments; tenant, agent, run and session arrive in `scope`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class ToolScope:
    """Injected by the registry, never by the model: no tool can reach another tenant's data."""

    tenant_id: str
    agent_id: str
    run_id: str
    session_id: str
    user_id: str | None = None  # the run's end user: what the memory tools are scoped to


class Settings(Protocol):
    """The tenant's settings (secrets such as EXA_API_KEY), read through one cached accessor."""

    def get(self, key: str) -> str | None: ...


class StaticSettings:
    """Settings from a dict: for tests and the local stack."""

    def __init__(self, values: dict[str, str] | None = None) -> None:
        self._values = dict(values or {})

    def get(self, key: str) -> str | None:
        return self._values.get(key)
