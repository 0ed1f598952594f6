"""The data builtins against real backends: database_query and database_write on a SQLite file, and
storage_read and storage_write on S3 (moto), including one tenant trying to reach another's files."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import boto3
import pytest
from moto import mock_aws

from stepwise.core import s3
from stepwise.tools.base import TOOL_RESULT_LIMIT, ToolResult
from stepwise.tools.builtin import (
    StaticSettings,
    ToolScope,
    _database,
    _sql,
    database_query,
    database_write,
    knowledge_search,
    storage_read,
    storage_write,
)
from stepwise.tools.registry import run_builtin

PNG = (
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"
)


def error_of(result: ToolResult) -> tuple[str, str]:
    assert result.error is not None, f"expected an error, got {result.output!r}"
    return result.error.code, result.error.message


def scope(tenant: str) -> ToolScope:
    return ToolScope(tenant_id=tenant, agent_id="a1", run_id="r1", session_id="s1")


# --- SQLite ---------------------------------------------------------------------------------------


@pytest.fixture
def database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("STEPWISE_SQLITE_DIR", str(tmp_path))
    (tmp_path / "t1").mkdir()
    path = tmp_path / "t1" / "shop.db"
    with sqlite3.connect(path) as connection:
        connection.executescript(
            """
            CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
            CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, total REAL, placed TEXT);
            CREATE TABLE secret (id INTEGER PRIMARY KEY, value TEXT);
            INSERT INTO customers VALUES (1, 'Ada'), (2, 'Grace');
            INSERT INTO orders VALUES
                (1, 1, 12.5, '2024-03-01'), (2, 2, 40, '2024-05-17'), (3, 1, 7.25, '2025-01-09');
            INSERT INTO secret VALUES (1, 'the launch codes');
            """
        )
    yield path
    _database.engine_for.cache_clear()  # drop the pooled connections to this file


def settings_for(path: Path) -> StaticSettings:
    return StaticSettings({"DATABASE_URL": f"sqlite:///{path}"})


def query(path: Path, sql: str, tables: tuple[str, ...] = ("orders", "customers")) -> ToolResult:
    config = database_query.Config(allowed_tables=list(tables))
    return run_builtin(
        database_query.NAME, {"query": sql}, scope=scope("t1"), settings=settings_for(path), config=config
    )


def write(path: Path, sql: str, tables: tuple[str, ...] = ("orders",), max_rows: int = 100) -> ToolResult:
    config = database_write.Config(allowed_tables=list(tables), max_rows_affected=max_rows)
    return run_builtin(
        database_write.NAME, {"query": sql}, scope=scope("t1"), settings=settings_for(path), config=config
    )


def rows_of(path: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as connection:
        return connection.execute(sql).fetchall()


def test_a_query_answers_columns_and_rows(database: Path) -> None:
    result = query(
        database,
        "SELECT c.name, count(*) AS orders, sum(o.total) AS spent FROM orders o "
        "JOIN customers c ON c.id = o.customer_id GROUP BY c.name ORDER BY c.name",
    )

    assert result.output == {
        "columns": ["name", "orders", "spent"],
        "rows": [["Ada", 2, 19.75], ["Grace", 1, 40.0]],
        "row_count": 2,
        "truncated": False,
    }


def test_sqlite_functions_survive_the_rendering_of_the_checked_statement(database: Path) -> None:
    result = query(
        database,
        "SELECT strftime('%Y', placed) AS year, IFNULL(NULL, 'none') AS fallback, 'a:b' || '%s' AS text "
        "FROM orders WHERE placed LIKE '2024%' ORDER BY placed DESC LIMIT 1",
    )

    assert result.output["rows"] == [["2024", "none", "a:b%s"]]


def test_a_query_cannot_read_a_table_off_the_allowlist(database: Path) -> None:
    code, message = error_of(
        query(database, "SELECT o.id, s.value FROM orders o JOIN secret s ON s.id = o.id")
    )

    assert code == "table_not_allowed"
    assert "secret" in message


def test_the_read_transaction_is_read_only_even_for_a_statement_the_checks_would_have_refused(
    database: Path,
) -> None:
    def unchecked(sql: str, allowlist: _sql.Allowlist) -> str:
        return sql  # as if the parser had missed something

    result = _database.execute(
        "DELETE FROM orders",
        tool="database_query",
        tenant_id="t1",
        settings=settings_for(database),
        access=database_query.Config(allowed_tables=["orders"]),
        check=unchecked,
        read_only=True,
    )

    code, message = error_of(result)
    assert code == "database_error"
    assert "readonly database" in message
    assert rows_of(database, "SELECT count(*) FROM orders") == [(3,)]
    # the pooled connection is writable again for database_write
    assert write(database, "DELETE FROM orders WHERE id = 3").output == {"rows_affected": 1}


def test_a_large_result_is_cut_to_whole_rows_under_the_tool_result_limit(database: Path) -> None:
    with sqlite3.connect(database) as connection:
        connection.executemany(
            "INSERT INTO orders (customer_id, total, placed) VALUES (?, ?, ?)",
            [(1, n, "x" * 200) for n in range(2_000)],
        )

    result = query(database, "SELECT * FROM orders")

    assert result.output["truncated"] is True
    assert 100 < result.output["row_count"] == len(result.output["rows"]) < 2_003
    text = result.for_model()
    assert len(text) <= TOOL_RESULT_LIMIT
    assert json.loads(text) == result.output  # whole JSON, no marker: nothing downstream had to cut it


def test_a_runaway_query_is_stopped(database: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_database, "STATEMENT_TIMEOUT_SECONDS", 0.2)

    result = query(
        database, "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT max(x) FROM n"
    )

    assert error_of(result) == (
        "database_error",
        "OperationalError: the statement ran longer than 0.2 seconds and was stopped",
    )


def test_a_database_error_is_short_and_readable(database: Path) -> None:
    code, message = error_of(query(database, "SELECT nope FROM orders"))

    # the driver's one line, then the schema of the tables the statement names (the in-tool repair)
    first, *schema = message.splitlines()
    assert (code, first) == ("database_error", "OperationalError: no such column: nope")
    assert schema[0] == "The tables it names:" and schema[1].startswith("orders (")
    assert "  id integer PK" in schema


def test_a_missing_database_file_is_a_connect_failure_without_the_path(database: Path) -> None:
    missing = database.parent / "typo.db"

    code, message = error_of(query(missing, "SELECT * FROM orders"))

    assert (code, message) == ("database_error", "could not connect to the database")
    assert not missing.exists()


def test_sqlites_in_table_form_cannot_reach_a_table_off_the_allowlist(database: Path) -> None:
    def unchecked(sql: str, allowlist: _sql.Allowlist) -> str:
        return sql

    with sqlite3.connect(database) as connection:
        connection.executescript("CREATE TABLE secret_ids (id INTEGER); INSERT INTO secret_ids VALUES (1);")
    # the form is real: unchecked, SQLite reads the table through it
    leaked = _database.execute(
        "SELECT id FROM orders WHERE id IN secret_ids",
        tool="database_query",
        tenant_id="t1",
        settings=settings_for(database),
        access=database_query.Config(allowed_tables=["orders"]),
        check=unchecked,
        read_only=True,
    )
    assert leaked.output is not None, leaked.error
    assert leaked.output["rows"] == [[1]]

    assert error_of(query(database, "SELECT id FROM orders WHERE id IN secret_ids"))[0] == "table_not_allowed"
    allowed = query(
        database,
        "WITH vip AS (SELECT id FROM customers) SELECT id FROM orders WHERE customer_id IN vip ORDER BY id",
    )
    assert allowed.output["rows"] == [[1], [2], [3]]


def test_a_write_commits_and_counts_the_rows_it_changed(database: Path) -> None:
    inserted = write(database, "INSERT INTO orders (customer_id, total, placed) VALUES (2, 99, '2025-02-02')")
    updated = write(database, "UPDATE orders SET total = total * 2 WHERE customer_id = 1")
    deleted = write(database, "DELETE FROM orders WHERE total > 1000")

    assert inserted.output == {"rows_affected": 1}
    assert updated.output == {"rows_affected": 2}
    assert deleted.output == {"rows_affected": 0}
    assert rows_of(database, "SELECT id, total FROM orders ORDER BY id") == [
        (1, 25.0),
        (2, 40.0),
        (3, 14.5),
        (4, 99.0),
    ]


def test_a_write_with_returning_answers_its_rows(database: Path) -> None:
    result = write(database, "UPDATE orders SET total = 0 WHERE id IN (1, 2) RETURNING id, total")

    assert result.output == {
        "columns": ["id", "total"],
        "rows": [[1, 0.0], [2, 0.0]],
        "row_count": 2,
        "rows_affected": 2,
        "truncated": False,
    }


def test_a_refused_write_changes_nothing(database: Path) -> None:
    everything = write(database, "DELETE FROM orders")
    elsewhere = write(database, "DELETE FROM secret WHERE id = 1")
    smuggled = write(database, "INSERT INTO orders (total) VALUES (1); DROP TABLE secret")

    assert error_of(everything)[0] == "where_required"
    assert error_of(elsewhere)[0] == "table_not_allowed"
    assert error_of(smuggled)[0] == "invalid_query"
    assert rows_of(database, "SELECT count(*) FROM orders") == [(3,)]
    assert rows_of(database, "SELECT count(*) FROM secret") == [(1,)]


def test_a_failed_write_rolls_back(database: Path) -> None:
    with sqlite3.connect(database) as connection:
        connection.execute("CREATE UNIQUE INDEX one_per_day ON orders (placed)")

    result = write(database, "UPDATE orders SET placed = '2024-03-01' WHERE id >= 1")

    code, message = error_of(result)
    assert code == "database_error"
    assert "UNIQUE constraint failed" in message
    assert rows_of(database, "SELECT placed FROM orders ORDER BY id") == [
        ("2024-03-01",),
        ("2024-05-17",),
        ("2025-01-09",),
    ]


def seed_more_orders(path: Path, count: int) -> None:
    with sqlite3.connect(path) as connection:
        connection.executemany(
            "INSERT INTO orders (customer_id, total, placed) VALUES (?, ?, ?)",
            [(1, n, "2026-01-01") for n in range(count)],
        )


MASS_WRITES = [
    "DELETE FROM orders WHERE 1 = 1",
    "UPDATE orders SET total = 0 WHERE id > 0 OR TRUE",
    "DELETE FROM orders WHERE total IS NULL OR total IS NOT NULL",
    "UPDATE orders SET total = 0 WHERE id = id RETURNING id",
    "INSERT OR REPLACE INTO orders SELECT id, customer_id, 0, placed FROM orders",
    "INSERT INTO orders SELECT * FROM orders WHERE true ON CONFLICT (id) DO UPDATE SET total = 0",
]


@pytest.mark.parametrize("sql", MASS_WRITES)
def test_a_mass_write_changes_nothing_however_it_is_spelled(database: Path, sql: str) -> None:
    seed_more_orders(database, 20)
    before = rows_of(database, "SELECT * FROM orders ORDER BY id")

    result = write(database, sql, max_rows=5)

    code, message = error_of(result)
    assert code in ("where_required", "too_many_rows", "statement_not_allowed"), message
    assert rows_of(database, "SELECT * FROM orders ORDER BY id") == before


def test_a_write_past_max_rows_affected_is_rolled_back_and_says_so(database: Path) -> None:
    seed_more_orders(database, 3)  # 6 orders, 5 of them of customer 1

    over = write(database, "UPDATE orders SET total = -1 WHERE customer_id = 1", max_rows=4)
    within = write(database, "UPDATE orders SET total = -1 WHERE customer_id = 1", max_rows=5)

    assert error_of(over) == (
        "too_many_rows",
        "the statement would change 5 rows, more than this tool's max_rows_affected (4): it was rolled "
        "back and nothing changed. Narrow the WHERE clause to the rows you mean, or change them in "
        "smaller statements.",
    )
    assert within.output == {"rows_affected": 5}
    assert rows_of(database, "SELECT count(*) FROM orders WHERE total = -1") == [(5,)]


def test_the_write_limit_defaults_to_100_rows(database: Path) -> None:
    seed_more_orders(database, 120)
    config = database_write.Config(allowed_tables=["orders"])

    result = run_builtin(
        database_write.NAME,
        {"query": "DELETE FROM orders WHERE total >= 0"},
        scope=scope("t1"),
        settings=settings_for(database),
        config=config,
    )

    assert config.max_rows_affected == 100
    assert error_of(result)[0] == "too_many_rows"
    assert rows_of(database, "SELECT count(*) FROM orders") == [(123,)]


# --- S3 -------------------------------------------------------------------------------------------


@pytest.fixture
def bucket(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    name = f"stepwise-files-{uuid.uuid4().hex[:12]}"  # moto's state may be shared with the local stack
    with mock_aws():
        s3.reset()
        boto3.client("s3").create_bucket(Bucket=name)
        monkeypatch.setenv("STORAGE_BUCKET", name)
        yield name
        s3.reset()


def put(bucket: str, key: str, body: bytes, content_type: str | None = None) -> None:
    extra = {"ContentType": content_type} if content_type else {}
    boto3.client("s3").put_object(Bucket=bucket, Key=key, Body=body, **extra)


def read(tenant: str, **arguments: Any) -> ToolResult:
    return run_builtin(
        storage_read.NAME,
        arguments,
        scope=scope(tenant),
        settings=StaticSettings(),
        config=storage_read.Config(),
    )


def save(tenant: str, path: str, content: str) -> ToolResult:
    return run_builtin(
        storage_write.NAME,
        {"path": path, "content": content},
        scope=scope(tenant),
        settings=StaticSettings(),
        config=storage_write.Config(),
    )


def test_a_written_file_is_listed_and_downloaded_under_the_tenants_prefix(bucket: str) -> None:
    saved = save("acme", "./reports//q1.csv", "region,total\nnorth,12\n")
    listed = read("acme", operation="list")
    downloaded = read("acme", operation="download", path="reports/q1.csv")

    assert saved.output == {"path": "reports/q1.csv", "size": 22}
    stored = boto3.client("s3").head_object(Bucket=bucket, Key="tenants/acme/reports/q1.csv")
    assert stored["ContentType"] == "text/csv; charset=utf-8"
    assert [(item["path"], item["size"]) for item in listed.output["items"]] == [("reports/q1.csv", 22)]
    assert listed.output["items"][0]["last_modified"].endswith("+00:00")
    assert listed.output["next_offset"] is None
    assert downloaded.output == "region,total\nnorth,12\n"


def test_a_listing_pages_with_limit_and_offset_within_a_folder_and_prefix(bucket: str) -> None:
    for name in ("a1", "a2", "a3", "b1"):
        save("acme", f"logs/{name}.txt", name)
    save("acme", "other/a9.txt", "elsewhere")

    pages = [
        read("acme", operation="list", path="logs", prefix="a", limit=2, offset=o).output for o in (0, 2)
    ]

    assert [[i["path"] for i in page["items"]] for page in pages] == [
        ["logs/a1.txt", "logs/a2.txt"],
        ["logs/a3.txt"],
    ]
    assert [page["next_offset"] for page in pages] == [2, None]


def test_a_tenant_cannot_list_or_read_another_tenants_files(bucket: str) -> None:
    put(bucket, "tenants/beta/private/plan.txt", b"beta's plan")
    put(bucket, "tenants/alphabet/notes.txt", b"a tenant whose id starts like alpha's")
    put(bucket, "shared.txt", b"outside every tenant")
    save("alpha", "mine.txt", "alpha's own")

    listing = read("alpha", operation="list")
    assert [item["path"] for item in listing.output["items"]] == ["mine.txt"]
    for crafted in (
        "../beta/",
        "../beta/private/plan.txt",
        "/tenants/beta/",
        "..\\beta\\",
        "..",
        "../alphabet/",
    ):
        assert error_of(read("alpha", operation="list", prefix=crafted))[0] == "invalid_path", crafted
        assert error_of(read("alpha", operation="list", path=crafted))[0] == "invalid_path", crafted
        assert error_of(read("alpha", operation="download", path=crafted))[0] == "invalid_path", crafted
    # what would be a traversal on a file system is just a name inside alpha's prefix here
    assert read("alpha", operation="list", prefix="%2e%2e/beta").output["items"] == []
    assert (
        error_of(read("alpha", operation="download", path="%2e%2e/beta/private/plan.txt"))[0] == "not_found"
    )
    assert error_of(read("alpha", operation="download", path="../../shared.txt"))[0] == "invalid_path"
    assert error_of(save("alpha", "../beta/private/plan.txt", "overwritten"))[0] == "invalid_path"
    body = boto3.client("s3").get_object(Bucket=bucket, Key="tenants/beta/private/plan.txt")["Body"].read()
    assert body == b"beta's plan"


def test_a_binary_file_is_answered_with_a_presigned_url_valid_for_15_minutes(bucket: str) -> None:
    put(bucket, "tenants/acme/images/logo.png", PNG, "image/png")

    result = read("acme", operation="download", path="images/logo.png")

    assert {k: v for k, v in result.output.items() if k != "url"} == {
        "path": "images/logo.png",
        "size": len(PNG),
        "content_type": "image/png",
    }
    url = urlsplit(result.output["url"])
    assert bucket in url.netloc + url.path and url.path.endswith("/tenants/acme/images/logo.png")
    params = parse_qs(url.query)
    assert params["X-Amz-Expires"] == ["900"]
    assert params["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"] and params["X-Amz-Signature"]


def test_bytes_that_are_not_utf8_get_a_url_even_without_a_content_type(bucket: str) -> None:
    put(bucket, "tenants/acme/blob", PNG)
    put(bucket, "tenants/acme/latin1.txt", "café".encode("latin-1"), "text/plain")
    put(bucket, "tenants/acme/readme", "plain UTF-8 — ok".encode())

    assert "url" in read("acme", operation="download", path="blob").output
    assert "url" in read("acme", operation="download", path="latin1.txt").output
    assert read("acme", operation="download", path="readme").output == "plain UTF-8 — ok"


def test_a_long_text_file_is_cut_with_a_marker_under_the_tool_result_limit(bucket: str) -> None:
    save("acme", "ascii.txt", "a" * 60_000)
    save("acme", "wide.txt", "€" * 100_000)  # 300,000 bytes: only the start is read

    for path, size in (("ascii.txt", 60_000), ("wide.txt", 300_000)):
        text = read("acme", operation="download", path=path).output
        assert len(text) == TOOL_RESULT_LIMIT
        assert text.endswith(f"characters of a {size:,}-byte file]")
        assert ToolResult(output=text).for_model() == text  # not cut again downstream


def test_an_empty_file_is_empty_text(bucket: str) -> None:
    save("acme", "empty.txt", "")

    assert read("acme", operation="download", path="empty.txt").output == ""


def test_a_missing_file_or_bucket_is_a_readable_error(bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert error_of(read("acme", operation="download", path="nope.txt")) == (
        "not_found",
        "no file at 'nope.txt'",
    )

    monkeypatch.setenv("STORAGE_BUCKET", f"{bucket}-gone")
    assert error_of(read("acme", operation="list"))[0] == "not_configured"
    assert error_of(save("acme", "a.txt", "x"))[0] == "not_configured"


# --- knowledge_search: owners from bedrock-agent (moto) ------------------------------------------


def _knowledge_base(client: Any, name: str, tags: dict[str, str] | None) -> str:
    answer = client.create_knowledge_base(
        name=name,
        roleArn="arn:aws:iam::123456789012:role/kb",
        knowledgeBaseConfiguration={
            "type": "VECTOR",
            "vectorKnowledgeBaseConfiguration": {
                "embeddingModelArn": "arn:aws:bedrock:us-east-1::foundation-model/amazon.titan-embed-text-v2"
            },
        },
        storageConfiguration={"type": "OPENSEARCH_SERVERLESS"},
        **({"tags": tags} if tags else {}),
    )
    return str(answer["knowledgeBase"]["knowledgeBaseId"])


def test_knowledge_base_owners_are_read_from_bedrock_agent_tags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        client = boto3.client("bedrock-agent", region_name="us-east-1")
        # moto's ids are the name plus 8 hex digits: two-letter names give Bedrock's 10-character form.
        mine = _knowledge_base(client, "mi", {"stepwise:tenant": "t1"})
        theirs = _knowledge_base(client, "th", {"stepwise:tenant": "t2"})
        untagged = _knowledge_base(client, "un", None)
        owners = knowledge_search.BedrockOwners(lambda region: client)

        assert owners.owner(mine, "us-east-1") == "t1"
        assert owners.owner(theirs, "us-east-1") == "t2"
        assert owners.owner(untagged, "us-east-1") is None
        assert owners.owner("NOSUCHKB00", "us-east-1") is None

        # Through the tool: the other tenant's base is refused before Retrieve (which moto lacks)
        config = knowledge_search.Config.model_validate(
            {"knowledge_bases": [{"name": "mine", "id": mine}, {"name": "theirs", "id": theirs}]}
        )
        refused = knowledge_search.run(
            knowledge_search.Arguments(query="q"),
            scope=ToolScope("t1", "a1", "r1", "s1"),
            settings=StaticSettings(),
            config=config,
            client_factory=lambda region: pytest.fail("Retrieve must not be called"),
            owners=owners,
        )
        assert refused.error is not None and refused.error.code == "knowledge_base_not_allowed"
        assert "theirs" in refused.error.message


# --- kb_doc_read: a knowledge-base document under the storage rules ----------------------------------


def read_document(tenant: str, **arguments: Any) -> ToolResult:
    from stepwise.tools.builtin import kb_doc_read

    return run_builtin(
        kb_doc_read.NAME,
        arguments,
        scope=scope(tenant),
        settings=StaticSettings(),
        config=kb_doc_read.Config(),
    )


def test_kb_doc_read_reads_a_pdf_as_text_in_pages_within_the_tenants_storage(bucket: str) -> None:
    from tests.fakes.files import pdf

    put(bucket, "tenants/acme/kb/policy.pdf", pdf("Travel needs approval"), "application/pdf")
    put(bucket, "tenants/acme/kb/logo.bin", bytes(range(256)), "application/zip")
    source = f"s3://{bucket}/tenants/acme/kb/policy.pdf"

    whole = read_document("acme", source=source)
    first = read_document("acme", source="kb/policy.pdf", limit=10)
    rest = read_document("acme", source="kb/policy.pdf", offset=first.output["next_offset"])

    assert "Travel needs approval" in whole.output["text"] and whole.output["next_offset"] is None
    assert whole.output["path"] == "kb/policy.pdf" and whole.output["source"] == source
    assert first.output["text"] + rest.output["text"] == whole.output["text"]
    assert error_of(read_document("acme", source="kb/logo.bin"))[0] == "unsupported_document"
    assert error_of(read_document("acme", source="kb/../../other/x.md"))[0] == "invalid_path"
    assert error_of(read_document("other", source=source))[0] == "source_not_allowed"
    assert error_of(read_document("other", source="kb/policy.pdf"))[0] == "not_found"  # their own prefix
