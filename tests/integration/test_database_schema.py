"""database_schema and the schema a failed database_query quotes, in a real run on the local stack, as
a new user sets them up: a DATABASE_URL setting (a SQLite file in the tenant's directory), the two tools
with the same allowlist, and a model that misspells a column once."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stepwise_local.stack import LocalStack
from tests.integration.support import wait_for_run


@pytest.fixture
def shop(stack: LocalStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    from stepwise.settings.accessor import invalidate
    from stepwise.tools.builtin import _database

    monkeypatch.setenv("STEPWISE_SQLITE_DIR", str(tmp_path))
    (tmp_path / "local").mkdir()
    with sqlite3.connect(tmp_path / "local" / "shop.db") as connection:
        connection.executescript(
            """
            CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
            CREATE TABLE orders (id INTEGER PRIMARY KEY,
                                 customer_id INTEGER NOT NULL REFERENCES customers (id), total REAL);
            CREATE TABLE salaries (id INTEGER PRIMARY KEY, amount REAL);
            INSERT INTO customers VALUES (1, 'Ada'), (2, 'Grace');
            INSERT INTO orders VALUES (1, 1, 12.5), (2, 2, 40), (3, 1, 7.25);
            """
        )
    assert stack.invoke_api("PUT", "/v1/settings/DATABASE_URL", {"value": "sqlite:///shop.db"})[0] == 200
    invalidate("local")
    yield
    stack.invoke_api("DELETE", "/v1/settings/DATABASE_URL")
    invalidate("local")
    _database.engine_for.cache_clear()


def test_the_model_reads_the_schema_and_repairs_a_misspelled_column_in_one_turn(
    stack: LocalStack, shop: None
) -> None:
    access = {"allowed_tables": ["orders", "customers"]}
    tools = [{"name": "database_schema", "config": access}, {"name": "database_query", "config": access}]
    status, _, agent = stack.invoke_api("POST", "/v1/agents", {"name": "sql", "tools": tools})
    assert status == 201, agent
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "database_schema", "arguments": {}}]},
        {
            "tool_calls": [
                {"name": "database_query", "arguments": {"query": "SELECT sum(amount) FROM orders"}}
            ]
        },
        {"tool_calls": [{"name": "database_query", "arguments": {"query": "SELECT sum(total) FROM orders"}}]},
        {"text": "59.75"},
    ]
    _, _, accepted = stack.invoke_api(
        "POST", f"/v1/agents/{agent['agent_id']}/runs", {"message": "go", "script": script}
    )
    run = wait_for_run(stack, accepted["run_id"])
    _, _, page = stack.invoke_api("GET", f"/v1/runs/{run['run_id']}/events?after=0&wait=2")
    schema, failed, repaired = [e["data"] for e in page["events"] if e["type"] == "tool_result"]

    assert run["status"] == "succeeded", run
    assert schema["output"].splitlines()[1:] == [
        "customers (~2 rows)",
        "  id integer PK",
        "  name text NOT NULL",
        "orders (~3 rows)",
        "  id integer PK",
        "  customer_id integer NOT NULL FK → customers.id",
        "  total real",
    ]  # salaries is in the database, not in the allowlist: not shown
    message = failed["error"]["message"]
    assert message.startswith("OperationalError: no such column: amount")
    assert message.endswith(
        "The tables it names:\norders (~3 rows)\n  id integer PK\n"
        "  customer_id integer NOT NULL FK → customers.id\n  total real"
    )
    assert repaired["output"]["rows"] == [[59.75]]
