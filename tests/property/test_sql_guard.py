"""The SQL guard (stepwise.tools.builtin._sql) against generated statements.

Statements are built from fragments the guard must see through: allowed and forbidden tables (and the
catalogs), allowlisted and dangerous functions (quoted, upper-cased), writes nested in CTEs, SELECT INTO,
locking clauses, a second statement after `;`, comments. Whatever the guard lets through is then run on
SQLite under an authorizer (sqlite3.set_authorizer), which reports every table read or written and every
function called as SQLite itself resolves them: an oracle that shares no code with the guard. A query
that passes performs no write and calls no function off the allowlist; a write that passes writes only
an allowed table. For PostgreSQL and MySQL the rendered SQL is parsed again and walked the same way.
"""

from __future__ import annotations

import sqlite3

import sqlglot
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlglot import exp

from stepwise.tools.builtin import _sql, database_query
from stepwise.tools.builtin._sql_functions import FUNCTIONS, called_name

ALLOWED = ["orders", "customers"]
# Allowed names weigh more than forbidden ones and come first (hypothesis favours a list's first entries),
# so that enough statements pass for the oracle to judge, while every forbidden form still comes up.
TABLES = [*ALLOWED * 4, "secrets", "main.secrets", '"SECRETS"', "sqlite_master", "temp.orders", "Orders"]
PG_TABLES = [*ALLOWED * 4, "secrets", "public.secrets", "pg_catalog.pg_authid", "pg_shadow"]
SAFE_CALLS = ["count(*)", "lower(name)", "abs(id)", "coalesce(name, 'x')", "upper(name)", "length(name)"]
FUNCTION_CALLS = [
    *SAFE_CALLS * 3,
    "load_extension('x')",
    "\"LOAD_EXTENSION\"('x')",
    "readfile('/etc/passwd')",
    "writefile('/tmp/x', 'y')",
    "randomblob(100)",
    "zeroblob(100)",
    "sqlite_version()",
    "fts3_tokenizer('simple')",
    "pg_read_file('/etc/passwd')",
    "pg_sleep(1)",
    "current_setting('data_directory')",
    "set_config('a', 'b', false)",
    "version()",
    "sleep(1)",
    "benchmark(1, 1)",
    "dblink('x', 'y')",
    "lo_import('/etc/passwd')",
    "main.lower(name)",
]
WRITES = [
    "DELETE FROM orders WHERE id = 1 RETURNING id",
    "INSERT INTO secrets (id) VALUES (1) RETURNING id",
    "UPDATE customers SET name = 'x' WHERE id = 1 RETURNING id",
]
TAILS = [
    *[""] * 6,
    "; DROP TABLE orders",
    " -- ; DELETE FROM orders",
    " /* */ ; DELETE FROM orders",
    " FOR UPDATE",
]


def _expression(tables: list[str]) -> st.SearchStrategy[str]:
    leaf = st.sampled_from(["id", "name", "1", "'a'", "NULL", *FUNCTION_CALLS])
    return st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.tuples(inner, st.sampled_from(["+", "||", "=", "AND", "OR"]), inner).map(" ".join),
            st.tuples(inner, st.sampled_from(tables)).map(lambda p: f"(SELECT {p[0]} FROM {p[1]})"),
            st.tuples(inner, st.sampled_from(tables)).map(lambda p: f"{p[0]} IN {p[1]}"),
            inner.map(lambda e: f"CASE WHEN {e} THEN 1 ELSE 0 END"),
            inner.map(lambda e: f"CAST({e} AS TEXT)"),
        ),
        max_leaves=4,
    )


@st.composite
def queries(draw: st.DrawFn, tables: list[str] = TABLES) -> str:
    columns = draw(st.lists(_expression(tables), min_size=1, max_size=3))
    source = draw(st.sampled_from([*tables, "x", "x"]))
    into = " INTO newtable" if draw(st.integers(0, 7)) == 7 else ""
    select = f"SELECT {', '.join(columns)}{into} FROM {source}"
    if draw(st.booleans()):
        select += f" JOIN {draw(st.sampled_from(tables))} ON {draw(_expression(tables))}"
    if draw(st.booleans()):
        select += f" WHERE {draw(_expression(tables))}"
    if draw(st.booleans()):
        select += f" UNION SELECT {draw(_expression(tables))} FROM {draw(st.sampled_from(tables))}"
    if source == "x" or draw(st.booleans()):
        reads = [f"SELECT id, name FROM {draw(st.sampled_from(tables))}"] * 3
        body = draw(st.sampled_from([*reads, *WRITES]))  # hypothesis favours the first entries
        select = f"WITH x AS ({body}) {select}"
    return select + draw(st.sampled_from(TAILS))


