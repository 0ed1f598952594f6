"""Tools as an agent declares them: HTTP, client, code and builtin tools (MCP tools are discovered from
the agent's MCP servers, see stepwise.mcp)."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, field_validator, model_validator

from stepwise.core.schema import Strict

TOOL_NAME = r"^[a-zA-Z0-9_-]{1,64}$"  # what every major model provider accepts as a function name
CODE_SOURCE_LIMIT = 64_000  # characters of a code tool's source

Permission = Literal["allow", "ask", "deny", "inherit"]
Effect = Literal["none", "idempotent", "undeclared"]


def valid_input_schema(value: dict[str, Any]) -> dict[str, Any]:
    """A tool's input schema must be a valid JSON Schema for an object."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(value)
    except SchemaError as exc:
        raise ValueError(f"input_schema is not a valid JSON Schema: {exc.message}") from exc
    if value.get("type", "object") != "object":
        raise ValueError("input_schema must describe an object (type: object)")
    return value


class ToolBase(Strict):
    name: str = Field(pattern=TOOL_NAME)
    permission: Permission = "inherit"


class HttpTool(ToolBase):
    """A custom HTTP tool: the model's arguments are POSTed as JSON to `endpoint`."""

    type: Literal["http"]
    description: str = Field(min_length=1, max_length=4096)
    input_schema: dict[str, Any]
    endpoint: str = Field(min_length=1, max_length=2048)
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "POST"
    headers: dict[str, str] = Field(default_factory=dict)
    read_only: bool = False
    effect: Effect = "undeclared"
    key_fields: list[str] = Field(default_factory=list)

    @field_validator("endpoint")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not re.match(r"^https?://", value, re.IGNORECASE):
            raise ValueError("endpoint must be an http:// or https:// URL")
        return value

    _schema = field_validator("input_schema")(lambda v: valid_input_schema(v))

    @model_validator(mode="after")
    def _key_fields_need_idempotent(self) -> HttpTool:
        if self.key_fields and self.effect != "idempotent":
            raise ValueError("key_fields only apply to tools with effect 'idempotent'")
        return self

    @property
    def parallel_safe(self) -> bool:
        return self.read_only


class ClientTool(ToolBase):
    """A tool the calling app runs itself: the run pauses until the app answers with its result."""

    type: Literal["client"]
    description: str = Field(min_length=1, max_length=4096)
    input_schema: dict[str, Any]
    read_only: bool = False

    _schema = field_validator("input_schema")(lambda v: valid_input_schema(v))

    @property
    def parallel_safe(self) -> bool:
        return self.read_only


class CodeTool(ToolBase):
    """The tenant's own function (`def run(args)` in Python, `export function run(args)` in JavaScript),
    stored with the agent and run in the tenant's code sandbox with the model's validated arguments; its
    JSON return value is the result. The source never runs inside a Stepwise function (not even to
    check it: Python is only parsed)."""

    type: Literal["code"]
    description: str = Field(min_length=1, max_length=4096)
    input_schema: dict[str, Any]
    language: Literal["python", "javascript"]
    # Tools live in the agent's item (400 KB with everything else), so one source stays well under it.
    source: str = Field(min_length=1, max_length=CODE_SOURCE_LIMIT)
    timeout_seconds: int = Field(default=30, ge=1, le=120)
    read_only: bool = False
    effect: Effect = "undeclared"
    key_fields: list[str] = Field(default_factory=list)

    _schema = field_validator("input_schema")(lambda v: valid_input_schema(v))

    @model_validator(mode="after")
    def _defines_run(self) -> CodeTool:
        if self.key_fields and self.effect != "idempotent":
            raise ValueError("key_fields only apply to tools with effect 'idempotent'")
        from stepwise.tools.code_source import entry_problem

        problem = entry_problem(self.language, self.source)
        if problem is not None:
            raise ValueError(problem)
        return self

    @property
    def parallel_safe(self) -> bool:
        return self.read_only


