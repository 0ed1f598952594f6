"""The data builtins (database_query, database_write, storage_read, storage_write, knowledge_search)
without a database, S3 or Bedrock: their shape and schemas, the SQL checks, path normalization, and
knowledge_search against an in-memory fake of Bedrock's Retrieve."""

from __future__ import annotations

import inspect
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from jsonschema import Draft202012Validator
from pydantic import BaseModel, ValidationError
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from stepwise.core import s3
from stepwise.llm.fake_args import example_arguments
from stepwise.tools.base import ToolResult
from stepwise.tools.builtin import (
    StaticSettings,
    ToolScope,
    _database,
    _db_target,
    _provider,
    _sql,
    _storage,
    database_query,
    database_write,
    knowledge_search,
    storage_read,
    storage_write,
)
from stepwise.tools.registry import builtin_arguments, run_builtin

SCOPE = ToolScope("t1", "a1", "r1", "s1")
TOOLS = [database_query, database_write, storage_read, storage_write, knowledge_search]
SQLITE = _sql.FLAVORS["sqlite"]
POSTGRES = _sql.FLAVORS["postgresql"]
MYSQL = _db_target.flavor_of(make_url("mysql://app@db.example/shop"))  # unqualified tables are in shop


def error_of(result: ToolResult) -> tuple[str, str]:
    assert result.error is not None, f"expected an error, got {result.output!r}"
    return result.error.code, result.error.message


def allow(flavor: _sql.Flavor, tables: list[str], schemas: list[str] | None = None) -> _sql.Allowlist:
    return _sql.Allowlist(database_query.Config(allowed_tables=tables, allowed_schemas=schemas or []), flavor)


# --- The module shape ---------------------------------------------------------------------------


@pytest.mark.parametrize("tool", TOOLS, ids=lambda m: m.NAME)
def test_every_tool_exports_the_builtin_shape(tool: ModuleType) -> None:
    assert tool.__name__.rsplit(".", 1)[1] == tool.NAME
    assert isinstance(tool.DESCRIPTION, str) and tool.DESCRIPTION
    assert isinstance(tool.READ_ONLY, bool)
    assert tool.EFFECT in ("none", "idempotent", "undeclared")
    assert tool.KEY_FIELDS == []
    assert issubclass(tool.Config, BaseModel)
    params = inspect.signature(tool.run).parameters
    assert list(params)[:4] == ["arguments", "scope", "settings", "config"]
    assert all(
        params[name].kind is inspect.Parameter.KEYWORD_ONLY for name in ("scope", "settings", "config")
    )


@pytest.mark.parametrize("tool", TOOLS, ids=lambda m: m.NAME)
def test_input_schemas_are_valid_json_schema_and_the_scripted_model_can_satisfy_them(
    tool: ModuleType,
) -> None:
    Draft202012Validator.check_schema(tool.INPUT_SCHEMA)
    assert tool.INPUT_SCHEMA["type"] == "object"
    assert tool.INPUT_SCHEMA["additionalProperties"] is False

    assert _provider.invalid_arguments(tool.INPUT_SCHEMA, example_arguments(tool.INPUT_SCHEMA)) is None


def test_listing_the_tools_loads_neither_sqlglot_nor_sqlalchemy() -> None:
    probe = (
        "import sys\n"
        "from stepwise.tools.builtin import database_query, database_write, storage_read, storage_write\n"
        "from stepwise.tools.builtin import knowledge_search\n"
        "database_query.Config()\n"
        "print(sorted(m for m in ('sqlglot', 'sqlalchemy') if m in sys.modules))\n"
    )

    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )

    assert out.stdout.strip() == "[]"


def test_reads_are_parallel_safe_and_pure_writes_are_not() -> None:
    assert (database_query.READ_ONLY, database_query.EFFECT) == (True, "none")
    assert (database_write.READ_ONLY, database_write.EFFECT) == (False, "undeclared")
    assert (storage_read.READ_ONLY, storage_read.EFFECT) == (True, "none")
    assert (storage_write.READ_ONLY, storage_write.EFFECT) == (False, "undeclared")
    assert (knowledge_search.READ_ONLY, knowledge_search.EFFECT) == (True, "none")


def test_only_knowledge_search_is_exempt_from_the_result_cut() -> None:
    assert knowledge_search.TRUNCATE is False
    assert all(getattr(tool, "TRUNCATE", True) for tool in TOOLS if tool is not knowledge_search)


# --- SQL: what database_query runs ----------------------------------------------------------------

