"""The schema of the tables a database tool may touch, as the model reads it: database_schema's answer,
and what a failed database_query quotes so the model repairs the statement in one turn.

Read with SQLAlchemy's inspector (one bulk query per schema for columns, keys and foreign keys) and one
catalog query for row estimates (PostgreSQL's `pg_class.reltuples`, MySQL's `information_schema.TABLES`;
SQLite keeps none, so its tables are counted up to ROW_COUNT_CAP). Only allowlisted tables are read:
each `allowed_tables` entry that exists, and every non-catalog table and view of each `allowed_schemas`.

Deterministic and compact, because it is part of what the model reads and a prompt prefix that changes
for no reason is not cached: tables in (schema, name) order, columns in their table's order, one line
each:

    orders (~20 rows)
      id integer PK
      customer_id integer NOT NULL FK → customers.id

A table in the database's default schema (public, main, the URL's database) is shown unqualified, as
the model may write it. Past LARGE_COLUMNS columns in all, the answer is the list of tables (with their
row estimates and column counts), and the model asks for one table at a time.

Cached per connection (the DATABASE_URL) and schema version, for at most CACHE_SECONDS (row estimates
drift without a schema change): the version is one cheap catalog query (SQLite's `PRAGMA
schema_version`; a fingerprint of the allowed schemas' columns and constraints on PostgreSQL and MySQL),
so a warm function answers from memory until someone alters a table.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import inspect, text
from sqlalchemy.engine import URL, Connection

from stepwise.tools.builtin._sql import Allowlist, Flavor

LARGE_COLUMNS = 150  # more columns than this in all: a table list first, then one table at a time
CACHE_SECONDS = 300
CACHE_ENTRIES = 32
ROW_COUNT_CAP = 100_000  # SQLite has no estimate: tables are counted, up to this many rows


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    nullable: bool
    primary: bool
    references: str | None  # "customers.id"


@dataclass(frozen=True)
class Table:
    schema: str
    name: str
    shown: str  # as the model may write it
    columns: tuple[Column, ...]
    rows: int | None  # the database's estimate; None when it has none

    def lines(self) -> list[str]:
        return [self.heading(), *(f"  {_column(c)}" for c in self.columns)]

    def heading(self, *, count_columns: bool = False) -> str:
        parts = [] if self.rows is None else [_rows(self.rows)]
        if count_columns:
            parts.append(f"{len(self.columns)} columns")
        return f"{self.shown} ({', '.join(parts)})" if parts else self.shown


def _rows(rows: int) -> str:
    return f"~{rows:,} rows"


def _column(column: Column) -> str:
    parts = [column.name, column.type]
    if column.primary:
        parts.append("PK")
    elif not column.nullable:
        parts.append("NOT NULL")
    if column.references:
        parts.append(f"FK → {column.references}")
    return " ".join(parts)


Schema = dict[tuple[str, str], Table]

_cache: OrderedDict[tuple[str, str, str], tuple[float, Schema]] = OrderedDict()
_lock = threading.Lock()


def read(connection: Connection, url: URL, allowlist: Allowlist) -> Schema:
    """The allowed tables' schema, from the cache when the database's schema version is unchanged."""
    flavor = allowlist.flavor
    version = _version(connection, flavor, _schemas(allowlist))
    secret = url.render_as_string(hide_password=False).encode()
    key = (hashlib.sha256(secret).hexdigest(), allowlist.listing, version)
    now = time.monotonic()
    with _lock:
        hit = _cache.get(key)
        if hit is not None and hit[0] > now:
            _cache.move_to_end(key)
            return hit[1]
    schema = _inspect(connection, flavor, allowlist)
    with _lock:
        _cache[key] = (now + CACHE_SECONDS, schema)
        while len(_cache) > CACHE_ENTRIES:
            _cache.popitem(last=False)
    return schema


def clear() -> None:
    with _lock:
        _cache.clear()


def render(schema: Schema, flavor: Flavor, *, only: Iterable[tuple[str, str]] | None = None) -> str:
    """The schema as the model reads it: every allowed table's columns, or (past LARGE_COLUMNS) the table
    list; `only` gives just those tables' columns."""
    tables = [schema[key] for key in sorted(schema)]
    if only is not None:
        wanted = set(only)
        tables = [t for t in tables if (t.schema, t.name) in wanted]
        return "\n".join(line for t in tables for line in t.lines())
    if not tables:
        return "No allowed table exists in this database."
    legend = "one line per column: name type [PK | NOT NULL] [FK → table.column]"
    if sum(len(t.columns) for t in tables) <= LARGE_COLUMNS:
        lines = [f"{len(tables)} tables ({_names[flavor.backend]}; {legend}):"]
        return "\n".join(lines + [line for t in tables for line in t.lines()])
    lines = [
        f"{len(tables)} tables ({_names[flavor.backend]}); call database_schema with `table` for one "
        f"table's columns ({legend}):"
    ]
    return "\n".join(lines + [t.heading(count_columns=True) for t in tables])


