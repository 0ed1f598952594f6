"""Big tables described, not pasted.

A tool result that is a large table (a JSON array of records, a `{columns, rows}` answer such as the
database tools give, an object holding one such array, or CSV text) reaches the model as a description:
its columns (with a type and, for numbers, min, max and sum), the first rows and the row count. The whole
result is stored and the model pages through it with the builtin `result_read`. The model needs to know
what is in a table, not to hold it: a pasted table is paid again on every later call of the session.

Pure functions on text: the loop decides when to describe (tools/…/calls.py) and where the whole is kept
(store/described.py).
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from typing import Any, Literal

from stepwise.core import safejson

PREVIEW_ROWS = 20
DESCRIBE_CHARS = 8_000  # a table shorter than this (about 2,000 tokens) travels whole: reading it is cheap
PREVIEW_CHARS = 12_000  # the first rows stop earlier when they are wide
MAX_COLUMNS = 50  # described one by one; the rest are counted
CELL_CHARS = 200  # of one string cell, in the preview
DISTINCT_CAP = 1_000  # string values counted as distinct up to this
DEFAULT_PAGE = 50
MAX_PAGE = 500
PAGE_CHARS = 40_000  # of one result_read page, whatever `limit` asked
MARKER = '{"described": true'  # how a description's text begins (see `is_description`)
CSV_DELIMITERS = ",;\t|"

RESULT_READ = "result_read"  # the builtin that pages through a described result
# Long text that is not a table (a log, a page): the model reads its start and pages on in characters.
TEXT_HEAD_CHARS = 10_000  # what HTTP tools used to show of any answer, before they kept it whole
TEXT_PAGE_DEFAULT = 10_000
Format = Literal["json records", "json rows", "csv"]


@dataclass(frozen=True)
class Table:
    """A table found in a tool result: rows as the tool wrote them (objects or lists) and the columns."""

    format: Format
    columns: list[str]
    rows: list[Any]
    path: str | None = None  # the field of a JSON object that holds the rows
    fields: dict[str, Any] | None = None  # that object's other small fields (counts, flags)

    def cells(self, row: Any) -> list[Any]:
        if isinstance(row, dict):
            return [row.get(column) for column in self.columns]
        return list(row)


def parse(text: str) -> Table | None:
    """The table `text` holds, or None when it holds something else."""
    stripped = text.lstrip()
    if stripped[:1] in ("[", "{"):
        try:
            value = safejson.loads(stripped)
        except ValueError:
            return None  # JSON-looking text that is not JSON is not a CSV either
        return _json_table(value)
    return _csv_table(text)


def describe(text: str, tool_call_id: str) -> str | None:
    """The description the model reads instead of `text`, or None when `text` is not a large table
    (or the description would not be much shorter)."""
    if len(text) < DESCRIBE_CHARS:
        return None
    table = parse(text)
    if table is None or len(table.rows) <= PREVIEW_ROWS:
        return None
    preview: list[Any] = []
    size = 0
    for row in table.rows[:PREVIEW_ROWS]:
        clipped = _clip_row(row)
        size += len(json.dumps(clipped, ensure_ascii=False, default=str))
        if preview and size > PREVIEW_CHARS:
            break
        preview.append(clipped)
    described: dict[str, Any] = {
        "described": True,
        "tool_call_id": tool_call_id,
        "format": table.format,
        "rows": len(table.rows),
        "columns": [_column(table, index, name) for index, name in enumerate(table.columns[:MAX_COLUMNS])],
    }
    if len(table.columns) > MAX_COLUMNS:
        described["more_columns"] = len(table.columns) - MAX_COLUMNS
    if table.path is not None:
        described["path"] = table.path
    if table.fields:
        described["fields"] = table.fields
    described["first_rows"] = preview
    described["note"] = (
        f"A table of {len(table.rows)} rows, described to save context: these are the first {len(preview)}. "
        f'The whole result is stored: call result_read with tool_call_id "{tool_call_id}" and offset and '
        "limit (in rows) to read any of them."
    )
    rendered = json.dumps(described, ensure_ascii=False, default=str)
    return rendered if len(rendered) * 2 <= len(text) else None


def describe_text(text: str, tool_call_id: str) -> str:
    """What the model reads instead of a long text that is not a table: its first TEXT_HEAD_CHARS
    characters and a note on how to read the rest (the loop decides when: past the tool's limit)."""
    head = text[:TEXT_HEAD_CHARS]
    described = {
        "described": True,
        "tool_call_id": tool_call_id,
        "format": "text",
        "chars": len(text),
        "first_chars": head,
        "note": (
            f"A text of {len(text):,} characters, shown from the start to save context: these are the "
            f"first {len(head):,}. The whole result is stored: call result_read with tool_call_id "
            f'"{tool_call_id}", offset {len(head)} and limit (in characters, at most {PAGE_CHARS:,}) to '
            "read on."
        ),
    }
    return json.dumps(described, ensure_ascii=False)


def page_text(
    text: str, tool_call_id: str, offset: int = 0, limit: int = TEXT_PAGE_DEFAULT
) -> dict[str, Any]:
    """Characters offset..offset+limit of a stored text (at most PAGE_CHARS)."""
    limit = max(1, min(limit, PAGE_CHARS))
    end = min(offset + limit, len(text))
    return {
        "tool_call_id": tool_call_id,
        "total_chars": len(text),
        "offset": offset,
        "text": text[offset:end],
        "next_offset": end if end < len(text) else None,
    }


def is_description(content: Any) -> bool:
    return isinstance(content, str) and content.startswith(MARKER)


def page(text: str, tool_call_id: str, offset: int = 0, limit: int = DEFAULT_PAGE) -> dict[str, Any] | None:
    """Rows offset..offset+limit of the stored table, as the tool wrote them, at most PAGE_CHARS of
    them (never fewer than one row); None when the stored text is not a table."""
    table = parse(text)
    if table is None:
        return None
    limit = max(1, min(limit, MAX_PAGE))
    rows: list[Any] = []
    size = 0
    for row in table.rows[offset : offset + limit]:
        size += len(json.dumps(row, ensure_ascii=False, default=str)) + 2
        if rows and size > PAGE_CHARS:
            break
        rows.append(row)
    end = offset + len(rows)
    return {
        "tool_call_id": tool_call_id,
        "total_rows": len(table.rows),
        "offset": offset,
        "columns": table.columns,
        "rows": rows,
        "next_offset": end if end < len(table.rows) else None,
    }


# --- Finding tables ------------------------------------------------------------------------------


def _json_table(value: Any) -> Table | None:
    if isinstance(value, list):
        return _records(value)
    if not isinstance(value, dict):
        return None
    columns, rows = value.get("columns"), value.get("rows")
    if (
        isinstance(columns, list)
        and columns
        and all(isinstance(c, str) for c in columns)
        and isinstance(rows, list)
        and all(isinstance(r, list) and len(r) == len(columns) for r in rows)
    ):
        return Table("json rows", list(columns), rows, path="rows", fields=_small(value, {"columns", "rows"}))
    # An object around one array of records ({"items": [...], "total": 500}): the largest such array.
    candidates = [(key, _records(item)) for key, item in value.items() if isinstance(item, list)]
    found = [(key, table) for key, table in candidates if table is not None]
    if not found:
        return None
    key, table = max(found, key=lambda pair: len(pair[1].rows))
    return Table(table.format, table.columns, table.rows, path=key, fields=_small(value, {key}))


def _records(items: list[Any]) -> Table | None:
    if not items or not all(isinstance(item, dict) for item in items):
        return None
    columns: dict[str, None] = {}  # every key, in the order first seen
    for item in items:
        columns.update(dict.fromkeys(item))
    return Table("json records", list(columns), items)


def _csv_table(text: str) -> Table | None:
    sample = text[:8_192]
    if "\n" not in sample.strip():
        return None
    try:
        dialect: Any = csv.Sniffer().sniff(sample, delimiters=CSV_DELIMITERS)
    except csv.Error:
        dialect = csv.excel
    try:
        lines = [row for row in csv.reader(io.StringIO(text), dialect) if row]
    except csv.Error:
        return None
    if len(lines) < 2:
        return None
    header, rows = lines[0], lines[1:]
    # Prose with a comma here and there is not a table: every row must have the header's width.
    if len(header) < 2 or any(len(row) != len(header) for row in rows):
        return None
    return Table("csv", header, rows)


# --- Describing ----------------------------------------------------------------------------------


def _column(table: Table, index: int, name: str) -> dict[str, Any]:
    values = [cells[index] if index < len(cells) else None for cells in map(table.cells, table.rows)]
    if table.format == "csv":
        values = [_csv_value(v) for v in values]
    present = [v for v in values if v is not None]
    column: dict[str, Any] = {"name": name, "type": _kind(present)}
    nulls = len(values) - len(present)
    if nulls:
        column["nulls"] = nulls
    numbers = [v for v in present if isinstance(v, int | float) and not isinstance(v, bool)]
    if numbers and len(numbers) == len(present):
        finite = [float(v) for v in numbers if math.isfinite(v)]
        if finite:
            column["min"], column["max"] = _num(min(numbers)), _num(max(numbers))
            column["sum"] = _num(math.fsum(finite))
    elif column["type"] == "string":
        distinct = set()
        for v in present:
            distinct.add(v)
            if len(distinct) > DISTINCT_CAP:
                break
        column["distinct"] = len(distinct) if len(distinct) <= DISTINCT_CAP else f">{DISTINCT_CAP}"
    return column


def _kind(values: list[Any]) -> str:
    kinds = {_one_kind(v) for v in values}
    if not kinds:
        return "null"
    return kinds.pop() if len(kinds) == 1 else "mixed"


def _one_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _csv_value(cell: str | None) -> Any:
    """A CSV cell as the number it spells, None when empty, else the text."""
    if cell is None or cell == "":
        return None
    try:
        return int(cell)
    except ValueError:
        pass
    try:
        number = float(cell)
    except ValueError:
        return cell
    return number if math.isfinite(number) else cell


def _num(value: float | int) -> float | int:
    if isinstance(value, float):
        rounded = round(value, 6)
        return int(rounded) if rounded.is_integer() and abs(rounded) < 2**53 else rounded
    return value


def _clip_row(row: Any) -> Any:
    if isinstance(row, dict):
        return {key: _clip_cell(value) for key, value in row.items()}
    return [_clip_cell(value) for value in row]


def _clip_cell(value: Any) -> Any:
    if isinstance(value, str) and len(value) > CELL_CHARS:
        return value[:CELL_CHARS] + f"…[{len(value) - CELL_CHARS} more characters]"
    if isinstance(value, dict | list):
        rendered = json.dumps(value, ensure_ascii=False, default=str)
        return value if len(rendered) <= CELL_CHARS else rendered[:CELL_CHARS] + "…"
    return value


def _small(obj: dict[str, Any], skip: set[str]) -> dict[str, Any] | None:
    """The object's scalar fields beside the rows (row_count, truncated, next_token...)."""
    kept = {
        key: _clip_cell(value)
        for key, value in obj.items()
        if key not in skip and (value is None or isinstance(value, str | int | float | bool))
    }
    return kept or None
