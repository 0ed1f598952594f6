"""The database tools as the live-server tests call them (PostgreSQL, MariaDB): through their public
`run` as the registry calls it (`run_builtin`), or past the SQL checks (`unchecked_query`) to show what
a check stops is real."""

from __future__ import annotations

from stepwise.tools.base import ToolResult
from stepwise.tools.builtin import StaticSettings, ToolScope, _database, database_query, database_write
from stepwise.tools.registry import run_builtin

SCOPE = ToolScope(tenant_id="t1", agent_id="a1", run_id="r1", session_id="s1")


def error_of(result: ToolResult) -> tuple[str, str]:
    assert result.error is not None, f"expected an error, got {result.output!r}"
    return result.error.code, result.error.message


def query(url: str, sql: str, tables: tuple[str, ...] = ("orders", "customers")) -> ToolResult:
    config = database_query.Config(allowed_tables=list(tables))
    return run_builtin(
        database_query.NAME,
        {"query": sql},
        scope=SCOPE,
        settings=StaticSettings({"DATABASE_URL": url}),
        config=config,
    )


def write(url: str, sql: str, max_rows: int = 100) -> ToolResult:
    config = database_write.Config(allowed_tables=["orders", "customers"], max_rows_affected=max_rows)
    return run_builtin(
        database_write.NAME,
        {"query": sql},
        scope=SCOPE,
        settings=StaticSettings({"DATABASE_URL": url}),
        config=config,
    )


def unchecked_query(url: str, sql: str) -> ToolResult:
    return _database.execute(
        sql,
        tool="database_query",
        tenant_id="t1",
        settings=StaticSettings({"DATABASE_URL": url}),
        access=database_query.Config(),
        check=lambda text, allowlist: text,
        read_only=True,
    )