class BuiltinTool(ToolBase):
    """A builtin (`{name, config?, permission?}`): its description, schema and behaviour are Stepwise's;
    `config` is the tool's own per-agent settings, validated at creation."""

    type: Literal["builtin"] = "builtin"
    config: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _known_and_configured(self) -> BuiltinTool:
        from stepwise.tools.builtin.catalog import check_declarable, load

        check_declarable(self.name)  # an unknown name is a ValueError listing the builtins
        module = load(self.name)
        self.config = module.Config.model_validate(self.config).model_dump(mode="json")
        return self

    @property
    def read_only(self) -> bool:
        from stepwise.tools.builtin.catalog import load

        return bool(load(self.name).READ_ONLY)

    @property
    def effect(self) -> Effect:
        from stepwise.tools.builtin.catalog import load

        effect: Effect = load(self.name).EFFECT
        return effect

    @property
    def key_fields(self) -> list[str]:
        from stepwise.tools.builtin.catalog import load

        return list(getattr(load(self.name), "KEY_FIELDS", []))

    @property
    def private_key_fields(self) -> list[str]:
        from stepwise.tools.builtin.catalog import load

        return list(getattr(load(self.name), "PRIVATE_KEY_FIELDS", []))

    @property
    def parallel_safe(self) -> bool:
        return self.read_only


DELEGATION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"message": {"type": "string", "description": "What to ask the agent, in full."}},
    "required": ["message"],
}


class AgentTool(ToolBase):
    """Another agent of the tenant as a tool: a call starts a child run of `agent_id` in a fresh session
    and its answer is the result. With the default schema the model writes the child's `message`; a
    custom schema's arguments reach the child as JSON text."""

    type: Literal["agent"]
    description: str = Field(min_length=1, max_length=4096)
    agent_id: str = Field(pattern=r"^agt_[0-9A-HJKMNP-TV-Z]{26}$")
    input_schema: dict[str, Any] = Field(default_factory=lambda: dict(DELEGATION_SCHEMA))
    read_only: bool = False  # a read-only agent tool runs alongside the batch's other parallel-safe calls

    _schema = field_validator("input_schema")(lambda v: valid_input_schema(v))

    @property
    def parallel_safe(self) -> bool:
        return self.read_only

    def child_message(self, arguments: dict[str, Any]) -> str:
        if self.input_schema == DELEGATION_SCHEMA and isinstance(arguments.get("message"), str):
            return str(arguments["message"])
        return json.dumps(arguments, ensure_ascii=False, sort_keys=True)


WORKFLOW_INPUT: dict[str, Any] = {"type": "object"}


class WorkflowTool(ToolBase):
    """A workflow of the tenant as a tool (the reference tool type: `{type: "workflow", workflow_id,
    permission?}`): a call starts a workflow run, a child of the calling run, with the model's arguments
    as its input, and the workflow's output is the result. `name` defaults to the workflow id; the API
    fills `description` and `input_schema` from the workflow when they are not given."""

    type: Literal["workflow"]
    workflow_id: str = Field(pattern=r"^wfl_[0-9A-HJKMNP-TV-Z]{26}$")
    description: str = Field(default="", max_length=4096)
    input_schema: dict[str, Any] = Field(default_factory=lambda: dict(WORKFLOW_INPUT))
    version: int | None = Field(default=None, ge=1)  # none: the workflow's latest version at each call
    read_only: bool = False

    _schema = field_validator("input_schema")(lambda v: valid_input_schema(v))

    @model_validator(mode="before")
    @classmethod
    def _named(cls, value: Any) -> Any:
        if isinstance(value, dict) and not value.get("name") and isinstance(value.get("workflow_id"), str):
            return {**value, "name": value["workflow_id"]}
        return value

    @model_validator(mode="after")
    def _described(self) -> WorkflowTool:
        if not self.description:  # the model needs some words; the API gives the workflow's own
            self.description = self.default_description(self.workflow_id)
        return self

    @staticmethod
    def default_description(workflow_id: str) -> str:
        return f"Runs the workflow {workflow_id}; its output is the answer."

    @property
    def parallel_safe(self) -> bool:
        return self.read_only


def _tool_type(value: Any) -> str:
    """A tool body without `type` is a builtin, as the contract writes it: `{name, config?}`."""
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return str(kind or "builtin")


# The tools whose call is a child run the calling run waits on (stepwise.loop.gating.delegate).
DELEGATES = (AgentTool, WorkflowTool)

# The tools an agent declares itself (MCP tools are discovered from its MCP servers instead).
DeclaredTool = HttpTool | ClientTool | CodeTool | BuiltinTool | AgentTool | WorkflowTool

# MCP tools are not listed here: they are discovered from the agent's MCP servers.
Tool = Annotated[
    Annotated[HttpTool, Tag("http")]
    | Annotated[ClientTool, Tag("client")]
    | Annotated[CodeTool, Tag("code")]
    | Annotated[BuiltinTool, Tag("builtin")]
    | Annotated[AgentTool, Tag("agent")]
    | Annotated[WorkflowTool, Tag("workflow")],
    Discriminator(_tool_type),
]
