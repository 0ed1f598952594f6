"""Builtin tools. Each module is one tool and exports the same shape:

    NAME: str                       the tool's name, as agents list it and the model calls it
    DESCRIPTION: str                what the model reads
    Arguments: type[pydantic.BaseModel]  the model's arguments: fields with their descriptions and
                                    constraints, extra="forbid"
    INPUT_SCHEMA: dict              input_schema(Arguments): the JSON Schema the model is sent
    READ_ONLY: bool                 parallel-safe, and allowed under `allow_reads`
    EFFECT: "none" | "idempotent" | "undeclared"
    KEY_FIELDS: list[str]           for idempotent tools: the arguments naming the target
    Config: type[pydantic.BaseModel]  the per-agent `config` of the tool (may have no fields)
    def run(arguments: Arguments, *, scope: ToolScope, settings: Settings, config: Config) -> ToolResult

and optionally:

    PRIVATE_KEY_FIELDS: list[str]   key fields the ledger keys on but records only as a digest
    TRUNCATE: bool                  False: the result reaches the model whole (default True)
    Arguments.prepare(arguments: dict) -> dict   (a classmethod) what the model sent, made to fit the
                                    schema where the tool forgives a spelling (http_request's method
                                    in lower case)

The registry checks the model's arguments against INPUT_SCHEMA once, before `run` (a failure is
`invalid_arguments`, with the schema's own message), and hands `run` the validated `Arguments`.
`run` never raises for anything the model, the tenant's configuration or a provider can cause: a
missing setting, a provider's 5xx or 429, a timeout are error results the model can read. The model
supplies only the tool's own arguments; tenant, agent, run and session arrive in `scope`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pydantic import BaseModel


@dataclass(frozen=True)
class ToolScope:
    """Injected by the registry, never by the model: no tool can reach another tenant's data."""

    tenant_id: str
    agent_id: str
    run_id: str
    session_id: str
    user_id: str | None = None  # the run's end user: what the memory tools are scoped to
    model: str | None = None  # the agent's model: web_scrape fetches images only for one that can use them
    # Whether the run has read a tool's result before this call (its text may be anyone's): memory_save
    # marks what it saves then, since a memory is recalled into later conversations.
    read_tool_results: bool = False


class Settings(Protocol):
    """The tenant's settings (secrets such as EXA_API_KEY), read through one cached accessor."""

    def get(self, key: str) -> str | None: ...


class StaticSettings:
    """Settings from a dict: for tests and the local stack."""

    def __init__(self, values: dict[str, str] | None = None) -> None:
        self._values = dict(values or {})

    def get(self, key: str) -> str | None:
        return self._values.get(key)


def input_schema(arguments: type[BaseModel]) -> dict[str, Any]:
    """The JSON Schema the model is sent for a builtin's `Arguments`: pydantic's, less what only the code
    reads (titles, the class docstring), with an optional argument (default None) shown as its type
    alone, since the model may leave it out but not send null, and without `additionalProperties: true`,
    which is the default. The declarations are part of the cached prompt prefix: this must not change
    what an existing builtin's schema says."""
    schema = arguments.model_json_schema()
    if "$defs" in schema:
        raise TypeError(f"{arguments.__qualname__}: a builtin's arguments are flat (no nested models)")
    shown = _shown(schema)
    shown.pop("description", None)
    return shown


_NULL = {"type": "null"}


def _shown(node: dict[str, Any]) -> dict[str, Any]:
    node = {
        key: value
        for key, value in node.items()
        if key != "title" and not (key == "additionalProperties" and value is True)
    }
    if _NULL in node.get("anyOf", ()) and "default" in node and node["default"] is None:
        members = [member for member in node.pop("anyOf") if member != _NULL]
        del node["default"]
        node = {**members[0], **node} if len(members) == 1 else {"anyOf": members, **node}
    if "properties" in node:
        node["properties"] = {name: _shown(field) for name, field in node["properties"].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            node[key] = _shown(node[key])
    if "anyOf" in node:
        node["anyOf"] = [_shown(member) for member in node["anyOf"]]
    return node