QUERY_REFUSED = [
    # several statements, however they are hidden
    (SQLITE, "SELECT 1; SELECT 2", "invalid_query"),
    (SQLITE, "SELECT * FROM orders; DROP TABLE orders", "invalid_query"),
    (SQLITE, "SELECT * FROM orders /* harmless */ ; DELETE FROM orders WHERE id = 1", "invalid_query"),
    (SQLITE, "SELECT 1 /* /* */ ; DROP TABLE orders */", "invalid_query"),  # SQLite comments do not nest
    (POSTGRES, "SELECT E'\\''; DROP TABLE orders; --'", "invalid_query"),
    (SQLITE, "", "invalid_query"),
    (SQLITE, " ; ; ", "invalid_query"),
    (SQLITE, "-- only a comment", "invalid_query"),
    (SQLITE, "SELEC * FROM orders", "invalid_query"),
    (SQLITE, "SELECT " + "(" * 3000 + "1" + ")" * 3000, "invalid_query"),
    # anything but a SELECT
    (SQLITE, "DROP TABLE orders", "statement_not_allowed"),
    (SQLITE, "CREATE TABLE copy AS SELECT * FROM orders", "statement_not_allowed"),
    (SQLITE, "ALTER TABLE orders ADD COLUMN x INT", "statement_not_allowed"),
    (SQLITE, "PRAGMA query_only = OFF", "statement_not_allowed"),
    (SQLITE, "PRAGMA table_info(orders)", "statement_not_allowed"),
    (SQLITE, "ATTACH DATABASE '/tmp/other.db' AS other", "statement_not_allowed"),
    (SQLITE, "DETACH other", "statement_not_allowed"),
    (SQLITE, "VACUUM", "statement_not_allowed"),
    (SQLITE, "INSERT INTO orders VALUES (1)", "statement_not_allowed"),
    (SQLITE, "UPDATE orders SET total = 0 WHERE id = 1", "statement_not_allowed"),
    (SQLITE, "DELETE FROM orders WHERE id = 1", "statement_not_allowed"),
    (SQLITE, "BEGIN", "statement_not_allowed"),
    (SQLITE, "VALUES (1)", "statement_not_allowed"),
    (POSTGRES, "SET TRANSACTION READ WRITE", "statement_not_allowed"),
    (POSTGRES, "COPY orders TO '/tmp/orders.csv'", "statement_not_allowed"),
    (POSTGRES, "SELECT * INTO stolen FROM orders", "statement_not_allowed"),
    (POSTGRES, "SELECT * FROM orders FOR UPDATE", "statement_not_allowed"),
    (POSTGRES, "WITH gone AS (DELETE FROM orders RETURNING *) SELECT * FROM gone", "statement_not_allowed"),
    # tables off the allowlist, wherever they appear
    (SQLITE, "SELECT * FROM secret", "table_not_allowed"),
    (SQLITE, "SELECT * FROM orders o JOIN secret s ON s.id = o.id", "table_not_allowed"),
    (SQLITE, "SELECT * FROM orders o LEFT JOIN (SELECT * FROM secret) s ON 1 = 1", "table_not_allowed"),
    (SQLITE, "SELECT * FROM orders WHERE id IN (SELECT id FROM secret)", "table_not_allowed"),
    (SQLITE, "SELECT (SELECT max(x) FROM secret) FROM orders", "table_not_allowed"),
    (SQLITE, "SELECT id FROM orders UNION SELECT id FROM secret", "table_not_allowed"),
    (SQLITE, "WITH x AS (SELECT * FROM secret) SELECT * FROM x", "table_not_allowed"),
    # a CTE's name only covers its own scope...
    (
        SQLITE,
        "SELECT * FROM secret WHERE id IN (WITH secret AS (SELECT 1) SELECT * FROM secret)",
        "table_not_allowed",
    ),
    # ...and a later CTE's name does not cover an earlier one's body...
    (SQLITE, "WITH a AS (SELECT * FROM secret), secret AS (SELECT 1) SELECT * FROM a", "table_not_allowed"),
    # ...nor, without RECURSIVE, its own
    (SQLITE, "WITH secret AS (SELECT * FROM secret) SELECT * FROM secret", "table_not_allowed"),
    (SQLITE, "SELECT * FROM other.orders", "table_not_allowed"),
    (SQLITE, "SELECT * FROM temp.orders", "table_not_allowed"),
    (SQLITE, "SELECT * FROM sqlite_master", "table_not_allowed"),
    (SQLITE, "SELECT * FROM pragma_table_info('secret')", "table_not_allowed"),
    (SQLITE, "SELECT * FROM json_each('[1]')", "table_not_allowed"),
    # quoting tricks: the database would read these as other tables
    (SQLITE, 'SELECT * FROM "main.orders"', "table_not_allowed"),
    (SQLITE, 'SELECT * FROM "orders "', "table_not_allowed"),
    (SQLITE, 'SELECT * FROM "\u212aeys"', "table_not_allowed"),  # Kelvin sign, not a K
    (POSTGRES, 'SELECT * FROM "Orders"', "table_not_allowed"),
    (POSTGRES, 'SELECT * FROM "public.orders"', "table_not_allowed"),
    (POSTGRES, "SELECT * FROM shop.public.orders", "table_not_allowed"),
    (POSTGRES, "SELECT * FROM pg_user", "table_not_allowed"),
    (POSTGRES, "SELECT * FROM information_schema.tables", "table_not_allowed"),
    (POSTGRES, "SELECT * FROM generate_series(1, 3)", "table_not_allowed"),
    # SQLite's `expr IN table`: a table lookup that sqlglot keeps as a column
    (SQLITE, "SELECT * FROM orders WHERE id IN secret", "table_not_allowed"),
    (SQLITE, "SELECT * FROM orders WHERE id NOT IN main.secret", "table_not_allowed"),
    (SQLITE, "SELECT * FROM orders WHERE id IN temp.orders", "table_not_allowed"),
    (SQLITE, "SELECT * FROM orders WHERE id IN sqlite_master", "table_not_allowed"),
    (SQLITE, "SELECT * FROM orders WHERE id IN pragma_table_info('secret')", "table_not_allowed"),
    (SQLITE, "SELECT * FROM orders WHERE id IN json_each('[1]')", "table_not_allowed"),
    # table-valued and set-returning functions, in FROM, under LATERAL or in the select list
    (POSTGRES, "SELECT * FROM orders, LATERAL query_to_xml('SELECT * FROM secret', true, true, '') x", None),
    (POSTGRES, "SELECT * FROM orders CROSS JOIN LATERAL generate_series(1, 3) g", "table_not_allowed"),
    (POSTGRES, "SELECT * FROM orders o JOIN LATERAL (SELECT * FROM secret) s ON true", "table_not_allowed"),
    (POSTGRES, "SELECT * FROM orders o, json_to_record(o.j) AS r(a int)", "table_not_allowed"),
    (POSTGRES, "SELECT * FROM ROWS FROM (generate_series(1, 2))", "table_not_allowed"),
    (POSTGRES, "SELECT * FROM XMLTABLE('/x' PASSING '<x/>' COLUMNS a int)", "table_not_allowed"),
    (POSTGRES, "SELECT * FROM unnest(ARRAY[1, 2]) u", "table_not_allowed"),
    (POSTGRES, "SELECT unnest(ARRAY[1, 2])", "function_not_allowed"),
    (POSTGRES, "SELECT generate_series(1, 3)", "function_not_allowed"),
    (POSTGRES, "SELECT id FROM orders WHERE id IN (SELECT jsonb_array_elements_text('[1]'))", None),
    # settings and activity
    (POSTGRES, "SELECT * FROM pg_settings", "table_not_allowed"),
    (POSTGRES, "SELECT name, setting FROM pg_catalog.pg_settings", "table_not_allowed"),
    (POSTGRES, "SELECT current_setting('search_path')", "function_not_allowed"),
    (POSTGRES, "SELECT * FROM orders WHERE current_setting('is_superuser') = 'on'", "function_not_allowed"),
    (POSTGRES, "SELECT * FROM pg_stat_activity", "table_not_allowed"),
    (POSTGRES, "SELECT query FROM pg_stat_get_activity(NULL)", "table_not_allowed"),
    (POSTGRES, "SELECT pg_stat_get_activity(NULL)", "function_not_allowed"),
    (POSTGRES, "SELECT version()", "function_not_allowed"),
    # functions that name a table or run SQL text, and their disguises
    (POSTGRES, "SELECT xpath('/row', query_to_xml('SELECT * FROM secret', true, false, ''))", None),
    (POSTGRES, "SELECT cursor_to_xml('c', 10, true, false, '')", "function_not_allowed"),
    (POSTGRES, "SELECT table_to_xml('secret', true, false, '')", "function_not_allowed"),
    (POSTGRES, "SELECT ts_stat('SELECT v FROM secret')", "function_not_allowed"),
    (POSTGRES, "SELECT has_table_privilege('secret', 'SELECT')", "function_not_allowed"),
    (POSTGRES, "SELECT pg_relation_size('secret')", "function_not_allowed"),
    (POSTGRES, "SELECT to_regclass('secret')", "function_not_allowed"),
    (POSTGRES, "SELECT 'secret'::regclass", "function_not_allowed"),
    (POSTGRES, "SELECT CAST(id AS my_type) FROM orders", "function_not_allowed"),
    (POSTGRES, "SELECT nextval('orders_id_seq')", "function_not_allowed"),
    (POSTGRES, "SELECT pg_catalog.query_to_xml('SELECT 1', true, true, '')", "function_not_allowed"),
    (POSTGRES, "SELECT pg_catalog.lower(note) FROM orders", "function_not_allowed"),
    (POSTGRES, "SELECT public.lower(note) FROM orders", "function_not_allowed"),
    (POSTGRES, "SELECT \"QUERY_TO_XML\"('SELECT 1', true, true, '')", "function_not_allowed"),
    # output sizes the caller chooses
    (POSTGRES, "SELECT repeat('x', 1000000000)", "function_not_allowed"),
    (POSTGRES, "SELECT lpad('x', 1000000000)", "function_not_allowed"),
    (SQLITE, "SELECT zeroblob(1000000000)", "function_not_allowed"),
    (SQLITE, "SELECT printf('%.*c', 1000000000, 'x')", "function_not_allowed"),
    (SQLITE, "SELECT sqlite_version()", "function_not_allowed"),
    (SQLITE, "SELECT readfile('/etc/passwd')", "function_not_allowed"),
    (SQLITE, "SELECT fts3_tokenizer('simple')", "function_not_allowed"),
    # functions that would read past the allowlist
    (POSTGRES, "SELECT query_to_xml('SELECT * FROM secret', true, true, '')", "function_not_allowed"),
    (POSTGRES, "SELECT pg_read_file('/etc/passwd')", "function_not_allowed"),
    (POSTGRES, "SELECT * FROM orders WHERE id = (SELECT count(*) FROM dblink('x', 'y') AS t(n int))", None),
    (POSTGRES, "SELECT set_config('search_path', 'private', false)", "function_not_allowed"),
    (POSTGRES, "SELECT pg_sleep(100)", "function_not_allowed"),
    (SQLITE, "SELECT load_extension('/tmp/evil.so')", "function_not_allowed"),
    # MySQL: files, settings, waits, session state, catalog and table functions
    (MYSQL, "SELECT LOAD_FILE('/etc/passwd')", "function_not_allowed"),
    (MYSQL, "SELECT @@datadir", "statement_not_allowed"),
    (MYSQL, "SELECT @@session.sql_mode", "statement_not_allowed"),
    (MYSQL, "SELECT @v := id FROM orders", "statement_not_allowed"),
    (MYSQL, "SELECT SLEEP(10)", "function_not_allowed"),
    (MYSQL, "SELECT BENCHMARK(1000000000, MD5('x'))", "function_not_allowed"),
    (MYSQL, "SELECT GET_LOCK('x', 10)", "function_not_allowed"),
    (MYSQL, "SELECT DATABASE()", "function_not_allowed"),
    (MYSQL, "SELECT CURRENT_USER()", "function_not_allowed"),
    (MYSQL, "SELECT VERSION()", "function_not_allowed"),
    (MYSQL, "SELECT EXTRACTVALUE('<a/>', '/a')", "function_not_allowed"),
    (MYSQL, "SELECT UPDATEXML('<a/>', '/a', '<b/>')", "function_not_allowed"),
    (MYSQL, "SELECT REPEAT('x', 1000000000)", "function_not_allowed"),
    (MYSQL, "SELECT SPACE(1000000000)", "function_not_allowed"),
    (MYSQL, "SELECT LPAD('x', 1000000000, 'y')", "function_not_allowed"),
    (MYSQL, "SELECT * FROM JSON_TABLE('[1]', '$[*]' COLUMNS (x INT PATH '$')) AS j", "table_not_allowed"),
    (MYSQL, "SELECT * FROM secret", "table_not_allowed"),
    (MYSQL, "SELECT * FROM other.orders", "table_not_allowed"),
    (MYSQL, "SELECT * FROM `ORDERS`", "table_not_allowed"),  # another table on a case-sensitive server
    (MYSQL, "SELECT * FROM mysql.user", "table_not_allowed"),
    (MYSQL, "SELECT * FROM information_schema.tables", "table_not_allowed"),
    (MYSQL, "SELECT * INTO @x FROM orders", "statement_not_allowed"),
    (MYSQL, "SELECT * FROM orders INTO OUTFILE '/tmp/x'", "invalid_query"),
    (MYSQL, "SELECT * FROM orders LOCK IN SHARE MODE", "statement_not_allowed"),
    (MYSQL, "LOAD DATA LOCAL INFILE '/etc/passwd' INTO TABLE orders", "invalid_query"),
    (MYSQL, "TABLE secret", "table_not_allowed"),
]


