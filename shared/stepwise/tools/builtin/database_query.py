"""database_query: one read-only SELECT against the tenant's database (DATABASE_URL), allowlisted tables
only. How the statement is checked: `_sql`; how it runs and what it answers: `_database`."""

from __future__ import annotations

from typing import Any, Literal

from stepwise.tools.base import ToolResult
from stepwise.tools.builtin import Settings, ToolScope, input_schema
from stepwise.tools.builtin._db_config import QueryArguments, TableAccess

NAME = "database_query"
DESCRIPTION = (
    "Run one read-only SQL SELECT against the project database (SQLite, PostgreSQL or MySQL syntax, as "
    "the database is) and get {columns, rows, row_count, truncated}. Only the tables this agent was "
    "granted may be read, including in joins, subqueries and CTEs. One statement, no writes, no DDL or "
    "PRAGMA. Rows beyond about 50,000 characters of JSON are cut (truncated: true): select the columns "
    "you need and use WHERE, LIMIT and aggregates."
)
Arguments = QueryArguments
INPUT_SCHEMA: dict[str, Any] = input_schema(Arguments)
READ_ONLY = True
EFFECT: Literal["none"] = "none"
KEY_FIELDS: list[str] = []


class Config(TableAccess):
    """The tables (`allowed_tables`, e.g. "orders" or "public.orders") and whole schemas
    (`allowed_schemas`) the agent may read."""


def run(arguments: Arguments, *, scope: ToolScope, settings: Settings, config: Config) -> ToolResult:
    from stepwise.tools.builtin._database import execute  # SQLAlchemy and sqlglot load with the first call
    from stepwise.tools.builtin._sql import check_query

    return execute(
        arguments.query,
        tool=NAME,
        tenant_id=scope.tenant_id,
        settings=settings,
        access=config,
        check=check_query,
        read_only=True,
    )