HAZARDS = [
    lambda q: f"WITH x AS (DELETE FROM orders WHERE id = 1 RETURNING id) {q}",
    lambda q: f"WITH x AS (INSERT INTO orders (id) VALUES (1) RETURNING id) {q}",
    lambda q: q.replace(" FROM ", " INTO newtable FROM ", 1),
    lambda q: f"{q} FOR UPDATE",
    lambda q: f"{q}; DELETE FROM orders",
    lambda q: f"{q} UNION SELECT id FROM secrets",
    lambda q: f"{q} UNION SELECT load_extension('x') FROM orders",
    lambda q: f"{q} UNION SELECT pg_read_file('/etc/passwd') FROM orders",
    lambda q: f"{q} UNION SELECT id FROM sqlite_master",
    lambda q: f"{q} UNION SELECT id FROM pg_catalog.pg_authid",
    lambda q: f"{q} WHERE id IN secrets",
    lambda q: f"{q} UNION SELECT * FROM json_each('[1]')",
]


@st.composite
def clean_queries(draw: st.DrawFn) -> str:
    """A query of allowed tables and allowlisted functions only."""
    safe = st.sampled_from(["id", "name", "1", *SAFE_CALLS])
    columns = draw(st.lists(safe, min_size=1, max_size=3))
    return f"SELECT {', '.join(columns)} FROM {draw(st.sampled_from(ALLOWED))}"


@st.composite
def writes(draw: st.DrawFn) -> str:
    table = draw(st.sampled_from(TABLES))
    value = draw(_expression(TABLES))
    statement = draw(
        st.sampled_from(
            [
                f"INSERT INTO {table} (id, name) VALUES (1, {value})",
                f"INSERT INTO {table} (id, name) SELECT id, {value} FROM {draw(st.sampled_from(TABLES))}",
                f"UPDATE {table} SET name = {value} WHERE id = {value}",
                f"DELETE FROM {table} WHERE id IN (SELECT id FROM {draw(st.sampled_from(TABLES))})",
                f"DELETE FROM {table} WHERE {value}",
            ]
        )
    )
    return statement + draw(st.sampled_from(TAILS))


def _database() -> sqlite3.Connection:
    db = sqlite3.connect(":memory:")
    for table in ("orders", "customers", "secrets"):
        db.execute(f"CREATE TABLE {table} (id INTEGER, name TEXT)")
        db.execute(f"INSERT INTO {table} VALUES (1, 'a')")
    return db


def _authorized(sql: str) -> list[tuple[int, str | None, str | None]]:
    """What SQLite was asked to authorize while preparing and running `sql`: (action, arg1, arg2)."""
    db = _database()
    seen: list[tuple[int, str | None, str | None]] = []

    def authorizer(action: int, arg1: str | None, arg2: str | None, _db: str | None, _src: str | None) -> int:
        seen.append((action, arg1, arg2))
        return sqlite3.SQLITE_OK

    db.set_authorizer(authorizer)
    try:
        db.execute(sql).fetchall()
    except sqlite3.Error:
        pass  # a column that does not exist: what was prepared so far was still authorized
    finally:
        db.close()
    return seen


_WRITE_ACTIONS = {
    sqlite3.SQLITE_INSERT,
    sqlite3.SQLITE_UPDATE,
    sqlite3.SQLITE_DELETE,
    sqlite3.SQLITE_CREATE_TABLE,
    sqlite3.SQLITE_CREATE_TEMP_TABLE,
    sqlite3.SQLITE_DROP_TABLE,
    sqlite3.SQLITE_ALTER_TABLE,
    sqlite3.SQLITE_ATTACH,
    sqlite3.SQLITE_DETACH,
    sqlite3.SQLITE_PRAGMA,
    sqlite3.SQLITE_TRANSACTION,
}