@pytest.mark.parametrize(
    ("flavor", "sql", "code"), QUERY_REFUSED, ids=lambda v: v if isinstance(v, str) else None
)
def test_database_query_refuses(flavor: _sql.Flavor, sql: str, code: str | None) -> None:
    with pytest.raises(_sql.Refused) as refused:
        _sql.check_query(sql, allow(flavor, ["orders", "keys", "customers"]))

    if code is not None:
        assert refused.value.code == code, refused.value.message
    else:
        assert refused.value.code in ("table_not_allowed", "function_not_allowed")


QUERY_ALLOWED = [
    (SQLITE, "SELECT * FROM orders"),
    (SQLITE, "SELECT * FROM orders;"),
    (SQLITE, "select * from ORDERS"),
    (SQLITE, 'SELECT * FROM "Orders"'),  # SQLite ignores case, quoted or not
    (SQLITE, "SELECT * FROM [orders]"),
    (SQLITE, "SELECT * FROM main.orders"),
    (SQLITE, "SELECT 1"),
    (SQLITE, "SELECT o.id, c.name FROM orders o JOIN customers c ON c.id = o.customer_id"),
    (SQLITE, "SELECT * FROM orders WHERE customer_id IN (SELECT id FROM customers WHERE vip)"),
    (SQLITE, "WITH recent AS (SELECT * FROM orders) SELECT * FROM recent"),
    (SQLITE, "WITH a AS (SELECT * FROM orders), b AS (SELECT * FROM a) SELECT * FROM b"),
    (SQLITE, "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 5) SELECT x FROM n"),
    (SQLITE, "WITH orders AS (SELECT * FROM orders WHERE total > 10) SELECT * FROM orders"),
    (SQLITE, "SELECT id FROM orders UNION ALL SELECT id FROM customers"),
    (SQLITE, "(SELECT 1)"),
    (POSTGRES, "SELECT * FROM orders"),
    (POSTGRES, "SELECT * FROM ORDERS"),
    (POSTGRES, "SELECT * FROM public.orders"),
    (POSTGRES, 'SELECT * FROM "public"."orders"'),
    (POSTGRES, "SELECT * FROM PUBLIC.Orders"),
    # SQLite's `expr IN table` over an allowed table or a CTE
    (SQLITE, "SELECT * FROM orders WHERE customer_id IN customers"),
    (SQLITE, "WITH vip AS (SELECT id FROM customers) SELECT * FROM orders WHERE customer_id IN vip"),
    (SQLITE, "SELECT * FROM orders WHERE customer_id IN (1, 2)"),
    # LATERAL over a subquery of allowed tables
    (
        POSTGRES,
        "SELECT o.id, c.name FROM orders o "
        "JOIN LATERAL (SELECT * FROM customers c WHERE c.id = o.customer_id LIMIT 1) c ON true",
    ),
    # what a report needs
    (
        SQLITE,
        "SELECT count(*), count(DISTINCT customer_id), sum(total), avg(total), min(total), max(total), "
        "total(total), group_concat(note, ','), length(note), lower(note), upper(note), substr(note, 1, 2), "
        "trim(note), ltrim(note), rtrim(note), replace(note, 'a', 'b'), instr(note, 'a'), abs(total), "
        "round(total, 2), coalesce(note, ''), ifnull(note, ''), nullif(note, ''), iif(total > 1, 1, 2), "
        "CASE WHEN total > 10 THEN 'big' ELSE 'small' END, CAST(total AS INTEGER), CAST(total AS TEXT), "
        "date('now'), date(placed, '+1 day'), datetime(placed), time(placed), julianday(placed), "
        "strftime('%Y-%m', placed), unixepoch(placed), typeof(note), note LIKE 'a%', note GLOB 'a*', "
        "json_extract(note, '$.a'), note ->> '$.a', hex(note), char(65), unicode(note), "
        "min(total, 1), max(total, 1), ceil(total), floor(total), sqrt(total), pow(total, 2), ln(total), "
        "log(total), sign(total), total % 2, concat(note, 'x'), concat_ws(',', note, 'x') "
        "FROM orders GROUP BY customer_id HAVING count(*) > 1 ORDER BY 1 DESC LIMIT 10 OFFSET 5",
    ),
    (
        SQLITE,
        "SELECT id, row_number() OVER w, rank() OVER w, dense_rank() OVER w, ntile(4) OVER w, "
        "lag(total) OVER w, lead(total, 1) OVER w, first_value(total) OVER w, last_value(total) OVER w, "
        "sum(total) OVER (PARTITION BY customer_id ORDER BY placed ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) "
        "FROM orders WINDOW w AS (ORDER BY placed)",
    ),
    (
        POSTGRES,
        "SELECT count(*) FILTER (WHERE total > 1), "
        "sum(total) OVER (PARTITION BY customer_id ORDER BY placed), "
        "avg(total), stddev(total), variance(total), note ILIKE 'a%', note ~ '^a', position('a' IN note), "
        "strpos(note, 'a'), length(note), char_length(note), left(note, 2), right(note, 2), upper(note), "
        "initcap(note), btrim(note), concat(note, 'x'), concat_ws(',', note, 'x'), replace(note, 'a', 'b'), "
        "trim(note), split_part(note, ',', 1), regexp_replace(note, 'a', 'b'), md5(note), abs(total), "
        "ceil(total), floor(total), trunc(total), round(total::numeric, 2), mod(id, 3), power(total, 2), "
        "sqrt(total), ln(total), log(total), exp(total), greatest(total, 1), least(total, 1), age(placed), "
        "date_part('year', placed), extract(year FROM placed), extract(epoch FROM placed), "
        "date_trunc('month', placed)::date, to_char(placed, 'YYYY-MM'), to_date('2024', 'YYYY'), "
        "to_timestamp(0), make_date(2024, 1, 1), current_date, now() - interval '1 day', nullif(note, ''), "
        "coalesce(note, ''), CASE WHEN total > 10 THEN 'big' END, id::text, total::numeric(10, 2), "
        "note::jsonb ->> 'a', note::json -> 'a', jsonb_extract_path_text(note::jsonb, 'a'), "
        "bool_and(total > 0), bool_or(total > 0), every(total > 0), array_agg(id), json_agg(id), "
        "jsonb_build_object('id', id), array_length(ARRAY[1, 2], 1), cardinality(ARRAY[1]), "
        "array_to_string(ARRAY['a'], ','), lower(note) = ANY (ARRAY['a']), "
        "string_agg(DISTINCT note, ',' ORDER BY note), "
        "percentile_cont(0.5) WITHIN GROUP (ORDER BY total), mode() WITHIN GROUP (ORDER BY total), "
        "row_number() OVER (), rank() OVER (ORDER BY total), dense_rank() OVER (ORDER BY total), "
        "ntile(4) OVER (), lag(total) OVER (), lead(total) OVER (), first_value(total) OVER (), "
        "percent_rank() OVER (ORDER BY total), cume_dist() OVER (ORDER BY total) "
        "FROM orders GROUP BY id, note, total, placed",
    ),
    (MYSQL, "SELECT * FROM orders"),
    (MYSQL, "SELECT * FROM shop.orders"),
    (MYSQL, "SELECT * FROM `orders` o JOIN customers c ON c.id = o.customer_id"),
    (
        MYSQL,
        "SELECT customer_id, COUNT(*), SUM(total), AVG(total), STD(total), VARIANCE(total), "
        "GROUP_CONCAT(DISTINCT note ORDER BY note SEPARATOR ', '), IF(total > 10, 'big', 'small'), "
        "IFNULL(note, '-'), COALESCE(note, ''), NULLIF(note, ''), CASE WHEN total > 1 THEN 1 END, "
        "CONCAT(note, '!'), CONCAT_WS(',', note, 'x'), LOWER(note), UCASE(note), CHAR_LENGTH(note), "
        "SUBSTRING(note, 1, 3), SUBSTRING_INDEX(note, ' ', 1), LEFT(note, 2), TRIM(note), "
        "REPLACE(note, 'a', 'b'), LOCATE('a', note), INSTR(note, 'a'), note LIKE 'a%', note REGEXP '^a', "
        "REGEXP_REPLACE(note, 'a', 'b'), MD5(note), SHA2(note, 256), ROUND(total, 2), TRUNCATE(total, 1), "
        "CEIL(total), FLOOR(total), ABS(total), MOD(id, 3), POWER(total, 2), GREATEST(total, 1), "
        "DATE(placed), DATE_FORMAT(placed, '%Y-%m'), YEAR(placed), MONTH(placed), DAYOFWEEK(placed), "
        "DATE_ADD(placed, INTERVAL 1 DAY), DATEDIFF(NOW(), placed), TIMESTAMPDIFF(HOUR, placed, NOW()), "
        "STR_TO_DATE('2024-01-01', '%Y-%m-%d'), UNIX_TIMESTAMP(placed), FROM_UNIXTIME(0), CURDATE(), "
        "EXTRACT(YEAR FROM placed), LAST_DAY(placed), CAST(total AS CHAR), CONVERT(total, DECIMAL(10, 2)), "
        "JSON_EXTRACT(note, '$.a'), note ->> '$.a', JSON_OBJECT('id', id), JSON_LENGTH(note), "
        "ROW_NUMBER() OVER (ORDER BY total), RANK() OVER (PARTITION BY customer_id ORDER BY total), "
        "LAG(total) OVER (ORDER BY id) "
        "FROM orders WHERE placed > NOW() - INTERVAL 7 DAY GROUP BY customer_id, id, note, total, placed "
        "ORDER BY 2 DESC LIMIT 10",
    ),
]


