"""The bench's DynamoDB capacity rules (bench/capacity.py) and request rewriting (bench/meter.py)."""

from pathlib import Path

from bench.capacity import (
    Index,
    Table,
    examining,
    index_writes,
    item_size,
    number_size,
    read_units,
    tables_from_template,
    value_size,
    write_cost,
    write_units,
)
from stepwise_local.cfn_yaml import load_template

ROOT = Path(__file__).resolve().parents[2]


def s(text: str) -> dict[str, str]:
    return {"S": text}


def test_number_size_counts_significant_digits_two_to_a_byte_plus_one() -> None:
    assert number_size("123") == 3
    assert number_size("1000") == 2  # trailing zeros do not count
    assert number_size("0.001") == 2  # nor leading ones
    assert number_size("0") == 2
    assert number_size("-12.34") == 3


def test_item_size_is_names_plus_values() -> None:
    assert item_size({"ab": s("xyz")}) == 5
    assert item_size({"n": {"N": "12"}, "ok": {"BOOL": True}, "z": {"NULL": True}}) == 1 + 2 + 2 + 1 + 1 + 1
    assert item_size({"b": {"B": b"\x00\x01"}}) == 3
    assert item_size({"b": {"B": "AAE="}}) == 3  # moto's JSON holds binary base64-encoded
    assert item_size({"é": s("é")}) == 4  # UTF-8 bytes, names too
    assert item_size(None) == 0


def test_lists_and_maps_cost_three_bytes_and_one_per_element() -> None:
    assert value_size({"L": [s("a"), s("bc")]}) == 3 + (1 + 1) + (2 + 1)
    assert value_size({"M": {"k": s("v")}}) == 3 + 1 + 1 + 1
    assert value_size({"SS": ["a", "bc"]}) == 3


def test_read_units_round_up_to_4_kb_with_a_minimum() -> None:
    assert read_units(0, consistent=False) == 0.5  # an absent item or an empty page still costs
    assert read_units(4096, consistent=True) == 1.0
    assert read_units(4097, consistent=True) == 2.0
    assert read_units(4097, consistent=False) == 1.0
    assert read_units(100, consistent=True, transactional=True) == 2.0


def test_write_units_round_up_to_1_kb_with_a_minimum() -> None:
    assert write_units(0) == 1
    assert write_units(1024) == 1
    assert write_units(1025) == 2
    assert write_units(1025, transactional=True) == 4


RUNS = Table(
    "Runs",
    ("tenant_id", "run_id"),
    (
        Index("by_agent", ("agent_key", "run_id"), "ALL"),
        Index("keys", ("session_key",), "KEYS_ONLY"),
        Index("some", ("session_key",), "INCLUDE", ("status",)),
    ),
)
BASE = {"tenant_id": s("t"), "run_id": s("r")}


def test_an_item_lacking_an_index_key_is_not_in_that_index() -> None:
    assert RUNS.entry(RUNS.indexes[0], BASE) is None
    assert index_writes(RUNS, None, BASE) == {}
    assert index_writes(RUNS, None, {**BASE, "agent_key": s("a")}) == {"by_agent": 1}


def test_index_writes_follow_what_changed_in_each_entry() -> None:
    before = {**BASE, "agent_key": s("a"), "session_key": s("x"), "status": s("running"), "n": {"N": "1"}}
    # A non-key, non-projected attribute: only the ALL index's entry changes.
    assert index_writes(RUNS, before, {**before, "n": {"N": "2"}}) == {"by_agent": 1}
    # A projected one: INCLUDE changes too; KEYS_ONLY does not.
    assert index_writes(RUNS, before, {**before, "status": s("done")}) == {"by_agent": 1, "some": 1}
    # An index key changes: a delete and a put in each index keyed on it.
    assert index_writes(RUNS, before, {**before, "session_key": s("y")}) == {
        "by_agent": 1,
        "keys": 2,
        "some": 2,
    }
    # The key attribute removed: the entry is deleted.
    removed = {k: v for k, v in before.items() if k != "agent_key"}
    assert index_writes(RUNS, before, removed)["by_agent"] == 1
    # Nothing changed: nothing to write.
    assert index_writes(RUNS, before, dict(before)) == {}


def test_index_entry_size_sets_its_units() -> None:
    big = {**BASE, "agent_key": s("a"), "blob": s("x" * 3000)}
    assert index_writes(RUNS, None, big) == {"by_agent": 3}


def test_write_cost_takes_the_larger_image_and_a_failed_condition_the_existing_item() -> None:
    old = {**BASE, "agent_key": s("a"), "blob": s("x" * 2000)}
    new = {**BASE, "agent_key": s("a")}
    cost = write_cost(RUNS, old, new, succeeded=True)
    assert (cost.table, cost.indexes, cost.total) == (2, {"by_agent": 1}, 3)
    failed = write_cost(RUNS, old, old, succeeded=False)
    assert (failed.table, failed.indexes) == (2, {})
    assert write_cost(RUNS, None, None, succeeded=False).table == 1
    deleted = write_cost(RUNS, old, None, succeeded=True)
    assert (deleted.table, deleted.indexes) == (2, {"by_agent": 2})


def test_tables_and_indexes_come_from_template_yaml() -> None:
    tables = tables_from_template(load_template(ROOT / "template.yaml"))
    runs = tables["RunsTable"]
    assert runs.keys == ("tenant_id", "run_id")
    assert {(i.name, i.keys, i.projection) for i in runs.indexes} == {
        ("by_agent", ("agent_key", "run_id"), "ALL"),
        ("by_session", ("session_key", "run_id"), "ALL"),
    }
    assert tables["RunEventsTable"].indexes == ()


def test_examining_drops_filter_and_projection_and_their_unused_names() -> None:
    params = {
        "TableName": "T",
        "KeyConditionExpression": "#pk = :pk",
        "FilterExpression": "#st = :st",
        "ProjectionExpression": "#a",
        "Select": "SPECIFIC_ATTRIBUTES",
        "ExpressionAttributeNames": {"#pk": "pk", "#st": "status", "#a": "a"},
        "ExpressionAttributeValues": {":pk": s("p"), ":st": s("x")},
        "Limit": 5,
        "ExclusiveStartKey": {"pk": s("p")},
    }
    assert examining(params) == {
        "TableName": "T",
        "KeyConditionExpression": "#pk = :pk",
        "ExpressionAttributeNames": {"#pk": "pk"},
        "ExpressionAttributeValues": {":pk": s("p")},
        "Limit": 5,
        "ExclusiveStartKey": {"pk": s("p")},
    }
    assert examining(
        {"TableName": "T", "FilterExpression": "a = :v", "ExpressionAttributeValues": {":v": s("x")}}
    ) == {"TableName": "T"}