_names = {"postgresql": "PostgreSQL", "mysql": "MySQL", "sqlite": "SQLite"}


def _schemas(allowlist: Allowlist) -> list[str]:
    return sorted({schema for schema, _ in allowlist.tables} | set(allowlist.schemas))


def _version(connection: Connection, flavor: Flavor, schemas: list[str]) -> str:
    if flavor.backend == "sqlite":
        return str(connection.exec_driver_sql("PRAGMA schema_version").scalar())
    if flavor.backend == "postgresql":
        sql = text(
            "SELECT md5(coalesce((SELECT string_agg(a.attrelid::text || ':' || a.attnum || ':' || a.attname"
            " || ':' || a.atttypid || ':' || a.atttypmod || ':' || a.attnotnull, ',' ORDER BY a.attrelid,"
            " a.attnum) FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON"
            " n.oid = c.relnamespace WHERE n.nspname = ANY(:schemas) AND a.attnum > 0 AND NOT a.attisdropped"
            " AND c.relkind IN ('r', 'p', 'v', 'm', 'f')), '') || '|' || coalesce((SELECT"
            " string_agg(o.oid::text || o.contype::text, ',' ORDER BY o.oid) FROM pg_constraint o JOIN"
            " pg_namespace n ON n.oid = o.connamespace WHERE n.nspname = ANY(:schemas)), ''))"
        )
        return str(connection.execute(sql, {"schemas": schemas}).scalar())
    if not schemas:
        return ""
    sql = text(
        "SELECT COUNT(*), COALESCE(SUM(CRC32(CONCAT_WS(':', TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME,"
        " COLUMN_TYPE, IS_NULLABLE, COLUMN_KEY, ORDINAL_POSITION))), 0) FROM information_schema.COLUMNS"
        " WHERE TABLE_SCHEMA IN :schemas"
    ).bindparams(_expanding("schemas"))
    count, fingerprint = connection.execute(sql, {"schemas": schemas}).one()
    return f"{count}:{fingerprint}"


def _expanding(name: str) -> Any:
    from sqlalchemy import bindparam

    return bindparam(name, expanding=True)


