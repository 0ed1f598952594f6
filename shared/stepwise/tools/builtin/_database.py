"""Running the model's SQL against the tenant's database: what database_query and database_write share.

The database is the tenant's `DATABASE_URL` setting, a SQLAlchemy URL. SQLite (`sqlite:///path/app.db`)
is the embedded default for local work; PostgreSQL is the other supported flavor. In AWS, Aurora
PostgreSQL is reached through the RDS Data API with a Data API dialect for SQLAlchemy (for example the
`sqlalchemy-aurora-data-api` package): `postgresql+auroradataapi://:@/mydb?aurora_cluster_arn=...&
secret_arn=...`. That is still just a SQLAlchemy URL whose backend is `postgresql`, so it gets the
PostgreSQL checks and read-only transactions with nothing changed here, and the Lambda needs no VPC, no
connection pool and no password of its own (IAM authorizes the Data API call; the secret holds the
database credentials). Install the dialect in the function's layer to use it; without it such a URL is
reported as `not_configured`.

Every call:

1. checks the statement (`_sql`: one statement of the tool's kind, allowlisted tables only) and runs
   sqlglot's rendering of it, passed to the driver as is (no bind-parameter parsing of the model's text);
2. bounds it: a read runs in a read-only transaction (SQLite: `PRAGMA query_only = ON` on the connection,
   reset before the connection returns to the pool; PostgreSQL: `SET TRANSACTION READ ONLY`) that is
   rolled back; every statement is stopped after STATEMENT_TIMEOUT_SECONDS (PostgreSQL's
   `statement_timeout`; in SQLite a progress handler);
3. answers with `{columns, rows, row_count, truncated}`: rows are lists in column order (two columns may
   share a name), read until the JSON would pass the 50,000-character tool result limit.

Engines are cached per URL (`engine_for`), so a warm Lambda reuses its connections. Errors become
`database_error` with the driver's one-line message, scrubbed of the URL's password, user and host.
"""

from __future__ import annotations

import base64
import json
import math
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date, datetime, timedelta
from datetime import time as clock_time
from decimal import Decimal
from functools import lru_cache
from typing import Any, cast
from uuid import UUID

from sqlalchemy import create_engine
from sqlalchemy.engine import URL, Connection, CursorResult, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError

from stepwise.tools.base import TOOL_RESULT_LIMIT, ToolResult
from stepwise.tools.builtin import Settings
from stepwise.tools.builtin._db_config import QUERY_SCHEMA, TableAccess
from stepwise.tools.builtin._provider import invalid_arguments, not_configured, setting
from stepwise.tools.builtin._sql import FLAVORS, Allowlist, Flavor, Refused

DATABASE_URL_SETTING = "DATABASE_URL"
STATEMENT_TIMEOUT_SECONDS = 30
CELL_LIMIT = 10_000  # characters of one text value kept in a row
ERROR_LIMIT = 300  # characters of a driver's message quoted to the model
_FETCH_BATCH = 200
_SQLITE_PROGRESS_STEPS = 10_000  # virtual machine steps between two looks at the clock

Check = Callable[[str, Allowlist], str]


@lru_cache(maxsize=16)
def engine_for(url: str) -> Engine:
    """The engine (and its connection pool) for one DATABASE_URL, built on first use."""
    try:
        # pre-ping: a frozen-and-thawed Lambda finds its pooled connections dead more often than not.
        return create_engine(url, pool_pre_ping=True, hide_parameters=True)
    except (ArgumentError, ImportError):  # NoSuchModuleError is an ArgumentError
        driver = make_url(url).drivername
        raise Refused(
            "not_configured", f"DATABASE_URL names a database driver that is not installed: {driver}"
        ) from None


def flavor_of(url: URL) -> Flavor:
    backend = url.get_backend_name()
    flavor = FLAVORS.get(backend)
    if flavor is None:
        supported = ", ".join(sorted(FLAVORS))
        raise Refused("not_configured", f"DATABASE_URL: {backend} is not supported (supported: {supported})")
    return flavor


def execute(
    arguments: dict[str, Any],
    *,
    tool: str,
    settings: Settings,
    access: TableAccess,
    check: Check,
    read_only: bool,
) -> ToolResult:
    """Check the model's statement with `check`, run it, and answer with its rows (and, for a write,
    the rows it affected); never raises for anything the model, the settings or the database do."""
    failure = invalid_arguments(QUERY_SCHEMA, arguments)
    if failure is not None:
        return failure
    raw_url = setting(settings, DATABASE_URL_SETTING)
    if raw_url is None:
        return not_configured(tool, DATABASE_URL_SETTING)
    try:
        url = make_url(raw_url)
    except (ArgumentError, ValueError):
        return ToolResult.failure("not_configured", "DATABASE_URL is not a valid SQLAlchemy URL")
    try:
        flavor = flavor_of(url)
        sql = check(arguments["query"], Allowlist(access, flavor))
        engine = engine_for(raw_url)
    except Refused as refused:
        return ToolResult.failure(refused.code, refused.message)

    try:
        connection = engine.connect()
    except SQLAlchemyError as exc:
        return ToolResult.failure(
            "database_error", f"could not connect to the database: {_describe(exc, url)}"
        )
    try:
        with connection:
            with _bounded(connection, flavor, read_only=read_only):
                result = connection.exec_driver_sql(sql, execution_options={"no_parameters": True})
                output = _answer(result, write=not read_only)
            if not read_only:
                connection.commit()
    except SQLAlchemyError as exc:
        return ToolResult.failure("database_error", _describe(exc, url))
    return ToolResult(output=output)


