"""database_query and database_write against a real PostgreSQL started for this module (tests/fakes/
postgres.py): the SQL guard's attack forms, the write limit, streaming, timeouts and the connection's
SSRF guard, on the database where they matter."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
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
from tests.fakes.postgres import Cluster, cluster
from tests.integration.database_tools import error_of, query, unchecked_query, write

SCHEMA = """
    DROP TABLE IF EXISTS customers, orders, secret;
    CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL);
    CREATE TABLE orders (id int PRIMARY KEY, customer_id int, total numeric(10, 2), note text);
    CREATE TABLE secret (id int PRIMARY KEY, value text);
    DROP SEQUENCE IF EXISTS counter;
    CREATE SEQUENCE counter;
    INSERT INTO customers VALUES (1, 'Ada'), (2, 'Grace');
    INSERT INTO orders SELECT n, 1 + n % 2, n * 1.5, 'note ' || n FROM generate_series(1, 20) AS n;
    INSERT INTO secret VALUES (1, 'the launch codes');
"""


@pytest.fixture(scope="module")
def postgres() -> Iterator[Cluster]:
    with cluster() as running:
        running.sql("CREATE DATABASE shop")
        yield running


@pytest.fixture
def shop(postgres: Cluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    # The same explicit exemption the local stack and the other outbound tests use for loopback peers.
    monkeypatch.setenv("STEPWISE_ALLOW_HOSTS", "127.0.0.1")
    postgres.sql(SCHEMA, database="shop")
    yield postgres.url(database="shop")
    _database.engine_for.cache_clear()


def rows(cluster_: Cluster, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(host="127.0.0.1", port=cluster_.port, user=cluster_.superuser, dbname="shop") as c:
        return c.execute(sql.encode()).fetchall()


# --- reads ------------------------------------------------------------------------------------------


def test_a_reporting_query_runs_on_postgresql(shop: str) -> None:
    result = query(
        shop,
        "SELECT c.name, count(*) AS orders, sum(o.total) AS spent, round(avg(o.total), 2) AS mean, "
        "string_agg(o.id::text, ',' ORDER BY o.id) FILTER (WHERE o.id <= 4) AS first_ids, "
        "date_trunc('day', now())::date = current_date AS today, coalesce(max(o.note), '-') AS last_note "
        "FROM orders o JOIN customers c ON c.id = o.customer_id GROUP BY c.name ORDER BY c.name",
    )

    assert result.output is not None, result.error
    assert result.output["columns"] == ["name", "orders", "spent", "mean", "first_ids", "today", "last_note"]
    assert result.output["rows"] == [
        ["Ada", 10, "165.00", "16.50", "2,4", True, "note 8"],
        ["Grace", 10, "150.00", "15.00", "1,3", True, "note 9"],
    ]


ATTACKS = [
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
]


@pytest.mark.parametrize("sql", ATTACKS)
def test_each_attack_form_is_refused_on_postgresql(shop: str, sql: str) -> None:
    code, message = error_of(query(shop, sql))

    assert code in ("function_not_allowed", "table_not_allowed"), message


def test_the_attack_is_real_without_the_guard(shop: str) -> None:
    leaked = unchecked_query(shop, "SELECT query_to_xml('SELECT * FROM secret', true, true, '')::text AS x")

    assert leaked.output is not None, leaked.error
    assert "the launch codes" in leaked.output["rows"][0][0]


def test_reads_are_read_only_even_unchecked(shop: str, postgres: Cluster) -> None:
    # a DML statement cannot even be a server-side cursor's query; a writing function can
    code, message = error_of(unchecked_query(shop, "SELECT nextval('counter')"))

    assert code == "database_error"
    assert "read-only transaction" in message
    assert rows(postgres, "SELECT last_value, is_called FROM counter") == [(1, False)]


def test_a_read_streams_through_a_server_side_cursor_and_stops_at_the_cap(shop: str) -> None:
    cursors: list[object] = []
    url = _db_target.checked_url(_database.make_url(shop), "t1")
    engine = _database.engine_for(url, system_resolver)  # the engine execute() builds and caches
    event.listen(engine, "before_cursor_execute", lambda conn, cursor, *rest: cursors.append(cursor))

    result = query(shop, "SELECT o.id, o.note FROM orders o, customers, orders o2, orders o3, orders o4")

    assert result.output is not None, result.error
    assert result.output["truncated"] is True  # 20 * 2 * 20 * 20 * 20 = 320,000 rows, cut long before
    assert any(isinstance(c, psycopg.ServerCursor) for c in cursors), cursors


def test_a_runaway_query_is_stopped_by_statement_timeout(shop: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_database, "STATEMENT_TIMEOUT_SECONDS", 0.2)

    code, message = error_of(
        query(shop, "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT max(x) FROM n")
    )

    assert code == "database_error"
    assert "statement timeout" in message


# --- writes -----------------------------------------------------------------------------------------

MASS_WRITES = [
    "UPDATE orders SET total = 0 WHERE 1 = 1",
    "UPDATE orders SET total = 0 WHERE id > 0 OR TRUE",
    "DELETE FROM orders WHERE note IS NULL OR note IS NOT NULL",
    "UPDATE orders SET total = 0 WHERE id = id RETURNING id, total",
    "INSERT INTO orders SELECT * FROM orders ON CONFLICT (id) DO UPDATE SET total = 0",
    "UPDATE orders SET total = 0 FROM customers c WHERE c.id = orders.customer_id",
]


@pytest.mark.parametrize("sql", MASS_WRITES)
def test_a_mass_write_changes_nothing_on_postgresql(shop: str, postgres: Cluster, sql: str) -> None:
    before = rows(postgres, "SELECT * FROM orders ORDER BY id")

    code, message = error_of(write(shop, sql, max_rows=5))

    assert code in ("where_required", "too_many_rows", "statement_not_allowed"), message
    assert rows(postgres, "SELECT * FROM orders ORDER BY id") == before


def test_a_write_within_the_limit_commits_with_its_returning_rows(shop: str, postgres: Cluster) -> None:
    result = write(shop, "UPDATE orders SET total = 0 WHERE id <= 3 RETURNING id", max_rows=3)

    assert result.output == {
        "columns": ["id"],
        "rows": [[1], [2], [3]],
        "row_count": 3,
        "rows_affected": 3,
        "truncated": False,
    }
    assert rows(postgres, "SELECT count(*) FROM orders WHERE total = 0") == [(3,)]


def test_a_returning_write_past_the_limit_reads_at_most_one_row_more(shop: str, postgres: Cluster) -> None:
    code, message = error_of(write(shop, "DELETE FROM orders WHERE id > 0 RETURNING *", max_rows=4))

    assert code == "too_many_rows"
    assert "would change 5 rows" in message  # LIMIT 5 on the wire, not the 20 it deleted
    assert rows(postgres, "SELECT count(*) FROM orders") == [(20,)]


def test_a_returning_write_with_its_own_with_clause_is_limited_too(shop: str, postgres: Cluster) -> None:
    sql = (
        "WITH old AS (SELECT id FROM orders WHERE id > 2) "
        "DELETE FROM orders WHERE id IN (SELECT id FROM old) RETURNING id"
    )

    over = write(shop, sql, max_rows=3)
    within = write(shop, sql.replace("id > 2", "id > 18"), max_rows=3)

    assert error_of(over)[0] == "too_many_rows"
    assert within.output is not None, within.error
    assert within.output["rows"] == [[19], [20]]
    assert rows(postgres, "SELECT count(*) FROM orders") == [(18,)]


def test_a_write_that_only_mentions_returning_in_a_string_is_not_wrapped(
    shop: str, postgres: Cluster
) -> None:
    result = write(shop, "UPDATE orders SET note = ' returning ' WHERE id = 1")

    assert result.output == {"rows_affected": 1}
    assert rows(postgres, "SELECT note FROM orders WHERE id = 1") == [(" returning ",)]


def test_an_upsert_from_values_stays_allowed(shop: str, postgres: Cluster) -> None:
    result = write(
        shop, "INSERT INTO orders (id, total) VALUES (1, 99) ON CONFLICT (id) DO UPDATE SET total = 99"
    )

    assert result.output == {"rows_affected": 1}
    assert rows(postgres, "SELECT total FROM orders WHERE id = 1")[0][0] == 99


# --- the connection ---------------------------------------------------------------------------------


def test_loopback_is_refused_unless_explicitly_allowed(shop: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STEPWISE_ALLOW_HOSTS")

    assert error_of(query(shop, "SELECT 1")) == ("blocked_destination", _db_target.BLOCKED_MESSAGE)


def test_libpq_connects_to_the_checked_address_without_its_own_lookup(shop: str, postgres: Cluster) -> None:
    asked: list[str] = []

    def resolver(host: str, port: int) -> list[str]:
        asked.append(host)
        return ["127.0.0.1"]

    # `.invalid` never resolves (RFC 6761): the connection works only if libpq used our address.
    url = f"postgresql://{postgres.superuser}@db.stepwise.invalid:{postgres.port}/shop"
    result = _database.execute(
        "SELECT count(*) AS n FROM orders",
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


def test_every_connect_failure_reads_the_same(shop: str, postgres: Cluster) -> None:
    closed_port = postgres.url(database="shop").replace(f":{postgres.port}/", ":1/")
    no_database = postgres.url(database="nope")
    no_user = postgres.url(user="nobody_here", database="shop")

    failures = {error_of(query(url, "SELECT 1")) for url in (closed_port, no_database, no_user)}

    assert failures == {("database_error", "could not connect to the database")}