@pytest.mark.parametrize(("flavor", "sql"), QUERY_ALLOWED, ids=lambda v: v if isinstance(v, str) else None)
def test_database_query_allows(flavor: _sql.Flavor, sql: str) -> None:
    assert _sql.check_query(sql, allow(flavor, ["orders", "customers"]))


def test_what_runs_is_the_checked_tree_without_comments() -> None:
    sql = _sql.check_query("SELECT id FROM orders -- */ ; DROP TABLE orders", allow(SQLITE, ["orders"]))

    assert sql == "SELECT id FROM orders"


def test_allowed_schemas_grant_their_tables_but_never_the_catalog() -> None:
    sqlite = allow(SQLITE, [], ["main"])
    postgres = allow(POSTGRES, [], ["public", "analytics"])

    assert _sql.check_query("SELECT * FROM anything", sqlite)
    assert _sql.check_query("SELECT * FROM analytics.events JOIN visits ON true", postgres)
    for access, sql in [
        (sqlite, "SELECT * FROM sqlite_master"),
        (sqlite, "SELECT * FROM main.sqlite_schema"),
        (postgres, "SELECT * FROM pg_stat_activity"),  # pg_catalog comes first on the path
        (postgres, "SELECT * FROM private.salaries"),
    ]:
        with pytest.raises(_sql.Refused, match="not allowed"):
            _sql.check_query(sql, access)
    # named explicitly, a catalog table is the tenant's choice
    assert _sql.check_query("SELECT * FROM sqlite_master", allow(SQLITE, ["sqlite_master"]))


def test_a_refusal_names_the_table_and_what_is_allowed() -> None:
    with pytest.raises(_sql.Refused) as refused:
        _sql.check_query(
            "SELECT * FROM orders JOIN payroll ON true", allow(POSTGRES, ["orders"], ["reports"])
        )

    assert refused.value.code == "table_not_allowed"
    assert refused.value.message == "table payroll is not allowed (allowed: orders, reports.*)"


# --- SQL: what database_write runs ----------------------------------------------------------------

WRITE_REFUSED = [
    (SQLITE, "UPDATE orders SET total = 0", "where_required"),
    (SQLITE, "DELETE FROM orders", "where_required"),
    (SQLITE, "DELETE FROM orders WHERE 1 = 1", "where_required"),
    (SQLITE, "UPDATE orders SET total = 0 WHERE TRUE", "where_required"),
    (SQLITE, "SELECT * FROM orders", "statement_not_allowed"),
    (SQLITE, "DROP TABLE orders", "statement_not_allowed"),
    (SQLITE, "CREATE TABLE x (a INT)", "statement_not_allowed"),
    (SQLITE, "PRAGMA foreign_keys = OFF", "statement_not_allowed"),
    (SQLITE, "ATTACH DATABASE '/tmp/x.db' AS x", "statement_not_allowed"),
    (SQLITE, "REPLACE INTO orders VALUES (1, 2)", "statement_not_allowed"),  # sqlglot: an unparsed Command
    (POSTGRES, "TRUNCATE orders", "statement_not_allowed"),
    (
        POSTGRES,
        "MERGE INTO orders USING customers c ON c.id = orders.id WHEN MATCHED THEN DELETE",
        "statement_not_allowed",
    ),
    (
        POSTGRES,
        "WITH d AS (DELETE FROM orders RETURNING id) INSERT INTO orders SELECT * FROM d",
        "statement_not_allowed",
    ),
    (SQLITE, "INSERT INTO orders VALUES (1); DELETE FROM orders WHERE id = 1", "invalid_query"),
    (SQLITE, "INSERT INTO secret VALUES (1)", "table_not_allowed"),
    (SQLITE, "INSERT INTO orders SELECT * FROM secret", "table_not_allowed"),
    (SQLITE, "UPDATE orders SET total = (SELECT max(x) FROM secret) WHERE id = 1", "table_not_allowed"),
    (SQLITE, "DELETE FROM orders WHERE id IN (SELECT id FROM secret)", "table_not_allowed"),
    (SQLITE, "UPDATE orders SET total = 1 FROM secret WHERE orders.id = secret.id", "table_not_allowed"),
    # a CTE never shadows the table a statement writes
    (SQLITE, "WITH secret AS (SELECT 1) INSERT INTO secret VALUES (1)", "table_not_allowed"),
    (SQLITE, "WITH secret AS (SELECT 1) DELETE FROM secret WHERE id = 1", "table_not_allowed"),
    (POSTGRES, 'UPDATE "Orders" SET total = 0 WHERE id = 1', "table_not_allowed"),
    # upserts and replaces fed by a query rewrite as many rows as the query finds
    (SQLITE, "INSERT OR REPLACE INTO orders SELECT id, 0, name FROM customers", "statement_not_allowed"),
    (
        SQLITE,
        "INSERT INTO orders SELECT id, 0, name FROM customers WHERE true "
        "ON CONFLICT (id) DO UPDATE SET total = 0",
        "statement_not_allowed",
    ),
    (
        POSTGRES,
        "INSERT INTO orders SELECT * FROM customers ON CONFLICT (id) DO UPDATE SET total = 0",
        "statement_not_allowed",
    ),
    (
        POSTGRES,
        "WITH s AS (SELECT id FROM customers) INSERT INTO orders (id) SELECT id FROM s UNION SELECT 1 "
        "ON CONFLICT (id) DO UPDATE SET total = 0",
        "statement_not_allowed",
    ),
    # the function allowlist holds in writes too
    (POSTGRES, "UPDATE orders SET note = repeat('x', 100000000) WHERE id = 1", "function_not_allowed"),
    (POSTGRES, "UPDATE orders SET note = current_setting('data_directory') WHERE id = 1", None),
    (SQLITE, "DELETE FROM orders WHERE id IN secret", "table_not_allowed"),
    # MySQL's forms: replace, upsert from a query, multi-table writes, writes that read a setting
    (MYSQL, "REPLACE INTO orders SELECT * FROM customers", "statement_not_allowed"),
    (
        MYSQL,
        "INSERT INTO orders SELECT * FROM customers ON DUPLICATE KEY UPDATE total = 0",
        "statement_not_allowed",
    ),
    (
        MYSQL,
        "UPDATE orders o JOIN secret s ON s.id = o.id SET o.note = s.value WHERE o.id = 1",
        "table_not_allowed",
    ),
    (MYSQL, "DELETE o, s FROM orders o JOIN secret s ON s.id = o.id WHERE o.id = 1", "table_not_allowed"),
    (MYSQL, "UPDATE orders SET note = @@datadir WHERE id = 1", "statement_not_allowed"),
    (MYSQL, "UPDATE orders SET total = 0", "where_required"),
    (MYSQL, "DELETE FROM orders WHERE 1 = 1 LIMIT 1000", "where_required"),
]


@pytest.mark.parametrize(
    ("flavor", "sql", "code"), WRITE_REFUSED, ids=lambda v: v if isinstance(v, str) else None
)
def test_database_write_refuses(flavor: _sql.Flavor, sql: str, code: str | None) -> None:
    with pytest.raises(_sql.Refused) as refused:
        _sql.check_write(sql, allow(flavor, ["orders", "customers"]))

    assert refused.value.code == (code or "function_not_allowed"), refused.value.message


@pytest.mark.parametrize(
    ("flavor", "sql"),
    [
        (SQLITE, "INSERT INTO orders (total, note) VALUES (5, 'x')"),
        (SQLITE, "INSERT OR REPLACE INTO orders VALUES (1, 2, 'y')"),
        (SQLITE, "INSERT INTO orders SELECT id, 0, name FROM customers"),
        (SQLITE, "UPDATE orders SET total = total + 1 WHERE id = 1 RETURNING id, total"),
        (SQLITE, "DELETE FROM orders WHERE id IN (SELECT id FROM customers WHERE closed)"),
        (
            SQLITE,
            "WITH old AS (SELECT id FROM customers) DELETE FROM orders WHERE id IN (SELECT id FROM old)",
        ),
        (
            POSTGRES,
            "INSERT INTO public.orders (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET id = excluded.id",
        ),
        (POSTGRES, "UPDATE orders SET total = 0 FROM customers c WHERE c.id = orders.customer_id"),
        (POSTGRES, "INSERT INTO orders SELECT * FROM customers ON CONFLICT DO NOTHING"),
        (SQLITE, "INSERT OR IGNORE INTO orders SELECT id, 0, name FROM customers"),
    ],
)
def test_database_write_allows(flavor: _sql.Flavor, sql: str) -> None:
    assert _sql.check_write(sql, allow(flavor, ["orders", "customers"]))