def _allow(flavor: _sql.Flavor) -> _sql.Allowlist:
    return _sql.Allowlist(database_query.Config(allowed_tables=ALLOWED, allowed_schemas=[]), flavor)


def _verdict(check: object, sql: str, allowlist: _sql.Allowlist) -> str | None:
    try:
        return check(sql, allowlist)  # type: ignore[operator, no-any-return]
    except _sql.Refused:
        return None


@settings(max_examples=150)  # about one in five passes: enough that passing ones are judged
@given(queries())
def test_a_query_that_passes_writes_nothing_and_calls_only_allowlisted_functions(sql: str) -> None:
    passed = _verdict(_sql.check_query, sql, _allow(_sql.FLAVORS["sqlite"]))
    if passed is None:
        return
    for action, arg1, arg2 in _authorized(passed):
        assert action not in _WRITE_ACTIONS, (sql, passed, action, arg1)
        if action == sqlite3.SQLITE_READ:
            assert arg1 in ALLOWED, (sql, passed, arg1)
        if action == sqlite3.SQLITE_FUNCTION:  # arg2 is the function's name
            assert arg2 is not None and arg2.lower() in FUNCTIONS["sqlite"], (sql, passed, arg2)


@given(writes())
def test_a_write_that_passes_writes_and_reads_only_allowed_tables(sql: str) -> None:
    passed = _verdict(_sql.check_write, sql, _allow(_sql.FLAVORS["sqlite"]))
    if passed is None:
        return
    for action, arg1, arg2 in _authorized(passed):
        assert action not in _WRITE_ACTIONS - {
            sqlite3.SQLITE_INSERT,
            sqlite3.SQLITE_UPDATE,
            sqlite3.SQLITE_DELETE,
        }
        if action in (
            sqlite3.SQLITE_INSERT,
            sqlite3.SQLITE_UPDATE,
            sqlite3.SQLITE_DELETE,
            sqlite3.SQLITE_READ,
        ):
            assert arg1 in ALLOWED, (sql, passed, action, arg1)
        if action == sqlite3.SQLITE_FUNCTION:
            assert arg2 is not None and arg2.lower() in FUNCTIONS["sqlite"], (sql, passed, arg2)


_FORBIDDEN_NODES = (
    exp.DML,
    exp.DDL,
    exp.Drop,
    exp.Alter,
    exp.Command,
    exp.Into,
    exp.Lock,
    exp.Set,
    exp.Pragma,
)


@settings(max_examples=150)
@given(queries(PG_TABLES), st.sampled_from(["postgresql", "mysql"]))
def test_a_query_rendered_for_postgres_or_mysql_holds_no_write_and_no_other_function(
    sql: str, backend: str
) -> None:
    flavor = _sql.FLAVORS[backend]
    passed = _verdict(_sql.check_query, sql, _allow(flavor))
    if passed is None:
        return
    statements = [s for s in sqlglot.parse(passed, read=flavor.dialect) if s is not None]
    assert len(statements) == 1, passed
    for node in statements[0].walk():
        assert not isinstance(node, _FORBIDDEN_NODES), (sql, passed, type(node).__name__)
        if isinstance(node, exp.Func):
            name = called_name(node, flavor.dialect)
            assert name is None or name in FUNCTIONS[flavor.dialect], (sql, passed, name)


@given(clean_queries(), st.sampled_from(HAZARDS), st.sampled_from(["sqlite", "postgresql", "mysql"]))
def test_a_clean_query_passes_and_one_hazard_in_it_is_refused(sql: str, hazard: object, backend: str) -> None:
    allowlist = _allow(_sql.FLAVORS[backend])
    assert _verdict(_sql.check_query, sql, allowlist) is not None, sql
    tainted = hazard(sql)  # type: ignore[operator]
    assert _verdict(_sql.check_query, tainted, allowlist) is None, tainted


@given(st.text(max_size=200))
def test_any_text_is_refused_or_checked_never_an_unexpected_error(sql: str) -> None:
    for check in (_sql.check_query, _sql.check_write):
        passed = _verdict(check, sql, _allow(_sql.FLAVORS["sqlite"]))  # Refused is the only refusal
        assert passed is None or len([s for s in sqlglot.parse(passed, read="sqlite") if s]) == 1