@contextmanager
def _bounded(connection: Connection, flavor: Flavor, *, read_only: bool) -> Iterator[None]:
    """Read-only when asked, and stopped after STATEMENT_TIMEOUT_SECONDS."""
    if flavor.backend != "sqlite":
        if read_only:
            connection.exec_driver_sql("SET TRANSACTION READ ONLY")  # first statement of the transaction
        connection.exec_driver_sql(f"SET LOCAL statement_timeout = {int(STATEMENT_TIMEOUT_SECONDS * 1000)}")
        try:
            yield
        finally:
            if read_only:
                connection.rollback()
        return

    raw = cast(sqlite3.Connection, connection.connection.dbapi_connection)
    deadline = time.monotonic() + STATEMENT_TIMEOUT_SECONDS
    raw.set_progress_handler(lambda: int(time.monotonic() > deadline), _SQLITE_PROGRESS_STEPS)
    try:
        if read_only:
            connection.exec_driver_sql("PRAGMA query_only = ON")
        yield
    finally:
        raw.set_progress_handler(None, 0)
        if read_only:
            try:
                connection.rollback()
                connection.exec_driver_sql("PRAGMA query_only = OFF")  # the pool hands it to writes too
            except SQLAlchemyError:
                connection.invalidate()  # never back into the pool still read-only


def _answer(result: CursorResult[Any], *, write: bool) -> dict[str, Any]:
    if not result.returns_rows:
        return {"rows_affected": max(result.rowcount, 0)}
    columns = list(result.keys())
    envelope: dict[str, Any] = {"columns": columns, "row_count": 0, "rows": [], "truncated": False}
    if write:
        envelope["rows_affected"] = 0
    # Room for the rows, with slack for the counts' digits; rows are joined by ", " in the JSON.
    room = TOOL_RESULT_LIMIT - _json_size(envelope) - 32
    rows: list[list[Any]] = []
    seen = 0
    truncated = False
    while batch := result.fetchmany(_FETCH_BATCH):
        for row in batch:
            seen += 1
            if truncated:
                continue  # a write's RETURNING rows are counted to the end
            cells = [_cell(value) for value in row]
            size = _json_size(cells) + 2
            if size > room:
                truncated = True
                if not write:
                    break
                continue
            rows.append(cells)
            room -= size
        if truncated and not write:
            break
    answer = {"columns": columns, "rows": rows, "row_count": len(rows), "truncated": truncated}
    if write:
        answer["rows_affected"] = max(result.rowcount, seen)
    return answer


def _json_size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, sort_keys=True))


def _cell(value: Any) -> Any:
    """A column value as JSON: exact numbers stay exact (Decimal as a string), times in ISO 8601."""
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, str):
        if len(value) <= CELL_LIMIT:
            return value
        return value[:CELL_LIMIT] + f"…[truncated: {len(value) - CELL_LIMIT} more characters]"
    if isinstance(value, Decimal | UUID):
        return str(value)
    if isinstance(value, datetime | date | clock_time):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
        if len(data) <= CELL_LIMIT // 2:
            return {"base64": base64.b64encode(data).decode()}
        return {"binary_bytes": len(data)}
    if isinstance(value, dict):
        return {str(k): _cell(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_cell(v) for v in value]
    return str(value)


def _describe(exc: SQLAlchemyError, url: URL) -> str:
    """The driver's own message, first line only, without anything of the URL in it."""
    origin: BaseException = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    lines = str(origin).strip().splitlines()
    message = lines[0] if lines else type(origin).__name__
    if isinstance(origin, sqlite3.OperationalError) and message == "interrupted":
        message = f"the statement ran longer than {STATEMENT_TIMEOUT_SECONDS} seconds and was stopped"
    for secret in _secrets(url):
        message = message.replace(secret, "***")
    if len(message) > ERROR_LIMIT:
        message = message[:ERROR_LIMIT] + "…"
    return f"{type(origin).__name__}: {message}"


def _secrets(url: URL) -> list[str]:
    rendered = url.render_as_string(hide_password=False)
    candidates = [rendered, url.password or ""]
    # A user or host name of one or two letters would mangle every message; those are not secrets anyway.
    candidates += [part for part in (url.username, url.host) if part and len(part) >= 3]
    return sorted((c for c in candidates if c), key=len, reverse=True)
