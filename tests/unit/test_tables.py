"""Large tables described, not pasted: which results are tables, what the model reads instead, how
result_read pages, and how a description ages in compaction and in the declarations."""

import json
from typing import Any

from stepwise.agents.models import Agent
from stepwise.core.schema import utcnow
from stepwise.loop.compaction import DESCRIBED_PLACEHOLDER_NOTE, placeholder
from stepwise.loop.prompt import tool_declarations
from stepwise.tools import tables

RECORDS = [{"sku": f"sku-{i}", "qty": i, "price": 2.5, "tag": None if i % 4 else "promo"} for i in range(200)]


def agent(**fields: Any) -> Agent:
    now = utcnow()
    return Agent.model_validate(
        {"name": "a", "agent_id": "agt_1", "created_at": now, "updated_at": now, **fields}
    )


def test_json_records_become_columns_first_rows_and_the_row_count() -> None:
    text = json.dumps(RECORDS)

    described = json.loads(tables.describe(text, "call_7") or "null")

    assert described["rows"] == 200 and described["format"] == "json records"
    assert described["first_rows"] == RECORDS[:20]
    columns = {c["name"]: c for c in described["columns"]}
    assert columns["qty"] == {"name": "qty", "type": "number", "min": 0, "max": 199, "sum": 19900}
    assert columns["tag"] == {"name": "tag", "type": "string", "nulls": 150, "distinct": 1}
    assert 'result_read with tool_call_id "call_7"' in described["note"]


def test_a_database_answer_keeps_its_small_fields_beside_the_description() -> None:
    answer = {"columns": ["id", "city"], "rows": [[i, f"city {i}"] for i in range(800)], "truncated": False}

    described = json.loads(tables.describe(json.dumps(answer), "c") or "null")

    assert described["format"] == "json rows" and described["path"] == "rows"
    assert described["fields"] == {"truncated": False} and described["first_rows"][19] == [19, "city 19"]
    page = tables.page(json.dumps(answer), "c", offset=790, limit=50)
    assert page is not None and page["rows"] == answer["rows"][790:] and page["next_offset"] is None


def test_csv_text_is_a_table_and_its_numbers_are_read_as_numbers() -> None:
    text = "day;visits;country\n" + "".join(f"2026-01-{i % 28 + 1:02d};{i};FR\n" for i in range(600))

    described = json.loads(tables.describe(text, "c") or "null")

    assert described["format"] == "csv" and described["rows"] == 600
    assert [c["name"] for c in described["columns"]] == ["day", "visits", "country"]
    assert described["columns"][1]["sum"] == sum(range(600))
    page = tables.page(text, "c", offset=10, limit=2)
    assert page is not None and page["rows"] == [["2026-01-11", "10", "FR"], ["2026-01-12", "11", "FR"]]
    assert page["next_offset"] == 12


def test_what_is_not_a_large_table_travels_as_it_is() -> None:
    prose = "We met on Monday, and then, as agreed, we left.\nIt rained.\n" * 300
    ragged = "a,b\n" + "1,2,3\n" * 2_000
    assert tables.describe(json.dumps(RECORDS[:20] * 1), "c") is None  # 20 rows: the preview is the table
    assert tables.describe(json.dumps(RECORDS[:30]), "c") is None  # under DESCRIBE_CHARS
    assert tables.describe(prose, "c") is None
    assert tables.describe(ragged, "c") is None
    assert tables.describe(json.dumps({"text": "x" * 50_000}), "c") is None


def test_wide_rows_stop_the_preview_early_and_a_page_stays_bounded() -> None:
    wide = [{"id": i, **{f"c{j}": "w" * 150 for j in range(40)}} for i in range(200)]
    text = json.dumps(wide)

    described = tables.describe(text, "c") or ""
    page = tables.page(text, "c", limit=500)

    assert len(described) < tables.PREVIEW_CHARS + 2_000
    assert len(json.loads(described)["first_rows"]) < 20
    assert page is not None and len(json.dumps(page["rows"])) <= tables.PAGE_CHARS + 10
    assert page["next_offset"] == len(page["rows"])


def test_an_old_description_compacts_to_a_placeholder_that_points_at_result_read() -> None:
    described = tables.describe(json.dumps(RECORDS), "call_7") or ""

    short = json.loads(placeholder(described) or "null")

    assert short["kept"]["tool_call_id"] == "call_7" and short["kept"]["rows"] == 200
    assert short["note"] == DESCRIBED_PLACEHOLDER_NOTE


def test_result_read_is_declared_from_the_first_call_so_the_declarations_never_change_mid_run() -> None:
    tool = {"type": "client", "name": "export", "description": "d", "input_schema": {"type": "object"}}
    a = agent(tools=[tool])
    call = {
        "role": "assistant",
        "tool_calls": [{"id": "c1", "function": {"name": "export", "arguments": "{}"}}],
    }
    pasted = [{"role": "user", "content": "q"}, call, {"role": "tool", "tool_call_id": "c1", "content": "[]"}]
    shown = [*pasted[:2], {**pasted[2], "content": tables.describe(json.dumps(RECORDS), "c1")}]

    first = tool_declarations(a, pasted[:1])
    assert [d["function"]["name"] for d in first] == ["export", "result_read"]
    # the first described table changes nothing: the same bytes before and after it
    assert json.dumps(tool_declarations(a, shown)) == json.dumps(first) == json.dumps(tool_declarations(a))


def test_an_agent_without_tools_declares_nothing_until_its_history_holds_a_description() -> None:
    bare = agent(tools=[])
    shown = [{"role": "tool", "tool_call_id": "c1", "content": tables.describe(json.dumps(RECORDS), "c1")}]

    assert tool_declarations(bare, [{"role": "user", "content": "q"}]) == []
    assert [d["function"]["name"] for d in tool_declarations(bare, shown)] == ["result_read"]


def test_a_long_text_is_shown_from_its_start_and_paged_in_characters() -> None:
    text = "".join(f"line {i}\n" for i in range(20_000))

    shown = json.loads(tables.describe_text(text, "call_1"))
    first = tables.page_text(text, "call_1", tables.TEXT_HEAD_CHARS, 10**9)
    last = tables.page_text(text, "call_1", len(text) - 5)

    assert shown["described"] is True and tables.is_description(tables.describe_text(text, "call_1"))
    assert shown["first_chars"] == text[: tables.TEXT_HEAD_CHARS] and shown["chars"] == len(text)
    assert f"offset {tables.TEXT_HEAD_CHARS}" in shown["note"]
    assert first["text"] == text[tables.TEXT_HEAD_CHARS : tables.TEXT_HEAD_CHARS + tables.PAGE_CHARS]
    assert first["next_offset"] == tables.TEXT_HEAD_CHARS + tables.PAGE_CHARS
    assert last == {
        "tool_call_id": "call_1",
        "total_chars": len(text),
        "offset": len(text) - 5,
        "text": text[-5:],
        "next_offset": None,
    }
