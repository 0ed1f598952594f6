"""database_write: one INSERT, UPDATE or DELETE against the tenant's database (DATABASE_URL), allowlisted
tables only; UPDATE and DELETE need a WHERE, and a statement that changes more than `max_rows_affected`
rows (config, default 100) is rolled back. How the statement is checked: `_sql`; how it runs: `_database`.

Its effect is `undeclared`: the ledger runs each call at most once, and nothing in the model's SQL is a
stable target to deduplicate on across runs."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from stepwise.tools.base import ToolResult
from stepwise.tools.builtin import Settings, ToolScope, input_schema
from stepwise.tools.builtin._db_config import QueryArguments, TableAccess

NAME = "database_write"
DESCRIPTION = (
    "Run one SQL INSERT, UPDATE or DELETE against the project database (SQLite, PostgreSQL or MySQL "
    "syntax, as the database is) and get {rows_affected} (plus the rows of a RETURNING clause). Only "
    "the tables this agent was granted may be touched, including in subqueries. UPDATE and DELETE need "
    "a WHERE clause on the rows' columns. One statement per call, committed when it succeeds; a "
    "statement that would change more rows than this agent may change at once is rolled back "
    "(too_many_rows)."
)
Arguments = QueryArguments
INPUT_SCHEMA: dict[str, Any] = input_schema(Arguments)
READ_ONLY = False
EFFECT: Literal["undeclared"] = "undeclared"
KEY_FIELDS: list[str] = []


MAX_ROWS_AFFECTED = 100
MAX_ROWS_AFFECTED_LIMIT = 10_000  # a bigger change is a migration, not a tool call


class Config(TableAccess):
    """The tables (`allowed_tables`, e.g. "orders" or "public.orders") and whole schemas
    (`allowed_schemas`) the agent may write, and read from in the same statement, and how many rows
    one statement may change (`max_rows_affected`): past it the statement is rolled back."""

    max_rows_affected: int = Field(default=MAX_ROWS_AFFECTED, ge=1, le=MAX_ROWS_AFFECTED_LIMIT)


def run(arguments: Arguments, *, scope: ToolScope, settings: Settings, config: Config) -> ToolResult:
    from stepwise.tools.builtin._database import execute  # SQLAlchemy and sqlglot load with the first call
    from stepwise.tools.builtin._sql import check_write

    return execute(
        arguments.query,
        tool=NAME,
        tenant_id=scope.tenant_id,
        settings=settings,
        access=config,
        check=check_write,
        read_only=False,
        max_rows_affected=config.max_rows_affected,
    )
