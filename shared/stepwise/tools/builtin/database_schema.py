"""database_schema: the tables the agent may query, their columns, types, keys and row estimates, in a
compact and deterministic form (`_schema`), so the model writes its SQL right the first time."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from stepwise.tools.base import ToolResult
from stepwise.tools.builtin import Settings, ToolScope, input_schema
from stepwise.tools.builtin._db_config import TableAccess

NAME = "database_schema"
DESCRIPTION = (
    "List the project database's tables you may query: for each table its approximate row count and one "
    "line per column (name, type, PK, NOT NULL, FK → table.column). For a large database it lists the "
    "tables only: call again with `table` for one table's columns. Read it before writing SQL."
)


class Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid")

    table: str | None = Field(
        None,
        min_length=1,
        max_length=300,
        description="One table (e.g. orders or public.orders): its columns.",
    )


INPUT_SCHEMA: dict[str, Any] = input_schema(Arguments)
READ_ONLY = True
EFFECT: Literal["none"] = "none"
KEY_FIELDS: list[str] = []


class Config(TableAccess):
    """The tables (`allowed_tables`) and schemas (`allowed_schemas`) to describe: give it database_query's."""


def run(arguments: Arguments, *, scope: ToolScope, settings: Settings, config: Config) -> ToolResult:
    from stepwise.tools.builtin._database import describe_schema  # SQLAlchemy loads with the first call

    return describe_schema(
        tool=NAME, tenant_id=scope.tenant_id, settings=settings, access=config, table=arguments.table
    )