@pytest.mark.parametrize(
    "access",
    [
        {"allowed_tables": ["a.b.c"]},
        {"allowed_tables": ["orders; DROP TABLE x"]},
        {"allowed_tables": [""]},
        {"allowed_tables": ["x.*"]},
        {"allowed_schemas": ["public.orders"]},
        {"allowed_tables": ["orders"], "tables": ["typo"]},
    ],
)
def test_database_config_refuses_what_is_not_a_table_name(access: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        database_query.Config.model_validate(access)


def test_database_config_defaults_to_nothing_allowed() -> None:
    with pytest.raises(_sql.Refused, match="this tool allows no tables"):
        _sql.check_query("SELECT * FROM orders", _sql.Allowlist(database_query.Config(), SQLITE))


# --- database tools before any connection -------------------------------------------------------


def query(sql: str, url: str | None, tables: list[str] | None = None) -> ToolResult:
    settings = StaticSettings({"DATABASE_URL": url} if url is not None else {})
    config = database_query.Config(allowed_tables=tables or ["orders"])
    return run_builtin(database_query.NAME, {"query": sql}, scope=SCOPE, settings=settings, config=config)


def test_without_a_database_url_the_tools_say_how_to_configure_one() -> None:
    code, message = error_of(query("SELECT 1", None))

    assert code == "not_configured"
    assert "PUT /v1/settings/DATABASE_URL" in message


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("not a url", "not a valid SQLAlchemy URL"),
        ("mssql://app:hunter22@db.internal.example/shop", "mssql is not supported"),
        # MySQL: drivers with their own sockets, and PyMySQL arguments that pick another destination,
        # read a file of the function or run SQL of their own
        ("mysql+mysqldb://app:hunter22@db.internal.example/shop", "the driver mysql+mysqldb"),
        (
            "mysql://app:hunter22@db.internal.example/shop?unix_socket=/run/x.sock",
            "the parameter unix_socket",
        ),
        (
            "mysql://app:hunter22@db.internal.example/shop?read_default_file=/proc/self/environ",
            "the parameter read_default_file",
        ),
        (
            "mysql://app:hunter22@db.internal.example/shop?init_command=SET+x%3D1",
            "the parameter init_command",
        ),
        ("mysql://app:hunter22@db.internal.example/shop?local_infile=1", "the parameter local_infile"),
        ("mysql://app:hunter22@db.internal.example/shop?ssl_mode=PREFERRED", "ssl_mode is one of"),
        # PyMySQL fails on an unknown charset with an AttributeError when connecting, not a driver error
        ("mysql://app:hunter22@db.internal.example/shop?charset=klingon", "charset is not a character set"),
        ("mysql://app:hunter22@db.internal.example/shop?charset=a&charset=b", "charset is not a"),
        ("mysql://app:hunter22@db.internal.example", "names its database"),
        ("mysql://app:hunter22@/shop", "needs one host"),
        (
            "postgresql+nosuchdriver://app:hunter22@db.internal.example/shop",
            "the driver postgresql+nosuchdriver is not supported",
        ),
        # drivers that would open their own, unguarded sockets
        ("postgresql+pg8000://app:hunter22@db.internal.example/shop", "the driver postgresql+pg8000"),
        ("postgresql+psycopg2://app:hunter22@db.internal.example/shop", "the driver postgresql+psycopg2"),
        # libpq parameters that pick another destination or read a file of the function
        ("postgresql://app:hunter22@db.internal.example/shop?host=/tmp", "the parameter host"),
        ("postgresql://app:hunter22@db.internal.example/shop?hostaddr=127.0.0.1", "the parameter hostaddr"),
        ("postgresql://app:hunter22@db.internal.example/shop?port=22", "the parameter port"),
        ("postgresql://app:hunter22@db.internal.example/shop?service=x", "the parameter service"),
        (
            "postgresql://app:hunter22@db.internal.example/shop?sslkey=/proc/self/environ",
            "the parameter sslkey",
        ),
        ("postgresql://app:hunter22@/shop", "needs one host"),
        ("postgresql://app:hunter22@db.internal.example,10.0.0.1/shop", "needs one host"),
    ],
)
def test_a_database_url_that_cannot_work_is_not_configured_and_never_echoed(url: str, fragment: str) -> None:
    code, message = error_of(query("SELECT * FROM orders", url))

    assert code == "not_configured"
    assert fragment in message
    assert "hunter22" not in message and "db.internal.example" not in message


def test_an_aurora_data_api_url_is_postgresql_and_needs_only_its_dialect_installed() -> None:
    url = "postgresql+auroradataapi://:@/shop?aurora_cluster_arn=arn:aws:rds:x&secret_arn=arn:aws:secretsmanager:y"

    assert _db_target.flavor_of(make_url(url)) is POSTGRES
    # the checks run first, in PostgreSQL's dialect...
    assert error_of(query('SELECT * FROM "Orders"', url))[0] == "table_not_allowed"
    # ...and only then is the (here missing) dialect needed
    code, message = error_of(query("SELECT * FROM orders", url))
    assert (code, message) == (
        "not_configured",
        "DATABASE_URL names a database driver that is not installed: postgresql+auroradataapi",
    )


# --- DATABASE_URL's host goes through the SSRF guard ------------------------------------------------


def query_with(url: str, resolver: Any) -> ToolResult:
    return _database.execute(
        "SELECT * FROM orders",
        tool="database_query",
        tenant_id="t1",
        settings=StaticSettings({"DATABASE_URL": url}),
        access=database_query.Config(allowed_tables=["orders"]),
        check=_sql.check_query,
        read_only=True,
        resolver=resolver,
    )


def no_dns(host: str, port: int) -> list[str]:
    raise AssertionError(f"an address literal needs no lookup (asked for {host})")


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "10.0.0.5",
        "169.254.169.254",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "0x7f000001",
        "127.1",
        "0.0.0.0",
    ],
)
def test_a_database_host_at_an_internal_address_is_refused_with_one_text(host: str) -> None:
    result = query_with(f"postgresql://app:hunter22@{host}:5432/shop", no_dns)

    assert error_of(result) == ("blocked_destination", _db_target.BLOCKED_MESSAGE)


def test_a_database_name_that_resolves_inside_is_refused_like_an_address() -> None:
    asked: list[tuple[str, int]] = []

    def rebinding(host: str, port: int) -> list[str]:
        asked.append((host, port))
        return ["203.0.113.10", "10.1.2.3"]  # one public-looking answer does not save a private one

    result = query_with("postgresql://app:hunter22@db.tenant.example:6543/shop", rebinding)

    assert error_of(result) == ("blocked_destination", _db_target.BLOCKED_MESSAGE)
    assert asked == [("db.tenant.example", 6543)]


def test_a_database_name_that_does_not_resolve_is_the_generic_connect_failure() -> None:
    def nxdomain(host: str, port: int) -> list[str]:
        raise socket.gaierror(-2, "Name or service not known")

    result = query_with("postgresql://app:hunter22@nowhere.example/shop", nxdomain)

    assert error_of(result) == ("database_error", "could not connect to the database")


def test_the_mysql_guard_connects_a_socket_to_the_checked_address_and_keeps_the_name_for_tls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pymysql

    monkeypatch.setenv("STEPWISE_ALLOW_HOSTS", "10.0.0.0/8")
    dialed: list[tuple[str, int]] = []
    made: list[Any] = []

    class Dialed(socket.socket):
        def __init__(self, address: tuple[str, int]) -> None:
            super().__init__()
            dialed.append(address)

    def create_connection(address: tuple[str, int], timeout: float) -> socket.socket:
        if address[0] == "10.0.0.7":
            raise ConnectionRefusedError("first address down")
        return Dialed(address)

    class Connection:
        def __init__(self, **kwargs: Any) -> None:
            self.kwargs = kwargs
            made.append(self)

        def connect(self, sock: socket.socket) -> None:
            self.sock = sock

    monkeypatch.setattr(_db_target.socket, "create_connection", create_connection)
    monkeypatch.setattr(pymysql.connections, "Connection", Connection)
    guard = _db_target.mysql_connect_guard(lambda host, port: ["10.0.0.7", "10.0.0.8"])
    cparams = {"host": "db.tenant.example", "port": 3307, "user": "app", "ssl_mode": "VERIFY_IDENTITY"}

    connection = guard(None, None, [], cparams)

    assert connection is made[0]
    assert dialed == [("10.0.0.8", 3307)]  # the second checked address, once the first refused
    assert connection.sock.getpeername  # PyMySQL got that socket rather than dialing the name itself
    assert connection.kwargs == {
        "host": "db.tenant.example",  # the name TLS verifies
        "port": 3307,
        "user": "app",
        "ssl_verify_cert": True,
        "ssl_verify_identity": True,
        "connect_timeout": _db_target.CONNECT_TIMEOUT_SECONDS,
        "read_timeout": _db_target.MYSQL_IO_TIMEOUT_SECONDS,
        "write_timeout": _db_target.MYSQL_IO_TIMEOUT_SECONDS,
        "local_infile": False,
        "defer_connect": True,
    }
    connection.sock.close()


