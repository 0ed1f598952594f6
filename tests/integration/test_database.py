"""database_query and database_write against a real PostgreSQL (tests/fakes/postgres.py) and a real
MariaDB (tests/fakes/mysql.py), each started once for this module: the SQL guard's attack forms,
read-only reads, the write limit, streaming, timeouts and the connection's SSRF guard, on the databases
where they matter.

Every test runs on both dialects (`db`'s params) unless it names one (`@on("mysql")`) because the other
has no form of it; where the dialects differ only in their SQL or their wording, the difference sits in
a table keyed by dialect beside the test. MariaDB's agent is a user with a password over TCP, the way a
tenant's DATABASE_URL does; PostgreSQL's is the cluster's superuser (the cluster trusts loopback).
(MariaDB is what Debian ships; the MySQL-only branch, max_execution_time, has no live test.)"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pymysql
import pytest
from sqlalchemy import event

from stepwise.net.ssrf import system_resolver
from stepwise.tools.builtin import (
    StaticSettings,
    _database,
    _db_target,
    _sql,
    database_query,
)
from tests.fakes.mysql import Server, server
from tests.fakes.postgres import Cluster, cluster
from tests.integration.database_tools import SCOPE, error_of, query, unchecked_query, write

DIALECTS = ["postgresql", "mysql"]
MARIADB_PASSWORD = "agent-password-1"
POSTGRES_SCHEMA = """
    DROP TABLE IF EXISTS orders, customers, secret;
    CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL);
    CREATE TABLE orders (id int PRIMARY KEY, customer_id int, total numeric(10, 2), note text);
    CREATE TABLE secret (id int PRIMARY KEY, value text);
    DROP SEQUENCE IF EXISTS counter;
    CREATE SEQUENCE counter;
    INSERT INTO customers VALUES (1, 'Ada'), (2, 'Grace');
    INSERT INTO orders SELECT n, 1 + n % 2, n * 1.5, 'note ' || n FROM generate_series(1, 20) AS n;
    INSERT INTO secret VALUES (1, 'the launch codes');
"""
MARIADB_SCHEMA = """
    DROP TABLE IF EXISTS orders, customers, secret;
    CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL) ENGINE=InnoDB;
    CREATE TABLE orders (id int PRIMARY KEY, customer_id int, total decimal(10, 2), note text) ENGINE=InnoDB;
    CREATE TABLE secret (id int PRIMARY KEY, value text) ENGINE=InnoDB;
    INSERT INTO customers VALUES (1, 'Ada'), (2, 'Grace');
    INSERT INTO orders SELECT seq, 1 + seq % 2, seq * 1.5, CONCAT('note ', seq) FROM seq_1_to_20;
    INSERT INTO secret VALUES (1, 'the launch codes')
"""


@dataclass(frozen=True)
class Shop:
    """The `shop` database on one dialect's server, fresh for each test, as the tests see it."""

    dialect: str  # "postgresql" or "mysql": a DATABASE_URL's scheme, and the key of the tables below
    url: str  # the agent's DATABASE_URL, over TCP to 127.0.0.1
    port: int
    no_database: str  # the agent's login to a database that does not exist
    refused_login: str  # a login to `shop` that the server refuses
    rows: Callable[[str], list[tuple[Any, ...]]]  # a statement's rows, read past the tools as the admin
    admin: Callable[[str], object]  # statements run as the admin (DDL, ANALYZE), past the tools


def on(dialect: str) -> pytest.MarkDecorator:
    """Run a test on `dialect` only: for what the other dialect has no form of."""
    return pytest.mark.parametrize("db", [dialect], indirect=True)


def each(argname: str, table: dict[str, list[str]]) -> pytest.MarkDecorator:
    """Run a test once for every dialect and each of that dialect's cases in `table`."""
    pairs = [(dialect, case) for dialect, cases in table.items() for case in cases]
    return pytest.mark.parametrize(("db", argname), pairs, indirect=["db"])


