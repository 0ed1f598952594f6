"""Running the model's SQL against the tenant's database: what database_query and database_write share.

The database is the tenant's `DATABASE_URL` setting, a SQLAlchemy URL: PostgreSQL through psycopg 3
(`postgresql://user:password@host:5432/db?sslmode=require`), MySQL or MariaDB through PyMySQL
(`mysql://user:password@host:3306/db?ssl_mode=VERIFY_IDENTITY`), or, on the local stack, a SQLite file
in the tenant's directory (`sqlite:///shop.db`). Where a URL may point and how the connection is guarded
(the SSRF guard, connect-to-the-checked-address, one error text for every refused or failed connect):
`_db_target`. In AWS, Aurora PostgreSQL can also be reached through the RDS Data API with a Data API
dialect for SQLAlchemy (for example the `sqlalchemy-aurora-data-api` package):
`postgresql+auroradataapi://:@/mydb?aurora_cluster_arn=...&secret_arn=...`; it gets the PostgreSQL
checks, and the Lambda needs no VPC and no password of its own. Install the dialect in the function's
layer to use it; without it such a URL is reported as `not_configured`.

Every call:

1. checks the statement (`_sql`: one statement of the tool's kind, allowlisted functions and tables
   only) and runs sqlglot's rendering of it, passed to the driver as is (no bind-parameter parsing of
   the model's text);
2. bounds it: a read runs in a read-only transaction (SQLite: `PRAGMA query_only = ON` on the connection,
   reset before the connection returns to the pool; PostgreSQL: `SET TRANSACTION READ ONLY`; MySQL:
   `START TRANSACTION READ ONLY`) that is rolled back; every statement is stopped after
   STATEMENT_TIMEOUT_SECONDS (PostgreSQL's `statement_timeout`, and `lock_timeout` so a write does not
   queue behind a lock; MariaDB's `max_statement_time`, MySQL's `max_execution_time` for SELECTs, with
   `innodb_lock_wait_timeout` and PyMySQL's socket timeout behind them; in SQLite a progress handler);
   a connection attempt after CONNECT_TIMEOUT_SECONDS;
3. streams the rows: PostgreSQL reads go through a server-side cursor, MySQL reads (and MariaDB's
   RETURNING writes) through PyMySQL's unbuffered cursor, and every read is fetched
   _FETCH_BATCH rows at a time, so no more than one batch is held beyond what the answer keeps, and
   reading stops once the JSON would pass the 50,000-character tool result limit;
4. for a write, counts the rows it changed inside the transaction and rolls back when they are more
   than the tool's `max_rows_affected` (`too_many_rows`): a WHERE that is always true, however it is
   spelled, changes nothing. A PostgreSQL write with RETURNING runs as `WITH written AS (...) SELECT
   ... LIMIT max_rows_affected + 1`, so no more than that many rows cross the wire either. On MySQL
   the rollback needs a transactional table (InnoDB, the default; a MyISAM table keeps what a
   statement changed), and an upsert's updated row counts twice, as MySQL counts it;
5. answers with `{columns, rows, row_count, truncated}` (rows are lists in column order: two columns
   may share a name), plus `rows_affected` for a write.

The checks are not the boundary. Give each agent its own database role and grant it exactly what its
allowlist names; in PostgreSQL:

    CREATE ROLE agent_reports LOGIN PASSWORD '...' NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT;
    REVOKE ALL ON SCHEMA public FROM PUBLIC;          -- no CREATE for anyone by default
    GRANT USAGE ON SCHEMA public TO agent_reports;
    GRANT SELECT ON public.orders, public.customers TO agent_reports;       -- database_query
    GRANT INSERT, UPDATE, DELETE ON public.orders TO agent_reports;         -- database_write, if any
    ALTER ROLE agent_reports SET statement_timeout = '30s';
    REVOKE EXECUTE ON FUNCTION pg_catalog.query_to_xml(text, boolean, boolean, text) FROM PUBLIC; -- and kin

Never a superuser or a member of `pg_read_all_data`, `pg_read_server_files`, `pg_execute_server_program`
or `pg_monitor`: those read what no allowlist names. In MySQL:

    CREATE USER 'agent_reports'@'%' IDENTIFIED BY '...' REQUIRE SSL;
    GRANT SELECT ON shop.orders TO 'agent_reports'@'%';                  -- database_query
    GRANT INSERT, UPDATE, DELETE ON shop.orders TO 'agent_reports'@'%';  -- database_write, if any

and never FILE, PROCESS, SUPER or any privilege ON *.* (FILE reads the server's files, PROCESS other
sessions' statements).

Engines are cached per URL (`engine_for`), so a warm Lambda reuses its connections. Errors after the
connection is up become `database_error` with the driver's one-line message, scrubbed of the URL's
password, user and host.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date, datetime, timedelta
from datetime import time as clock_time
from decimal import Decimal
from functools import lru_cache
from typing import Any, NamedTuple, cast
from uuid import UUID

from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL, Connection, CursorResult, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError

from stepwise.net.ssrf import BlockedDestination, Resolver, system_resolver
from stepwise.tools.base import TOOL_RESULT_LIMIT, ToolResult
from stepwise.tools.builtin import Settings
from stepwise.tools.builtin._db_config import TableAccess
from stepwise.tools.builtin._db_target import (
    BLOCKED_MESSAGE,
    CONNECT_FAILED,
    checked_url,
    connect_guard,
    flavor_of,
    mysql_connect_guard,
)
from stepwise.tools.builtin._provider import not_configured, setting
from stepwise.tools.builtin._sql import Allowlist, Flavor, Refused

DATABASE_URL_SETTING = "DATABASE_URL"
STATEMENT_TIMEOUT_SECONDS = 30
CELL_LIMIT = 10_000  # characters of one text value kept in a row
ERROR_LIMIT = 300  # characters of a driver's message quoted to the model
_FETCH_BATCH = 200
_SQLITE_PROGRESS_STEPS = 10_000  # virtual machine steps between two looks at the clock

Check = Callable[[str, Allowlist], str]
_log = logging.getLogger(__name__)


@lru_cache(maxsize=16)
def engine_for(url: URL, resolver: Resolver = system_resolver) -> Engine:
    """The engine (and its connection pool) for one checked DATABASE_URL, built on first use."""
    try:
        # pre-ping: a frozen-and-thawed Lambda finds its pooled connections dead more often than not.
        engine = create_engine(url, pool_pre_ping=True, hide_parameters=True)
    except (ArgumentError, ImportError):  # NoSuchModuleError is an ArgumentError
        raise Refused(
            "not_configured", f"DATABASE_URL names a database driver that is not installed: {url.drivername}"
        ) from None
    if url.drivername == "postgresql+psycopg":
        event.listen(engine, "do_connect", connect_guard(resolver))
    elif url.drivername == "mysql+pymysql":
        event.listen(engine, "do_connect", mysql_connect_guard(resolver))
    return engine


class _Connection(NamedTuple):
    url: URL  # as configured (errors are scrubbed of its secrets)
    flavor: Flavor
    allowlist: Allowlist
    target: URL  # as it will be connected to (checked_url)
    engine: Engine


def _connect(
    tool: str, tenant_id: str, settings: Settings, access: TableAccess, resolver: Resolver
) -> _Connection | ToolResult:
    """The tenant's database as both database tools reach it, or the failure to answer the model
    with: the setting unset or not a URL, or a URL that may not be used."""
    raw_url = setting(settings, DATABASE_URL_SETTING)
    if raw_url is None:
        return not_configured(tool, DATABASE_URL_SETTING)
    try:
        url = make_url(raw_url)
    except (ArgumentError, ValueError):
        return ToolResult.failure("not_configured", "DATABASE_URL is not a valid SQLAlchemy URL")
    try:
        flavor = flavor_of(url)
        target = checked_url(url, tenant_id)
        return _Connection(url, flavor, Allowlist(access, flavor), target, engine_for(target, resolver))
    except Refused as refused:
        return ToolResult.failure(refused.code, refused.message)


def execute(
    query: str,
    *,
    tool: str,
    tenant_id: str,
    settings: Settings,
    access: TableAccess,
    check: Check,
    read_only: bool,
    max_rows_affected: int | None = None,
    resolver: Resolver = system_resolver,
) -> ToolResult:
    """Check the model's statement with `check`, run it, and answer with its rows (and, for a write,
    the rows it affected, at most `max_rows_affected`); never raises for anything the model, the
    settings or the database do."""
    connected = _connect(tool, tenant_id, settings, access, resolver)
    if isinstance(connected, ToolResult):
        return connected
    url, flavor, allowlist, target, engine = connected
    try:
        sql = check(query, allowlist)
    except Refused as refused:
        return ToolResult.failure(refused.code, refused.message)
    limit = None if read_only else max_rows_affected
    returning = not read_only and flavor.backend != "sqlite" and _returns_rows(sql, flavor.dialect)
    if limit is not None and flavor.backend == "postgresql" and returning:
        sql = f"WITH written AS ({sql}) SELECT * FROM written LIMIT {limit + 1}"
    # MySQL reads, and MariaDB's DELETE/INSERT ... RETURNING, stream through an unbuffered cursor:
    # PyMySQL's default one holds the whole result before the first row is seen.
    streamed = (read_only and flavor.backend == "postgresql") or (
        flavor.backend == "mysql" and (read_only or returning)
    )

    try:
        connection = engine.connect()
    except BlockedDestination:
        return ToolResult.failure("blocked_destination", BLOCKED_MESSAGE)
    except (SQLAlchemyError, OSError) as exc:
        # One text for every way a connection fails: the differences are a port scanner's answers.
        _log.warning("database connect failed: %s", _describe(exc, url))
        return ToolResult.failure("database_error", CONNECT_FAILED)
    try:
        with connection:
            with _bounded(connection, flavor, read_only=read_only):
                options: dict[str, Any] = {"no_parameters": True}
                if streamed:
                    options |= {"stream_results": True, "max_row_buffer": _FETCH_BATCH}
                result = connection.exec_driver_sql(sql, execution_options=options)
                # An unbuffered MySQL cursor knows its row count only once every row was read.
                output = _answer(
                    result,
                    write=not read_only,
                    limit=limit,
                    count_rows=streamed and flavor.backend == "mysql",
                )
                result.close()
            if limit is not None and output["rows_affected"] > limit:
                connection.rollback()
                return _too_many(output["rows_affected"], limit)
            if not read_only:
                connection.commit()
    except SQLAlchemyError as exc:
        message = _describe(exc, url)
        if _is_sql_error(exc):  # the one in-tool repair: the schema of what the statement named
            message += _schema_hint(engine, target, allowlist, sql)
        return ToolResult.failure("database_error", message)
    return ToolResult(output=output)


def describe_schema(
    *,
    tool: str,
    tenant_id: str,
    settings: Settings,
    access: TableAccess,
    table: str | None,
    resolver: Resolver = system_resolver,
) -> ToolResult:
    """database_schema's answer: the allowed tables' schema (`_schema`), or one table's."""
    from stepwise.tools.builtin import _schema
    from stepwise.tools.builtin._names import name_parts

    connected = _connect(tool, tenant_id, settings, access, resolver)
    if isinstance(connected, ToolResult):
        return connected
    url, flavor, allowlist, target, engine = connected
    wanted: tuple[str, str] | None = None
    if table is not None:
        parts = [allowlist.fold(part) for part in name_parts(table, flavor.dialect)]
        if not 1 <= len(parts) <= 2:
            return ToolResult.failure("invalid_arguments", f"table: {table!r} is not a table name")
        wanted = (
            (flavor.schema_of_unqualified(parts[0]), parts[0]) if len(parts) == 1 else (parts[0], parts[1])
        )
    try:
        connection = engine.connect()
    except BlockedDestination:
        return ToolResult.failure("blocked_destination", BLOCKED_MESSAGE)
    except (SQLAlchemyError, OSError) as exc:
        _log.warning("database connect failed: %s", _describe(exc, url))
        return ToolResult.failure("database_error", CONNECT_FAILED)
    try:
        with connection, _bounded(connection, flavor, read_only=True):
            schema = _schema.read(connection, target, allowlist)
    except SQLAlchemyError as exc:
        return ToolResult.failure("database_error", _describe(exc, url))
    if wanted is None:
        return ToolResult(output=_schema.render(schema, flavor))
    if wanted not in schema:
        listing = ", ".join(schema[key].shown for key in sorted(schema)) or "none"
        return ToolResult.failure(
            "unknown_table", f"no allowed table {table} (the allowed tables: {listing})"
        )
    return ToolResult(output=_schema.render(schema, flavor, only=[wanted]))