def test_the_mysql_allowlist_has_nothing_that_reads_waits_or_grows_on_request() -> None:
    from stepwise.tools.builtin._sql_functions import FUNCTIONS

    dangerous = {
        "load_file", "sleep", "benchmark", "get_lock", "release_lock", "master_pos_wait", "database",
        "schema", "user", "current_user", "version", "connection_id", "extractvalue", "updatexml",
        "repeat", "space", "lpad", "rpad", "format", "json_table", "sys_eval", "name_const",
    }  # fmt: skip

    assert dangerous.isdisjoint(FUNCTIONS["mysql"])


def test_the_guard_hands_libpq_the_checked_addresses_and_keeps_the_name_for_tls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STEPWISE_ALLOW_HOSTS", "10.0.0.0/8")
    guard = _db_target.connect_guard(lambda host, port: ["10.0.0.7", "10.0.0.8"])
    cparams: dict[str, Any] = {"host": "db.tenant.example", "port": 6543, "dbname": "shop"}

    guard(None, None, [], cparams)

    assert cparams == {
        "host": "db.tenant.example,db.tenant.example",
        "hostaddr": "10.0.0.7,10.0.0.8",
        "port": 6543,
        "dbname": "shop",
        "connect_timeout": _db_target.CONNECT_TIMEOUT_SECONDS,
    }


# --- SQLite only in the tenant's directory ---------------------------------------------------------


@pytest.fixture
def sqlite_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("STEPWISE_SQLITE_DIR", str(tmp_path / "sqlite"))
    for tenant in ("t1", "t2"):
        (tmp_path / "sqlite" / tenant).mkdir(parents=True)
        with sqlite3.connect(tmp_path / "sqlite" / tenant / "shop.db") as connection:
            connection.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, owner TEXT)")
            connection.execute("INSERT INTO orders (owner) VALUES (?)", (tenant,))
    (tmp_path / "outside.db").write_bytes(b"")
    return tmp_path


def test_sqlite_is_refused_where_no_directory_is_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STEPWISE_SQLITE_DIR", raising=False)

    code, message = error_of(query("SELECT * FROM orders", "sqlite:///shop.db"))

    assert code == "not_configured"
    assert "only available where STEPWISE_SQLITE_DIR is set" in message


def test_a_sqlite_name_opens_the_tenants_own_file(sqlite_dir: Path) -> None:
    relative = query("SELECT owner FROM orders", "sqlite:///shop.db")
    absolute = query("SELECT owner FROM orders", f"sqlite:///{sqlite_dir / 'sqlite' / 't1' / 'shop.db'}")

    assert relative.output["rows"] == [["t1"]]
    assert absolute.output["rows"] == [["t1"]]


@pytest.mark.parametrize(
    "database",
    [
        "sqlite:///../t2/shop.db",  # another tenant's file
        "sqlite:///{root}/sqlite/t2/shop.db",
        "sqlite:///{root}/outside.db",
        "sqlite:////etc/passwd",
        "sqlite:///link.db",  # a symlink out of the directory
        "sqlite://",  # in memory
        "sqlite:///:memory:",
        "sqlite:///file:shop.db?mode=ro&uri=true",
        "sqlite+pysqlcipher:///shop.db",
    ],
)
def test_a_sqlite_url_outside_the_tenants_directory_is_refused(sqlite_dir: Path, database: str) -> None:
    (sqlite_dir / "sqlite" / "t1" / "link.db").symlink_to(sqlite_dir / "sqlite" / "t2" / "shop.db")

    code, message = error_of(query("SELECT owner FROM orders", database.format(root=sqlite_dir)))

    assert code == "not_configured", message


def test_a_missing_sqlite_file_is_not_created(sqlite_dir: Path) -> None:
    result = query("SELECT * FROM orders", "sqlite:///typo.db")

    assert error_of(result) == ("database_error", "could not connect to the database")
    assert not (sqlite_dir / "sqlite" / "t1" / "typo.db").exists()


def test_a_database_error_quotes_the_driver_without_the_url_or_credentials() -> None:
    url = make_url("postgresql://appuser:hunter22@db.internal.example:5432/shop")
    driver_error = Exception(
        'connection to server at "db.internal.example" failed: password authentication failed for user '
        '"appuser" (password hunter22)\nDETAIL: more lines the model does not need'
    )

    message = _database._describe(OperationalError("SELECT 1", {}, driver_error), url)

    assert message.startswith("Exception: connection to server at")
    assert "hunter22" not in message and "appuser" not in message and "db.internal.example" not in message
    assert "DETAIL" not in message


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        (True, True),
        (12, 12),
        (1.5, 1.5),
        (float("nan"), "nan"),
        (__import__("decimal").Decimal("12.30"), "12.30"),
        (__import__("datetime").date(2024, 1, 2), "2024-01-02"),
        (__import__("datetime").datetime(2024, 1, 2, 3, 4, 5), "2024-01-02T03:04:05"),
        (b"\x89PNG", {"base64": "iVBORw=="}),
        ({"a": [1, __import__("decimal").Decimal("2")]}, {"a": [1, "2"]}),
    ],
)
def test_column_values_become_plain_json(value: Any, expected: Any) -> None:
    assert _database._cell(value) == expected


def test_a_huge_text_value_is_cut_with_a_marker() -> None:
    cell = _database._cell("x" * (_database.CELL_LIMIT + 5))

    assert cell == "x" * _database.CELL_LIMIT + "…[truncated: 5 more characters]"


# --- Storage paths --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "normalized"),
    [
        ("notes.txt", "notes.txt"),
        ("reports/2024/q1.csv", "reports/2024/q1.csv"),
        ("./notes.txt", "notes.txt"),
        ("reports//q1.csv", "reports/q1.csv"),
        ("reports/./q1.csv", "reports/q1.csv"),
        ("..notes", "..notes"),  # a name that starts with dots, not a step up
        ("a..b/c...d", "a..b/c...d"),
        ("données/été.txt", "données/été.txt"),
        ("%2e%2e/x", "%2e%2e/x"),  # S3 keys are literal: this stays inside the prefix
    ],
)
def test_a_file_path_is_normalized(path: str, normalized: str) -> None:
    assert _storage.normalize(path) == normalized


@pytest.mark.parametrize(
    "path",
    [
        "",
        ".",
        "/",
        "/etc/passwd",
        "/tenants/other/x",
        "..",
        "../x",
        "a/../../x",
        "a/..",
        "a/../b",
        "a\\b",
        "..\\..\\x",
        "a\x00.txt",
        "a\nb",
        "reports/",
        "reports/./",
    ],
)
def test_an_unsafe_or_empty_file_path_is_refused(path: str) -> None:
    with pytest.raises(_storage.InvalidPath):
        _storage.normalize(path)


@pytest.mark.parametrize(
    ("prefix", "normalized"),
    [
        ("", ""),
        ("reports/", "reports/"),
        ("reports", "reports"),
        ("./", ""),
        ("a//b/", "a/b/"),
        (".env", ".env"),
    ],
)
def test_a_listing_prefix_is_normalized(prefix: str, normalized: str) -> None:
    assert _storage.normalize(prefix, prefix=True) == normalized


@pytest.mark.parametrize("prefix", ["../", "..", "../other/", "/", "/tenants", "a\\", "x\x00"])
def test_an_unsafe_listing_prefix_is_refused(prefix: str) -> None:
    with pytest.raises(_storage.InvalidPath):
        _storage.normalize(prefix, prefix=True)


def test_keys_live_under_the_tenant_prefix_and_within_s3s_key_length() -> None:
    root = s3.tenant_root("acme")

    assert _storage.key_for(root, "a/b.txt") == "tenants/acme/a/b.txt"
    with pytest.raises(_storage.InvalidPath, match="too long"):
        _storage.key_for(root, "é" * 510)


@pytest.mark.parametrize("tenant", ["", "a/b", "..", ".", "a b", "x" * 200])
def test_a_tenant_id_that_could_reshape_the_prefix_is_a_bug_upstream(tenant: str) -> None:
    with pytest.raises(ValueError):
        s3.tenant_root(tenant)


@pytest.mark.parametrize(
    ("content_type", "kind"),
    [
        ("text/csv", "text"),
        ("application/json; charset=utf-8", "text"),
        ("application/vnd.api+json", "text"),
        ("image/svg+xml", "text"),
        ("", "unknown"),
        ("binary/octet-stream", "unknown"),
        ("application/octet-stream", "unknown"),
        ("image/png", "binary"),
        ("application/pdf", "binary"),
        ("application/zip", "binary"),
    ],
)
def test_content_types_sort_into_text_binary_and_unknown(content_type: str, kind: str) -> None:
    assert _storage.content_kind(content_type) == kind