@pytest.fixture(scope="module")
def postgres() -> Iterator[Cluster]:
    with cluster() as running:
        running.sql("CREATE DATABASE shop")
        yield running


@pytest.fixture(scope="module")
def mariadb() -> Iterator[Server]:
    with server() as running:
        # The agent's role as _database's docstring says to grant it: more than the tools allow (it may
        # read `secret` and write everywhere), so what the tests see refused is the guard's doing.
        running.sql(
            f"CREATE DATABASE shop; CREATE USER 'agent'@'%' IDENTIFIED BY '{MARIADB_PASSWORD}';"
            "GRANT SELECT, INSERT, UPDATE, DELETE ON shop.* TO 'agent'@'%'"
        )
        yield running


@pytest.fixture(params=DIALECTS)
def db(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Shop]:
    # The same explicit exemption the local stack and the other outbound tests use for loopback peers.
    monkeypatch.setenv("STEPWISE_ALLOW_HOSTS", "127.0.0.1")
    # Each server starts when the first test on its dialect asks for it, and stays up for the module.
    if request.param == "postgresql":
        yield _postgres_shop(request.getfixturevalue("postgres"))
    else:
        yield _mariadb_shop(request.getfixturevalue("mariadb"))
    _database.engine_for.cache_clear()


def _postgres_shop(running: Cluster) -> Shop:
    running.sql(POSTGRES_SCHEMA, database="shop")

    def rows(sql: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(host="127.0.0.1", port=running.port, user=running.superuser, dbname="shop") as c:
            return c.execute(sql.encode()).fetchall()

    return Shop(
        dialect="postgresql",
        url=running.url(database="shop"),
        port=running.port,
        no_database=running.url(database="nope"),
        refused_login=running.url(user="nobody_here", database="shop"),  # trust takes any password
        rows=rows,
        admin=lambda sql: running.sql(sql, database="shop"),
    )


def _mariadb_shop(running: Server) -> Shop:
    running.sql(MARIADB_SCHEMA, database="shop")
    return Shop(
        dialect="mysql",
        url=running.url("agent", MARIADB_PASSWORD, "shop"),
        port=running.port,
        no_database=running.url("agent", MARIADB_PASSWORD, "nope"),
        refused_login=running.url("agent", "wrong-password", "shop"),
        rows=lambda sql: running.sql(sql, database="shop"),
        admin=lambda sql: running.sql(sql, database="shop"),
    )


def at_unresolvable_host(url: str) -> str:
    """`url` with its host a name that never resolves (`.invalid`, RFC 6761)."""
    return url.replace("@127.0.0.1:", "@db.stepwise.invalid:")


# --- reads ------------------------------------------------------------------------------------------

# (the query, its columns, its rows): each dialect's own functions and syntax in one report
REPORTS: dict[str, tuple[str, list[str], list[list[Any]]]] = {
    "postgresql": (
        "SELECT c.name, count(*) AS orders, sum(o.total) AS spent, round(avg(o.total), 2) AS mean, "
        "string_agg(o.id::text, ',' ORDER BY o.id) FILTER (WHERE o.id <= 4) AS first_ids, "
        "date_trunc('day', now())::date = current_date AS today, coalesce(max(o.note), '-') AS last_note "
        "FROM orders o JOIN customers c ON c.id = o.customer_id GROUP BY c.name ORDER BY c.name",
        ["name", "orders", "spent", "mean", "first_ids", "today", "last_note"],
        [
            ["Ada", 10, "165.00", "16.50", "2,4", True, "note 8"],
            ["Grace", 10, "150.00", "15.00", "1,3", True, "note 9"],
        ],
    ),
    "mysql": (
        "SELECT c.name, COUNT(*) AS orders, SUM(o.total) AS spent, ROUND(AVG(o.total), 2) AS mean, "
        "GROUP_CONCAT(o.id ORDER BY o.id SEPARATOR ',') AS ids, IFNULL(MAX(o.note), '-') AS last_note, "
        "DATE_FORMAT(NOW(), '%Y') = YEAR(CURDATE()) AS this_year, IF(COUNT(*) > 5, 'many', 'few') AS size "
        "FROM orders o JOIN customers c ON c.id = o.customer_id WHERE o.id <= 6 "
        "GROUP BY c.name ORDER BY c.name",
        ["name", "orders", "spent", "mean", "ids", "last_note", "this_year", "size"],
        [
            ["Ada", 3, "18.00", "6.00", "2,4,6", "note 6", 1, "few"],
            ["Grace", 3, "13.50", "4.50", "1,3,5", "note 5", 1, "few"],
        ],
    ),
}


def test_a_reporting_query_runs(db: Shop) -> None:
    sql, columns, expected = REPORTS[db.dialect]

    result = query(db.url, sql)

    assert result.output is not None, result.error
    assert result.output["columns"] == columns
    assert result.output["rows"] == expected


ATTACKS = {
    "postgresql": [
        # SQL text evaluated by a function, past the table allowlist
        "SELECT query_to_xml('SELECT * FROM secret', true, true, '')",
        "SELECT o.id, x FROM orders o, LATERAL query_to_xml('SELECT * FROM secret', true, true, '') AS x",
        "SELECT xpath('//value/text()', query_to_xml('SELECT * FROM secret', true, false, ''))",
        # settings and activity
        "SELECT current_setting('data_directory')",
        "SELECT name, setting FROM pg_settings",
        "SELECT query FROM pg_stat_activity",
        # set-returning and table-valued forms
        "SELECT * FROM orders CROSS JOIN LATERAL generate_series(1, 3) AS g",
        "SELECT * FROM orders o JOIN LATERAL (SELECT * FROM secret) s ON true",
        "SELECT 'secret'::regclass::oid",
    ],
    "mysql": [
        "SELECT * FROM secret",
        "SELECT * FROM shop.secret",
        "SELECT * FROM orders WHERE id IN (SELECT id FROM secret)",
        "SELECT table_name FROM information_schema.tables",
        "SELECT user, authentication_string FROM mysql.user",
        "SELECT LOAD_FILE('/etc/passwd')",
        "SELECT @@datadir",
        "SELECT @@global.secure_file_priv",
        "SELECT SLEEP(5)",
        "SELECT BENCHMARK(100000000, MD5('x'))",
        "SELECT DATABASE(), USER(), VERSION()",
        "SELECT EXTRACTVALUE('<a>1</a>', '/a')",
        "SELECT REPEAT('x', 100000000)",
        "SELECT * FROM JSON_TABLE('[1, 2]', '$[*]' COLUMNS (x INT PATH '$')) AS j",
        "SELECT * FROM orders INTO OUTFILE '/tmp/stepwise-leak'",
        "SELECT * INTO @v FROM orders LIMIT 1",
        "SELECT * FROM orders FOR UPDATE",
    ],
}
# MySQL's list also holds statement forms (INTO, FOR UPDATE) and forms the parser refuses outright.
ATTACK_REFUSALS = {
    "postgresql": ("function_not_allowed", "table_not_allowed"),
    "mysql": ("function_not_allowed", "table_not_allowed", "statement_not_allowed", "invalid_query"),
}


@each("sql", ATTACKS)
def test_each_attack_form_is_refused(db: Shop, sql: str) -> None:
    code, message = error_of(query(db.url, sql))

    assert code in ATTACK_REFUSALS[db.dialect], (code, message)


@on("postgresql")
def test_sql_in_a_function_reads_past_the_allowlist_without_the_guard(db: Shop) -> None:
    leaked = unchecked_query(db.url, "SELECT query_to_xml('SELECT * FROM secret', true, true, '')::text AS x")

    assert leaked.output is not None, leaked.error
    assert "the launch codes" in leaked.output["rows"][0][0]


@on("mysql")
def test_a_table_and_a_setting_are_readable_without_the_guard(db: Shop) -> None:
    leaked = unchecked_query(db.url, "SELECT value FROM secret")
    setting = unchecked_query(db.url, "SELECT @@datadir AS d")

    assert leaked.output is not None and leaked.output["rows"] == [["the launch codes"]], leaked.error
    assert setting.output is not None and setting.output["rows"][0][0].endswith("/data/"), setting.error


# (a write, the server's words refusing it, a query of what it would have changed, that query's rows).
# PostgreSQL cannot even make a DML statement a server-side cursor's query; a writing function it can.
WRITES_IN_A_READ: dict[str, tuple[str, str, str, list[tuple[Any, ...]]]] = {
    "postgresql": (
        "SELECT nextval('counter')",
        "read-only transaction",
        "SELECT last_value, is_called FROM counter",
        [(1, False)],
    ),
    "mysql": (
        "DELETE FROM orders WHERE id = 1",
        "READ ONLY transaction",
        "SELECT COUNT(*) FROM orders",
        [(20,)],
    ),
}


def test_reads_are_read_only_even_unchecked(db: Shop) -> None:
    sql, refusal, unchanged, expected = WRITES_IN_A_READ[db.dialect]

    code, message = error_of(unchecked_query(db.url, sql))

    assert code == "database_error"
    assert refusal in message
    assert db.rows(unchanged) == expected


# psycopg's named cursor; PyMySQL's unbuffered one (its buffered default holds the whole result)
STREAMING_CURSORS: dict[str, type] = {"postgresql": psycopg.ServerCursor, "mysql": pymysql.cursors.SSCursor}


def test_a_read_streams_through_a_server_side_cursor_and_stops_at_the_cap(db: Shop) -> None:
    cursors: list[object] = []
    url = _db_target.checked_url(_database.make_url(db.url), "t1")
    engine = _database.engine_for(url, system_resolver)  # the engine execute() builds and caches
    event.listen(engine, "before_cursor_execute", lambda conn, cursor, *rest: cursors.append(cursor))

    result = query(db.url, "SELECT o.id, o.note FROM orders o, customers, orders o2, orders o3, orders o4")

    assert result.output is not None, result.error
    assert result.output["truncated"] is True  # 20 * 2 * 20 * 20 * 20 = 320,000 rows, cut long before
    assert any(isinstance(c, STREAMING_CURSORS[db.dialect]) for c in cursors), cursors


# (the time limit in seconds, a query that runs past it, the server's words stopping it). MariaDB caps a
# recursive CTE's iterations on its own, so its runaway is a cross join.
RUNAWAYS: dict[str, tuple[float, str, str]] = {
    "postgresql": (
        0.2,
        "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT max(x) FROM n",
        "statement timeout",
    ),
    "mysql": (
        1,
        "SELECT COUNT(*) FROM orders a, orders b, orders c, orders d, orders e, orders f, orders g",
        "max_statement_time",
    ),
}


def test_a_runaway_query_is_stopped_by_the_statement_time_limit(
    db: Shop, monkeypatch: pytest.MonkeyPatch
) -> None:
    seconds, sql, stopped = RUNAWAYS[db.dialect]
    monkeypatch.setattr(_database, "STATEMENT_TIMEOUT_SECONDS", seconds)

    code, message = error_of(query(db.url, sql))

    assert code == "database_error"
    assert stopped in message


# --- writes -----------------------------------------------------------------------------------------

MASS_WRITES = {
    "postgresql": [
        "UPDATE orders SET total = 0 WHERE 1 = 1",
        "UPDATE orders SET total = 0 WHERE id > 0 OR TRUE",
        "DELETE FROM orders WHERE note IS NULL OR note IS NOT NULL",
        "UPDATE orders SET total = 0 WHERE id = id RETURNING id, total",
        "INSERT INTO orders SELECT * FROM orders ON CONFLICT (id) DO UPDATE SET total = 0",
        "UPDATE orders SET total = 0 FROM customers c WHERE c.id = orders.customer_id",
    ],
    "mysql": [
        "UPDATE orders SET total = 0 WHERE 1 = 1",
        "UPDATE orders SET total = 0 WHERE id > 0 OR TRUE",
        "DELETE FROM orders WHERE note IS NULL OR note IS NOT NULL",
        "DELETE FROM orders WHERE id = id RETURNING id",
        "INSERT INTO orders SELECT * FROM orders ON DUPLICATE KEY UPDATE total = 0",
        "REPLACE INTO orders SELECT * FROM orders",
        "UPDATE orders o JOIN customers c ON c.id = o.customer_id SET o.total = 0 WHERE c.id > 0",
    ],
}


@each("sql", MASS_WRITES)
def test_a_mass_write_changes_nothing(db: Shop, sql: str) -> None:
    before = db.rows("SELECT * FROM orders ORDER BY id")

    code, message = error_of(write(db.url, sql, max_rows=5))

    assert code in ("where_required", "too_many_rows", "statement_not_allowed"), message
    assert db.rows("SELECT * FROM orders ORDER BY id") == before


def test_a_write_within_the_limit_commits(db: Shop) -> None:
    result = write(db.url, "UPDATE orders SET total = 0 WHERE id <= 3", max_rows=3)

    assert result.output == {"rows_affected": 3}
    assert db.rows("SELECT COUNT(*) FROM orders WHERE total = 0") == [(3,)]


@on("postgresql")  # MariaDB has RETURNING on DELETE and INSERT only
def test_a_write_within_the_limit_commits_with_its_returning_rows(db: Shop) -> None:
    result = write(db.url, "UPDATE orders SET total = 0 WHERE id <= 3 RETURNING id", max_rows=3)

    assert result.output == {
        "columns": ["id"],
        "rows": [[1], [2], [3]],
        "row_count": 3,
        "rows_affected": 3,
        "truncated": False,
    }
    assert db.rows("SELECT count(*) FROM orders WHERE total = 0") == [(3,)]


@on("mysql")  # PostgreSQL's RETURNING write is limited on the wire instead (the next test)
def test_a_returning_write_is_streamed_and_counted_by_its_rows(db: Shop) -> None:
    within = write(db.url, "DELETE FROM orders WHERE id > 18 RETURNING id", max_rows=3)
    over = write(db.url, "DELETE FROM orders WHERE id > 2 RETURNING id", max_rows=3)

    assert within.output == {
        "columns": ["id"],
        "rows": [[19], [20]],
        "row_count": 2,
        "rows_affected": 2,
        "truncated": False,
    }
    code, message = error_of(over)
    assert code == "too_many_rows"
    assert "more than 3 rows" in message
    assert db.rows("SELECT COUNT(*) FROM orders") == [(18,)]


@on("postgresql")
def test_a_returning_write_past_the_limit_reads_at_most_one_row_more(db: Shop) -> None:
    code, message = error_of(write(db.url, "DELETE FROM orders WHERE id > 0 RETURNING *", max_rows=4))

    assert code == "too_many_rows"
    assert "would change 5 rows" in message  # LIMIT 5 on the wire, not the 20 it deleted
    assert db.rows("SELECT count(*) FROM orders") == [(20,)]


@on("postgresql")  # MariaDB has no WITH clause on a DELETE
def test_a_returning_write_with_its_own_with_clause_is_limited_too(db: Shop) -> None:
    sql = (
        "WITH old AS (SELECT id FROM orders WHERE id > 2) "
        "DELETE FROM orders WHERE id IN (SELECT id FROM old) RETURNING id"
    )

    over = write(db.url, sql, max_rows=3)
    within = write(db.url, sql.replace("id > 2", "id > 18"), max_rows=3)

    assert error_of(over)[0] == "too_many_rows"
    assert within.output is not None, within.error
    assert within.output["rows"] == [[19], [20]]
    assert db.rows("SELECT count(*) FROM orders") == [(18,)]


def test_a_write_that_only_mentions_returning_in_a_string_is_not_wrapped(db: Shop) -> None:
    result = write(db.url, "UPDATE orders SET note = ' returning ' WHERE id = 1")

    assert result.output == {"rows_affected": 1}
    assert db.rows("SELECT note FROM orders WHERE id = 1") == [(" returning ",)]


def test_a_write_to_a_table_the_tool_does_not_allow_is_refused(db: Shop) -> None:
    code, _ = error_of(write(db.url, "UPDATE secret SET value = 'x' WHERE id = 1"))

    assert code == "table_not_allowed"
    assert db.rows("SELECT value FROM secret") == [("the launch codes",)]


# (the upsert, the rows it affected): MySQL counts an upsert's update as two
UPSERTS = {
    "postgresql": (
        "INSERT INTO orders (id, total) VALUES (1, 99) ON CONFLICT (id) DO UPDATE SET total = 99",
        1,
    ),
    "mysql": ("INSERT INTO orders (id, total) VALUES (1, 99) ON DUPLICATE KEY UPDATE total = 99", 2),
}


def test_an_upsert_from_values_stays_allowed(db: Shop) -> None:
    sql, affected = UPSERTS[db.dialect]

    result = write(db.url, sql)

    assert result.output == {"rows_affected": affected}
    assert db.rows("SELECT total FROM orders WHERE id = 1")[0][0] == 99


# --- the connection ---------------------------------------------------------------------------------


def test_loopback_is_refused_unless_explicitly_allowed(db: Shop, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STEPWISE_ALLOW_HOSTS")

    assert error_of(query(db.url, "SELECT 1")) == ("blocked_destination", _db_target.BLOCKED_MESSAGE)


def test_the_driver_connects_to_the_checked_address_without_its_own_lookup(db: Shop) -> None:
    asked: list[str] = []

    def resolver(host: str, port: int) -> list[str]:
        asked.append(host)
        return ["127.0.0.1"]

    # The name never resolves: the connection works only if libpq or PyMySQL used our address.
    result = _database.execute(
        "SELECT count(*) AS n FROM orders",
        tool="database_query",
        tenant_id="t1",
        settings=StaticSettings({"DATABASE_URL": at_unresolvable_host(db.url)}),
        access=database_query.Config(allowed_tables=["orders"]),
        check=_sql.check_query,
        read_only=True,
        resolver=resolver,
    )

    assert result.output is not None, result.error
    assert result.output["rows"] == [[20]]
    assert asked == ["db.stepwise.invalid"]


def test_a_host_that_resolves_to_a_private_address_is_refused_before_any_socket(db: Shop) -> None:
    result = _database.execute(
        "SELECT 1",
        tool="database_query",
        tenant_id="t1",
        settings=StaticSettings({"DATABASE_URL": at_unresolvable_host(db.url)}),
        access=database_query.Config(),
        check=_sql.check_query,
        read_only=True,
        resolver=lambda host, port: ["10.0.0.5"],
    )

    assert error_of(result) == ("blocked_destination", _db_target.BLOCKED_MESSAGE)


def test_every_connect_failure_reads_the_same(db: Shop) -> None:
    closed_port = db.url.replace(f":{db.port}/", ":1/")

    failures = {error_of(query(url, "SELECT 1")) for url in (closed_port, db.no_database, db.refused_login)}

    assert failures == {("database_error", "could not connect to the database")}


# --- database_schema, and the schema a failed query quotes ---------------------------------------------

# Each dialect's lines for the shop's tables (SQLAlchemy's rendering of the reflected types).
SCHEMA_LINES: dict[str, list[str]] = {
    "postgresql": [
        "customers (~2 rows)",
        "  id integer PK",
        "  name text NOT NULL",
        "orders (~20 rows)",
        "  id integer PK",
        "  customer_id integer FK → customers.id",
        "  total numeric(10, 2)",
        "  note text",
    ],
    "mysql": [
        "customers (~2 rows)",
        "  id integer(11) PK",
        "  name text NOT NULL",
        "orders (~20 rows)",
        "  id integer(11) PK",
        "  customer_id integer(11) FK → customers.id",
        "  total decimal(10, 2)",
        "  note text",
    ],
}
ANALYZE = {"postgresql": "ANALYZE customers; ANALYZE orders", "mysql": "ANALYZE TABLE customers, orders"}


def schema_of(db: Shop, **arguments: Any) -> Any:
    from stepwise.tools.builtin import database_schema
    from stepwise.tools.registry import run_builtin

    return run_builtin(
        database_schema.NAME,
        arguments,
        scope=SCOPE,
        settings=StaticSettings({"DATABASE_URL": db.url}),
        config=database_schema.Config(allowed_tables=["orders", "customers"]),
    )


def with_foreign_key(db: Shop) -> None:
    db.admin(
        "ALTER TABLE orders ADD CONSTRAINT orders_customer "
        "FOREIGN KEY (customer_id) REFERENCES customers (id)"
    )
    db.admin(ANALYZE[db.dialect])


def test_the_schema_lists_the_allowed_tables_columns_keys_and_row_estimates(db: Shop) -> None:
    with_foreign_key(db)

    result = schema_of(db)
    one = schema_of(db, table="orders")
    refused = schema_of(db, table="secret")

    assert result.ok, result.error
    heading, *lines = result.output.splitlines()
    assert heading.startswith("2 tables (")
    assert lines == SCHEMA_LINES[db.dialect]  # sorted tables, columns in their order; `secret` is not there
    assert one.output.splitlines() == SCHEMA_LINES[db.dialect][3:]
    assert error_of(refused)[0] == "unknown_table" and "customers, orders" in error_of(refused)[1]


def test_the_schema_is_cached_until_a_table_changes(db: Shop, monkeypatch: pytest.MonkeyPatch) -> None:
    from sqlalchemy.engine import Engine

    from stepwise.tools.builtin import _schema

    _schema.clear()
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    event.listen(Engine, "before_cursor_execute", seen)
    try:
        first = schema_of(db)
        cold = len(statements)
        statements.clear()
        again = schema_of(db)
        warm = len(statements)
        db.admin("ALTER TABLE customers ADD COLUMN email text")
        changed = schema_of(db)
    finally:
        event.remove(Engine, "before_cursor_execute", seen)

    assert again.output == first.output
    assert warm < cold  # the version query and the transaction's bounds only
    assert "  email text" in changed.output.splitlines()


# A misspelled column, as a model writes it; the driver's words for it.
MISSPELLED = {"postgresql": "column o.totl does not exist", "mysql": "Unknown column 'o.totl'"}


def test_a_failed_query_quotes_the_driver_and_the_schema_of_the_tables_it_names(db: Shop) -> None:
    with_foreign_key(db)

    failed = query(db.url, "SELECT o.totl FROM orders o WHERE o.id < 3")
    repaired = query(db.url, "SELECT o.total FROM orders o WHERE o.id < 3")

    code, message = error_of(failed)
    assert code == "database_error" and MISSPELLED[db.dialect] in message
    quoted = message.split("The tables it names:\n", 1)[1].splitlines()
    assert quoted == SCHEMA_LINES[db.dialect][3:]  # orders only: the statement names no other table
    assert repaired.ok and repaired.output["row_count"] == 2


def test_a_statement_the_checks_refuse_quotes_no_schema(db: Shop) -> None:
    refused = query(db.url, "SELECT * FROM secret")

    assert "The tables it names" not in error_of(refused)[1]