# MySQL's and MariaDB's error numbers for a statement the model can fix: unknown column, table or
# function, syntax, ambiguous or ungrouped column, wrong column count, a derived table without alias...
_MYSQL_SQL_ERRORS = frozenset(
    {1052, 1054, 1055, 1056, 1058, 1060, 1064, 1066, 1109, 1111, 1136, 1140, 1146, 1222, 1241, 1247, 1248}
    | {1305, 1327, 1582, 1630}
)


def _is_sql_error(exc: SQLAlchemyError) -> bool:
    """Whether the database refused the statement itself (a name, the syntax, grouping), not a timeout,
    a lock or a lost connection: only then does the schema help."""
    origin = exc.orig if isinstance(exc, DBAPIError) else None
    if origin is None:
        return False
    sqlstate = getattr(origin, "sqlstate", None)
    if isinstance(sqlstate, str):  # PostgreSQL: class 42 is "syntax error or access rule violation"
        return sqlstate.startswith("42")
    if isinstance(origin, sqlite3.OperationalError):
        text = str(origin)
        return text.startswith(("no such", "ambiguous column", "near ")) or "syntax error" in text
    code = origin.args[0] if origin.args else None
    return isinstance(code, int) and code in _MYSQL_SQL_ERRORS


def _schema_hint(engine: Engine, url: URL, allowlist: Allowlist, sql: str) -> str:
    """The schema of the tables the failed statement names, for the error the model reads ("" when it
    cannot be read: the driver's message stands alone)."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    from stepwise.tools.builtin import _schema
    from stepwise.tools.builtin._sql import tables_touched

    flavor = allowlist.flavor
    try:
        named: set[tuple[str, str]] = set()
        for table in tables_touched(sqlglot.parse_one(sql, read=flavor.dialect), allowlist.fold):
            name = allowlist.fold(table.this)
            db = table.args.get("db")
            schema_name = (
                allowlist.fold(db) if isinstance(db, exp.Identifier) else flavor.schema_of_unqualified(name)
            )
            named.add((schema_name, name))
        with engine.connect() as connection, _bounded(connection, flavor, read_only=True):
            schema = _schema.read(connection, url, allowlist)
    except (SQLAlchemyError, SqlglotError, Refused, OSError, BlockedDestination):
        return ""
    found = sorted(key for key in named if key in schema)
    parts = []
    if found:
        parts.append("The tables it names:\n" + _schema.render(schema, flavor, only=found))
    if len(found) < len(named) or not found:
        parts.append("Tables you may use:\n" + _schema.render(schema, flavor))
    return "\n" + "\n".join(parts)


def _returns_rows(sql: str, dialect: str) -> bool:
    """Whether the checked write has a RETURNING clause (read from its tree: the word could also sit
    in a string literal, and wrapping a statement without one in a CTE is an error)."""
    import sqlglot  # loaded already: the check just parsed this statement

    return sqlglot.parse_one(sql, read=dialect).args.get("returning") is not None


def _too_many(seen: int, limit: int) -> ToolResult:
    count = f"{seen} rows" if seen <= limit + 1 else f"more than {limit} rows"
    return ToolResult.failure(
        "too_many_rows",
        f"the statement would change {count}, more than this tool's max_rows_affected ({limit}): it was "
        "rolled back and nothing changed. Narrow the WHERE clause to the rows you mean, or change them "
        "in smaller statements.",
    )


@contextmanager
def _bounded(connection: Connection, flavor: Flavor, *, read_only: bool) -> Iterator[None]:
    """Read-only when asked, and stopped after STATEMENT_TIMEOUT_SECONDS."""
    if flavor.backend == "mysql":
        with _bounded_mysql(connection, read_only=read_only):
            yield
        return
    if flavor.backend != "sqlite":
        if read_only:
            connection.exec_driver_sql("SET TRANSACTION READ ONLY")  # first statement of the transaction
        timeout_ms = int(STATEMENT_TIMEOUT_SECONDS * 1000)
        connection.exec_driver_sql(f"SET LOCAL statement_timeout = {timeout_ms}")
        connection.exec_driver_sql(f"SET LOCAL lock_timeout = {timeout_ms}")
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


@contextmanager
def _bounded_mysql(connection: Connection, *, read_only: bool) -> Iterator[None]:
    """MySQL's and MariaDB's forms of the same bounds. Session settings, set again on every call
    because the pooled connection keeps them: MariaDB's max_statement_time stops any statement, MySQL's
    max_execution_time only SELECTs (a write is bounded by the lock waits and PyMySQL's socket timeout);
    innodb_lock_wait_timeout and lock_wait_timeout keep a write from queueing behind a row or table lock.
    A read runs in `START TRANSACTION READ ONLY`, rolled back: InnoDB refuses any write to a table in it."""
    seconds = STATEMENT_TIMEOUT_SECONDS
    if connection.dialect.is_mariadb:  # type: ignore[attr-defined]
        connection.exec_driver_sql(f"SET SESSION max_statement_time = {seconds}")
    else:
        connection.exec_driver_sql(f"SET SESSION max_execution_time = {seconds * 1000}")
    connection.exec_driver_sql(f"SET SESSION innodb_lock_wait_timeout = {seconds}")
    connection.exec_driver_sql(f"SET SESSION lock_wait_timeout = {seconds}")
    if read_only:
        connection.exec_driver_sql("START TRANSACTION READ ONLY")
    try:
        yield
    finally:
        if read_only:
            connection.rollback()


def _answer(
    result: CursorResult[Any], *, write: bool, limit: int | None, count_rows: bool = False
) -> dict[str, Any]:
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
                continue  # a write's RETURNING rows are counted, up to one past its limit
            cells = [_cell(value) for value in row]
            size = _json_size(cells) + 2
            if size > room:
                truncated = True
                if not write:
                    break
                continue
            rows.append(cells)
            room -= size
        if (truncated and not write) or (limit is not None and seen > limit):
            break  # stop reading: the answer is full, or the write is over its limit and rolls back
    answer = {"columns": columns, "rows": rows, "row_count": len(rows), "truncated": truncated}
    if write:
        # A RETURNING statement's rowcount is the driver's count of rows returned, until they all were.
        over = limit is not None and seen > limit
        answer["rows_affected"] = seen if over or count_rows else max(result.rowcount, seen)
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


def _describe(exc: BaseException, url: URL) -> str:
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