def _inspect(connection: Connection, flavor: Flavor, allowlist: Allowlist) -> Schema:
    inspector = inspect(connection)
    fold = _name_fold(flavor)
    wanted: dict[str, set[str]] = {}  # schema -> actual names of the allowed tables in it
    for schema in _schemas(allowlist):
        names = inspector.get_table_names(schema=schema) + inspector.get_view_names(schema=schema)
        for name in names:
            key = (schema, fold(name))
            whole = schema in allowlist.schemas and not flavor.is_system(schema, name)
            if key in allowlist.tables or whole:
                wanted.setdefault(schema, set()).add(name)
    estimates = _row_estimates(connection, flavor, wanted)
    schema_out: Schema = {}
    for schema, actual in wanted.items():
        filter_names = sorted(actual)
        kinds = _all_kinds()
        columns = inspector.get_multi_columns(schema=schema, filter_names=filter_names, kind=kinds)
        primaries = inspector.get_multi_pk_constraint(schema=schema, filter_names=filter_names, kind=kinds)
        foreign = inspector.get_multi_foreign_keys(schema=schema, filter_names=filter_names, kind=kinds)
        for name in filter_names:
            key = (schema, name)
            primary: Any = primaries.get(key) or {}
            pk = set(primary.get("constrained_columns") or [])
            references: dict[str, str] = {}
            for fk in foreign.get(key) or []:
                target_schema = fk.get("referred_schema") or schema
                target = _shown(flavor, target_schema, fk["referred_table"])
                for mine, theirs in zip(fk["constrained_columns"], fk["referred_columns"], strict=False):
                    references.setdefault(mine, f"{target}.{theirs}")
            schema_out[(schema, fold(name))] = Table(
                schema=schema,
                name=fold(name),
                shown=_shown(flavor, schema, name),
                columns=tuple(
                    Column(
                        name=c["name"],
                        type=_type(c["type"], connection),
                        nullable=bool(c.get("nullable", True)),
                        primary=c["name"] in pk,
                        references=references.get(c["name"]),
                    )
                    for c in columns.get(key) or []
                ),
                rows=estimates.get((schema, name)),
            )
    return schema_out


def _all_kinds() -> Any:
    from sqlalchemy.engine.reflection import ObjectKind

    return ObjectKind.ANY


def _name_fold(flavor: Flavor) -> Any:
    """How an actual table name compares with the allowlist's folded names: SQLite ignores ASCII case."""
    if flavor.backend == "sqlite":
        return lambda name: name.translate(
            str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
        )
    return lambda name: name


def _shown(flavor: Flavor, schema: str, name: str) -> str:
    return name if schema == flavor.default_schema else f"{schema}.{name}"


def _type(kind: Any, connection: Connection) -> str:
    try:
        return str(kind.compile(dialect=connection.dialect)).lower()
    except Exception:  # noqa: BLE001 - a type SQLAlchemy cannot render (a domain, an extension's): its name
        return str(type(kind).__name__).lower()


def _row_estimates(
    connection: Connection, flavor: Flavor, wanted: dict[str, set[str]]
) -> dict[tuple[str, str], int]:
    if not wanted:
        return {}
    schemas = sorted(wanted)
    if flavor.backend == "postgresql":
        sql = text(
            "SELECT n.nspname, c.relname, c.reltuples::bigint FROM pg_class c JOIN pg_namespace n ON"
            " n.oid = c.relnamespace WHERE n.nspname = ANY(:schemas) AND c.relkind IN ('r', 'p', 'm', 'f')"
        )
        rows = connection.execute(sql, {"schemas": schemas}).all()
        # -1: never analyzed or vacuumed, so PostgreSQL has no estimate yet
        return {(s, n): int(r) for s, n, r in rows if r is not None and r >= 0}
    if flavor.backend == "mysql":
        sql = text(
            "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_ROWS FROM information_schema.TABLES"
            " WHERE TABLE_SCHEMA IN :schemas AND TABLE_TYPE = 'BASE TABLE'"
        ).bindparams(_expanding("schemas"))
        rows = connection.execute(sql, {"schemas": schemas}).all()
        return {(s, n): int(r) for s, n, r in rows if r is not None}
    counted: dict[tuple[str, str], int] = {}
    preparer = connection.dialect.identifier_preparer
    for schema, names in wanted.items():
        for name in names:
            source = f"{preparer.quote(schema)}.{preparer.quote(name)}"
            count = f"SELECT count(*) FROM (SELECT 1 FROM {source} LIMIT {ROW_COUNT_CAP})"
            counted[(schema, name)] = int(connection.exec_driver_sql(count).scalar() or 0)
    return counted