@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        ("data.json", "application/json; charset=utf-8"),
        ("table.csv", "text/csv; charset=utf-8"),
        ("notes", "text/plain; charset=utf-8"),
        ("picture.png", "text/plain; charset=utf-8"),  # the content is text whatever the name says
    ],
)
def test_written_files_get_a_text_content_type(path: str, content_type: str) -> None:
    assert _storage.text_content_type(path) == content_type


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        (storage_read, {"operation": "list"}),
        (storage_write, {"path": "a.txt", "content": "x"}),
    ],
)
def test_without_a_bucket_the_storage_tools_are_not_configured(
    tool: ModuleType, arguments: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STORAGE_BUCKET", raising=False)

    code, message = error_of(
        run_builtin(tool.NAME, arguments, scope=SCOPE, settings=StaticSettings(), config=tool.Config())
    )

    assert code == "not_configured"
    assert "STORAGE_BUCKET" in message


@pytest.mark.parametrize(
    ("tool", "arguments", "code"),
    [
        (storage_read, {"operation": "download"}, "invalid_arguments"),
        (storage_read, {"operation": "download", "path": "../other/x"}, "invalid_path"),
        (storage_read, {"operation": "list", "prefix": "../"}, "invalid_path"),
        (storage_read, {"operation": "list", "limit": 1001}, "invalid_arguments"),
        (storage_read, {"operation": "list", "limit": 0}, "invalid_arguments"),
        (storage_read, {"operation": "list", "offset": -1}, "invalid_arguments"),
        (storage_read, {"operation": "delete", "path": "a"}, "invalid_arguments"),
        (storage_write, {"path": "/abs.txt", "content": "x"}, "invalid_path"),
        (storage_write, {"path": "a.txt", "content": "\ud800"}, "invalid_arguments"),
        (storage_write, {"path": "a.txt"}, "invalid_arguments"),
    ],
)
def test_storage_arguments_are_refused_before_s3_is_asked(
    tool: ModuleType, arguments: dict[str, Any], code: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STORAGE_BUCKET", "unused")
    monkeypatch.setattr(tool, "s3_client", _no_s3)  # the client as the tool module names it

    result = run_builtin(tool.NAME, arguments, scope=SCOPE, settings=StaticSettings(), config=tool.Config())

    assert error_of(result)[0] == code


def _no_s3() -> Any:
    raise AssertionError("S3 was asked")


def test_storage_write_refuses_content_past_its_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STORAGE_BUCKET", "unused")
    monkeypatch.setattr(storage_write, "s3_client", _no_s3)
    arguments = {"path": "big.txt", "content": "é" * (storage_write.CONTENT_LIMIT // 2 + 1)}

    result = run_builtin(
        storage_write.NAME, arguments, scope=SCOPE, settings=StaticSettings(), config=storage_write.Config()
    )

    assert error_of(result)[0] == "content_too_large"


# --- knowledge_search -----------------------------------------------------------------------------


class FakeBedrock:
    """Bedrock Agent Runtime's Retrieve, in memory: each knowledge base id has its ranked chunks."""

    def __init__(self, chunks: dict[str, list[dict[str, Any]]], failures: dict[str, Exception] | None = None):
        self.chunks = chunks
        self.failures = failures or {}
        self.calls: list[dict[str, Any]] = []

    def retrieve(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        base = kwargs["knowledgeBaseId"]
        if base in self.failures:
            raise self.failures[base]
        wanted = kwargs["retrievalConfiguration"]["vectorSearchConfiguration"]["numberOfResults"]
        return {"retrievalResults": self.chunks[base][:wanted]}


def chunk(text: str, score: float, uri: str) -> dict[str, Any]:
    return {
        "content": {"type": "TEXT", "text": text},
        "location": {"type": "S3", "s3Location": {"uri": uri}},
        "score": score,
        "metadata": {},
    }


HANDBOOK = "HANDBOOK01"
POLICIES = "POLICIES02"
KB_CONFIG = knowledge_search.Config.model_validate(
    {
        "knowledge_bases": [
            {"name": "handbook", "id": HANDBOOK, "description": "the employee handbook"},
            {"name": "policies", "id": POLICIES},
        ]
    }
)
CHUNKS = {
    HANDBOOK: [
        chunk("Vacation is 25 days.", 0.91, "s3://kb/handbook.pdf"),
        chunk("Ask HR.", 0.42, "s3://kb/hr.md"),
    ],
    POLICIES: [
        chunk("Travel needs approval.", 0.77, "s3://kb/travel.pdf"),
        {
            "content": {"text": "Expenses within 30 days."},
            "location": {"type": "WEB", "webLocation": {"url": "https://intranet.example/expenses"}},
            "score": 0.55,
        },
    ],
}


class FakeOwners:
    """The knowledge bases' stepwise:tenant tags, in memory; `failures` raise instead."""

    def __init__(self, owners: dict[str, str], failures: dict[str, Exception] | None = None) -> None:
        self.owners = owners
        self.failures = failures or {}
        self.asked: list[tuple[str, str | None]] = []

    def owner(self, knowledge_base_id: str, region: str | None) -> str | None:
        self.asked.append((knowledge_base_id, region))
        if knowledge_base_id in self.failures:
            raise self.failures[knowledge_base_id]
        return self.owners.get(knowledge_base_id)


def search(
    arguments: dict[str, Any],
    fake: FakeBedrock,
    config: knowledge_search.Config = KB_CONFIG,
    owners: FakeOwners | None = None,
) -> ToolResult:
    parsed = builtin_arguments(knowledge_search, arguments)
    if isinstance(parsed, ToolResult):
        return parsed
    return knowledge_search.run(
        parsed,
        scope=SCOPE,
        settings=StaticSettings(),
        config=config,
        client_factory=lambda region: fake,
        owners=owners or FakeOwners({HANDBOOK: SCOPE.tenant_id, POLICIES: SCOPE.tenant_id}),
    )


@pytest.mark.parametrize("policies_owner", ["other-tenant", None])
def test_a_knowledge_base_of_another_tenant_or_none_refuses_the_call_before_any_retrieve(
    policies_owner: str | None,
) -> None:
    fake = FakeBedrock(CHUNKS)
    owners = FakeOwners({HANDBOOK: SCOPE.tenant_id, **({POLICIES: policies_owner} if policies_owner else {})})

    result = search({"query": "travel"}, fake, owners=owners)

    code, message = error_of(result)
    assert code == "knowledge_base_not_allowed"
    assert "policies" in message and f"stepwise:tenant={SCOPE.tenant_id}" in message
    assert "handbook" not in message
    assert fake.calls == []  # nothing retrieved, not even from the tenant's own base


def test_a_knowledge_base_whose_owner_cannot_be_checked_is_not_searched() -> None:
    fake = FakeBedrock(CHUNKS)
    throttled = ClientError(
        {"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "GetKnowledgeBase"
    )
    owners = FakeOwners({HANDBOOK: SCOPE.tenant_id}, failures={POLICIES: throttled})

    partial = search({"query": "vacation"}, fake, owners=owners)
    assert partial.ok and [c["knowledgeBaseId"] for c in fake.calls] == [HANDBOOK]
    assert partial.output["errors"] == [
        {"knowledge_base": "policies", "message": "cannot check its owner: ThrottlingException: slow down"}
    ]

    only = search({"query": "x", "knowledge_base_names": ["policies"]}, FakeBedrock(CHUNKS), owners=owners)
    assert error_of(only)[0] == "rate_limited"


class FakeTagsClient:
    """bedrock-agent's GetKnowledgeBase and ListTagsForResource, in memory, counting calls."""

    def __init__(self, tags: dict[str, dict[str, str]]) -> None:
        self.tags = tags
        self.calls = 0

    def get_knowledge_base(self, **kwargs: Any) -> dict[str, Any]:
        self.calls += 1
        base = kwargs["knowledgeBaseId"]
        if base not in self.tags:
            raise ClientError(
                {"Error": {"Code": "ResourceNotFoundException", "Message": "no"}}, "GetKnowledgeBase"
            )
        return {"knowledgeBase": {"knowledgeBaseArn": f"arn:aws:bedrock:us-east-1:1:knowledge-base/{base}"}}

    def list_tags_for_resource(self, **kwargs: Any) -> dict[str, Any]:
        return {"tags": self.tags[kwargs["resourceArn"].rsplit("/", 1)[1]]}


def test_owners_come_from_the_tenant_tag_and_are_cached_for_a_while() -> None:
    now = [0.0]
    client = FakeTagsClient({HANDBOOK: {"stepwise:tenant": "t1", "team": "hr"}, POLICIES: {"team": "legal"}})
    owners = knowledge_search.BedrockOwners(lambda region: client, ttl=60, clock=lambda: now[0])

    assert owners.owner(HANDBOOK, None) == "t1"
    assert owners.owner(POLICIES, None) is None  # untagged: nobody's
    assert owners.owner("MISSING000", None) is None
    assert client.calls == 3

    client.tags[HANDBOOK] = {"stepwise:tenant": "t2"}
    now[0] = 59.0
    assert owners.owner(HANDBOOK, None) == "t1" and client.calls == 3  # cached
    now[0] = 61.0
    assert owners.owner(HANDBOOK, None) == "t2" and client.calls == 4  # re-read after the TTL


def test_knowledge_search_merges_every_linked_base_by_score() -> None:
    fake = FakeBedrock(CHUNKS)

    result = search({"query": "how much vacation", "top_k": 3}, fake)

    assert result.output == {
        "results": [
            {
                "id": "D1",
                "knowledge_base": "handbook",
                "text": "Vacation is 25 days.",
                "score": 0.91,
                "source": "s3://kb/handbook.pdf",
            },
            {
                "id": "D2",
                "knowledge_base": "policies",
                "text": "Travel needs approval.",
                "score": 0.77,
                "source": "s3://kb/travel.pdf",
            },
            {
                "id": "D3",
                "knowledge_base": "policies",
                "text": "Expenses within 30 days.",
                "score": 0.55,
                "source": "https://intranet.example/expenses",
            },
        ],
        "cite": knowledge_search.CITE,
    }
    assert fake.calls == [
        {
            "knowledgeBaseId": base,
            "retrievalQuery": {"text": "how much vacation"},
            "retrievalConfiguration": {"vectorSearchConfiguration": {"numberOfResults": 3}},
        }
        for base in (HANDBOOK, POLICIES)
    ]


def test_knowledge_search_asks_only_the_named_bases_with_the_default_top_k() -> None:
    fake = FakeBedrock(CHUNKS)

    result = search({"query": "travel", "knowledge_base_names": ["policies"]}, fake)

    assert [r["knowledge_base"] for r in result.output["results"]] == ["policies", "policies"]
    assert [call["knowledgeBaseId"] for call in fake.calls] == [POLICIES]
    assert fake.calls[0]["retrievalConfiguration"]["vectorSearchConfiguration"]["numberOfResults"] == 5


def test_an_unknown_knowledge_base_name_lists_the_valid_ones() -> None:
    fake = FakeBedrock(CHUNKS)

    result = search({"query": "x", "knowledge_base_names": ["handbook", "wiki"]}, fake)

    assert error_of(result) == (
        "unknown_knowledge_base",
        "no knowledge base named wiki (known: handbook, policies)",
    )
    assert fake.calls == []


@pytest.mark.parametrize(
    "arguments",
    [
        {"query": ""},
        {"query": "x", "top_k": 0},
        {"query": "x", "top_k": 21},
        {"query": "x", "knowledge_base_names": []},
        {"query": "x", "search_type": "lexical"},
        {"query": "x", "filter": {"orAll": [{"equals": {"key": "a", "value": 1}}]}},
        {"query": "x", "filter": {"equals": {"key": "a"}}},
        {"query": "x", "filter": {"in": {"key": "a", "value": []}}},
        {"query": "x", "filter": {"andAll": [{"equals": {"key": "a", "value": 1}}]}},
        {"query": "x", "filter": {"equals": {"key": "a", "value": {"nested": 1}}}},
        {"query": "x", "filter": {"equals": {"key": "a", "value": 1}, "in": {"key": "b", "value": [1]}}},
    ],
)
def test_knowledge_search_arguments_are_checked_before_bedrock_is_asked(arguments: dict[str, Any]) -> None:
    fake = FakeBedrock(CHUNKS)

    assert error_of(search(arguments, fake))[0] == "invalid_arguments"
    assert fake.calls == []


def throttled() -> ClientError:
    return ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, "Retrieve")


def test_one_failing_base_leaves_the_others_results_and_says_which_failed() -> None:
    fake = FakeBedrock(CHUNKS, failures={HANDBOOK: throttled()})

    result = search({"query": "x"}, fake)

    assert [r["text"] for r in result.output["results"]] == [
        "Travel needs approval.",
        "Expenses within 30 days.",
    ]
    assert result.output["errors"] == [
        {"knowledge_base": "handbook", "message": "ThrottlingException: Rate exceeded"}
    ]


def test_when_every_base_fails_the_call_fails() -> None:
    unreachable = EndpointConnectionError(
        endpoint_url="https://bedrock-agent-runtime.us-east-1.amazonaws.com"
    )

    throttled_everywhere = search(
        {"query": "x"}, FakeBedrock(CHUNKS, {HANDBOOK: throttled(), POLICIES: throttled()})
    )
    down = search({"query": "x"}, FakeBedrock(CHUNKS, {HANDBOOK: unreachable, POLICIES: throttled()}))

    assert error_of(throttled_everywhere)[0] == "rate_limited"
    code, message = error_of(down)
    assert code == "rate_limited"
    assert "handbook: Bedrock is unreachable: EndpointConnectionError" in message


@pytest.mark.parametrize(
    "config",
    [
        {"knowledge_bases": []},
        {"knowledge_bases": [{"name": "a", "id": "short"}]},
        {"knowledge_bases": [{"name": "a", "id": HANDBOOK}, {"name": "a", "id": POLICIES}]},
        {"knowledge_bases": [{"name": "a", "id": HANDBOOK}], "region": "mars"},
    ],
)
def test_knowledge_search_needs_at_least_one_well_formed_base(config: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        knowledge_search.Config.model_validate(config)


def test_the_real_client_is_bedrock_agent_runtime_in_the_configured_region(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    # Fake credentials: building a client resolves them, and without any botocore would ask the
    # instance metadata endpoint (a socket, which unit tests may not open).
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    knowledge_search.bedrock_client.cache_clear()

    configured = knowledge_search.bedrock_client("eu-west-1")
    default = knowledge_search.bedrock_client(None)

    assert configured.meta.service_model.service_name == "bedrock-agent-runtime"  # type: ignore[attr-defined]
    assert configured.meta.region_name == "eu-west-1"  # type: ignore[attr-defined]
    assert default.meta.region_name == "us-east-1"  # type: ignore[attr-defined]
    assert knowledge_search.bedrock_client("eu-west-1") is configured  # built once per region
    knowledge_search.bedrock_client.cache_clear()


def test_the_configured_scope_is_anded_with_the_models_filter_and_the_search_type_overrides() -> None:
    scope = {
        "andAll": [{"equals": {"key": "team", "value": "hr"}}, {"in": {"key": "tag", "value": ["a", 2]}}]
    }
    config = knowledge_search.Config.model_validate(
        {
            "knowledge_bases": [
                {"name": "handbook", "id": HANDBOOK, "filter": scope, "search_type": "semantic"}
            ]
        }
    )
    fake = FakeBedrock(CHUNKS)

    search({"query": "x"}, fake, config=config)
    narrowed = {"equals": {"key": "year", "value": 2026}}
    search({"query": "x", "filter": narrowed, "search_type": "hybrid"}, fake, config=config)

    first, second = (call["retrievalConfiguration"]["vectorSearchConfiguration"] for call in fake.calls)
    assert first == {"numberOfResults": 5, "overrideSearchType": "SEMANTIC", "filter": scope}
    assert second == {
        "numberOfResults": 5,
        "overrideSearchType": "HYBRID",
        "filter": {"andAll": [scope, narrowed]},
    }


def test_a_config_filter_outside_the_supported_operators_is_refused() -> None:
    with pytest.raises(ValidationError, match="not supported"):
        knowledge_search.Config.model_validate(
            {"knowledge_bases": [{"name": "a", "id": HANDBOOK, "filter": {"orAll": []}}]}
        )
    deep = {"equals": {"key": "k", "value": 1}}
    for _ in range(3):
        deep = {"andAll": [deep, deep]}
    with pytest.raises(ValidationError, match="nested"):
        knowledge_search.Config.model_validate(
            {"knowledge_bases": [{"name": "a", "id": HANDBOOK, "filter": deep}]}
        )


def test_kb_list_docs_pages_across_data_sources_with_its_own_token() -> None:
    from stepwise.tools.builtin import kb_list_docs
    from tests.fakes.knowledge_bases import FakeKnowledgeBases

    fake = FakeKnowledgeBases()
    fake.add(
        HANDBOOK,
        SCOPE.tenant_id,
        documents={"DS1": ["s3://b/a/1.md", "s3://b/b/2.md"], "DS2": ["s3://b/a/3.md"]},
    )
    config = kb_list_docs.Config.model_validate({"knowledge_bases": [{"name": "handbook", "id": HANDBOOK}]})
    owners = knowledge_search.BedrockOwners(lambda region: fake)

    def page(**arguments: Any) -> ToolResult:
        parsed = builtin_arguments(kb_list_docs, arguments)
        assert not isinstance(parsed, ToolResult)
        return kb_list_docs.run(
            parsed,
            scope=SCOPE,
            settings=StaticSettings(),
            config=config,
            client_factory=lambda r: fake,
            owners=owners,
        )

    first = page(limit=2)
    second = page(limit=2, page_token=first.output["next_page_token"])
    only_a = page(prefix="a/")

    assert [d["path"] for d in first.output["documents"]] == ["a/1.md", "b/2.md"]
    assert [d["path"] for d in second.output["documents"]] == ["a/3.md"]
    assert second.output["next_page_token"] is None
    assert [d["source"] for d in only_a.output["documents"]] == ["s3://b/a/1.md", "s3://b/a/3.md"]
    assert error_of(page(page_token="not-ours"))[0] == "invalid_arguments"
