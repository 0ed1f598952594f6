"""database_query and database_write against a real MariaDB started for this module (tests/fakes/
mysql.py), connected over TCP as a user with a password, the way a tenant's DATABASE_URL does: the SQL
guard's MySQL forms, read-only reads, the write limit, streaming, timeouts and the connection's SSRF
guard. (MariaDB is what Debian ships; the MySQL-only branch, max_execution_time, has no live test.)"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

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
from tests.integration.database_tools import error_of, query, unchecked_query, write

PASSWORD = "agent-password-1"
SCHEMA = """
    DROP TABLE IF EXISTS customers, orders, secret;
    CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL) ENGINE=InnoDB;
    CREATE TABLE orders (id int PRIMARY KEY, customer_id int, total decimal(10, 2), note text) ENGINE=InnoDB;
    CREATE TABLE secret (id int PRIMARY KEY, value text) ENGINE=InnoDB;
    INSERT INTO customers VALUES (1, 'Ada'), (2, 'Grace');
    INSERT INTO orders SELECT seq, 1 + seq % 2, seq * 1.5, CONCAT('note ', seq) FROM seq_1_to_20;
    INSERT INTO secret VALUES (1, 'the launch codes')
"""


@pytest.fixture(scope="module")
def mariadb() -> Iterator[Server]:
    with server() as running:
        # The agent's role as _database's docstring says to grant it: more than the tools allow (it may
        # read `secret` and write everywhere), so what the tests see refused is the guard's doing.
        running.sql(
            f"CREATE DATABASE shop; CREATE USER 'agent'@'%' IDENTIFIED BY '{PASSWORD}';"
            "GRANT SELECT, INSERT, UPDATE, DELETE ON shop.* TO 'agent'@'%'"
        )
        yield running


@pytest.fixture
def shop(mariadb: Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("STEPWISE_ALLOW_HOSTS", "127.0.0.1")
    mariadb.sql(SCHEMA, database="shop")
    yield mariadb.url("agent", PASSWORD, "shop")
    _database.engine_for.cache_clear()


def rows(mariadb: Server, sql: str) -> list[tuple[Any, ...]]:
    return mariadb.sql(sql, database="shop")


# --- reads ------------------------------------------------------------------------------------------


def test_a_reporting_query_runs_on_mysql(shop: str) -> None:
    result = query(
        shop,
        "SELECT c.name, COUNT(*) AS orders, SUM(o.total) AS spent, ROUND(AVG(o.total), 2) AS mean, "
        "GROUP_CONCAT(o.id ORDER BY o.id SEPARATOR ',') AS ids, IFNULL(MAX(o.note), '-') AS last_note, "
        "DATE_FORMAT(NOW(), '%Y') = YEAR(CURDATE()) AS this_year, IF(COUNT(*) > 5, 'many', 'few') AS size "
        "FROM orders o JOIN customers c ON c.id = o.customer_id WHERE o.id <= 6 "
        "GROUP BY c.name ORDER BY c.name",
    )

    assert result.output is not None, result.error
    assert result.output["columns"] == [
        "name",
        "orders",
        "spent",
        "mean",
        "ids",
        "last_note",
        "this_year",
        "size",
    ]
    assert result.output["rows"] == [
        ["Ada", 3, "18.00", "6.00", "2,4,6", "note 6", 1, "few"],
        ["Grace", 3, "13.50", "4.50", "1,3,5", "note 5", 1, "few"],
    ]


ATTACKS = [
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
]


@pytest.mark.parametrize("sql", ATTACKS)
def test_each_attack_form_is_refused_on_mysql(shop: str, sql: str) -> None:
    code, message = error_of(query(shop, sql))

    assert code in ("function_not_allowed", "table_not_allowed", "statement_not_allowed", "invalid_query"), (
        code,
        message,
    )


def test_the_attacks_are_real_without_the_guard(shop: str) -> None:
    leaked = unchecked_query(shop, "SELECT value FROM secret")
    setting = unchecked_query(shop, "SELECT @@datadir AS d")

    assert leaked.output is not None and leaked.output["rows"] == [["the launch codes"]], leaked.error
    assert setting.output is not None and setting.output["rows"][0][0].endswith("/data/"), setting.error


def test_reads_are_read_only_even_unchecked(shop: str, mariadb: Server) -> None:
    code, message = error_of(unchecked_query(shop, "DELETE FROM orders WHERE id = 1"))

    assert code == "database_error"
    assert "READ ONLY transaction" in message
    assert rows(mariadb, "SELECT COUNT(*) FROM orders") == [(20,)]


def test_a_read_streams_through_an_unbuffered_cursor_and_stops_at_the_cap(shop: str) -> None:
    cursors: list[object] = []
    url = _db_target.checked_url(_database.make_url(shop), "t1")
    engine = _database.engine_for(url, system_resolver)  # the engine execute() builds and caches
    event.listen(engine, "before_cursor_execute", lambda conn, cursor, *rest: cursors.append(cursor))

    result = query(shop, "SELECT o.id, o.note FROM orders o, customers, orders o2, orders o3, orders o4")

    assert result.output is not None, result.error
    assert result.output["truncated"] is True  # 320,000 rows, cut long before
    assert any(isinstance(c, pymysql.cursors.SSCursor) for c in cursors), cursors


def test_a_runaway_query_is_stopped_by_the_statement_time_limit(
    shop: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_database, "STATEMENT_TIMEOUT_SECONDS", 1)

    code, message = error_of(
        query(
            shop, "SELECT COUNT(*) FROM orders a, orders b, orders c, orders d, orders e, orders f, orders g"
        )
    )

    assert code == "database_error"
    assert "max_statement_time" in message


# --- writes -----------------------------------------------------------------------------------------

MASS_WRITES = [
    "UPDATE orders SET total = 0 WHERE 1 = 1",
    "UPDATE orders SET total = 0 WHERE id > 0 OR TRUE",
    "DELETE FROM orders WHERE note IS NULL OR note IS NOT NULL",
    "DELETE FROM orders WHERE id = id RETURNING id",
    "INSERT INTO orders SELECT * FROM orders ON DUPLICATE KEY UPDATE total = 0",
    "REPLACE INTO orders SELECT * FROM orders",
    "UPDATE orders o JOIN customers c ON c.id = o.customer_id SET o.total = 0 WHERE c.id > 0",
]


@pytest.mark.parametrize("sql", MASS_WRITES)
def test_a_mass_write_changes_nothing_on_mysql(shop: str, mariadb: Server, sql: str) -> None:
    before = rows(mariadb, "SELECT * FROM orders ORDER BY id")

    code, message = error_of(write(shop, sql, max_rows=5))

    assert code in ("where_required", "too_many_rows", "statement_not_allowed"), message
    assert rows(mariadb, "SELECT * FROM orders ORDER BY id") == before


def test_a_write_within_the_limit_commits(shop: str, mariadb: Server) -> None:
    result = write(shop, "UPDATE orders SET total = 0 WHERE id <= 3", max_rows=3)

    assert result.output == {"rows_affected": 3}
    assert rows(mariadb, "SELECT COUNT(*) FROM orders WHERE total = 0") == [(3,)]


def test_a_returning_write_is_streamed_and_counted_by_its_rows(shop: str, mariadb: Server) -> None:
    within = write(shop, "DELETE FROM orders WHERE id > 18 RETURNING id", max_rows=3)
    over = write(shop, "DELETE FROM orders WHERE id > 2 RETURNING id", max_rows=3)

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
    assert rows(mariadb, "SELECT COUNT(*) FROM orders") == [(18,)]


def test_a_write_to_a_table_the_tool_does_not_allow_is_refused(shop: str, mariadb: Server) -> None:
    code, _ = error_of(write(shop, "UPDATE secret SET value = 'x' WHERE id = 1"))

    assert code == "table_not_allowed"
    assert rows(mariadb, "SELECT value FROM secret") == [("the launch codes",)]


def test_an_upsert_from_values_stays_allowed(shop: str, mariadb: Server) -> None:
    result = write(shop, "INSERT INTO orders (id, total) VALUES (1, 99) ON DUPLICATE KEY UPDATE total = 99")

    assert result.output == {"rows_affected": 2}  # MySQL counts an upsert's update as two
    assert rows(mariadb, "SELECT total FROM orders WHERE id = 1")[0][0] == 99


# --- the connection ---------------------------------------------------------------------------------


def test_loopback_is_refused_unless_explicitly_allowed(shop: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STEPWISE_ALLOW_HOSTS")

    assert error_of(query(shop, "SELECT 1")) == ("blocked_destination", _db_target.BLOCKED_MESSAGE)


def test_pymysql_connects_to_the_checked_address_without_its_own_lookup(shop: str, mariadb: Server) -> None:
    asked: list[str] = []

    def resolver(host: str, port: int) -> list[str]:
        asked.append(host)
        return ["127.0.0.1"]

    # `.invalid` never resolves (RFC 6761): the connection works only if PyMySQL used our address.
    url = f"mysql://agent:{PASSWORD}@db.stepwise.invalid:{mariadb.port}/shop"
    result = _database.execute(
        "SELECT COUNT(*) AS n FROM orders",
        tool="database_query",
        tenant_id="t1",
        settings=StaticSettings({"DATABASE_URL": url}),
        access=database_query.Config(allowed_tables=["orders"]),
        check=_sql.check_query,
        read_only=True,
        resolver=resolver,
    )

    assert result.output is not None, result.error
    assert result.output["rows"] == [[20]]
    assert asked == ["db.stepwise.invalid"]


def test_a_host_that_resolves_to_a_private_address_is_refused_before_any_socket(shop: str) -> None:
    url = f"mysql://agent:{PASSWORD}@db.stepwise.invalid:3306/shop"
    result = _database.execute(
        "SELECT 1",
        tool="database_query",
        tenant_id="t1",
        settings=StaticSettings({"DATABASE_URL": url}),
        access=database_query.Config(),
        check=_sql.check_query,
        read_only=True,
        resolver=lambda host, port: ["10.0.0.5"],
    )

    assert error_of(result) == ("blocked_destination", _db_target.BLOCKED_MESSAGE)


def test_every_connect_failure_reads_the_same(shop: str, mariadb: Server) -> None:
    closed_port = shop.replace(f":{mariadb.port}/", ":1/")
    no_database = mariadb.url("agent", PASSWORD, "nope")
    wrong_password = mariadb.url("agent", "wrong-password", "shop")

    failures = {error_of(query(url, "SELECT 1")) for url in (closed_port, no_database, wrong_password)}

    assert failures == {("database_error", "could not connect to the database")}
