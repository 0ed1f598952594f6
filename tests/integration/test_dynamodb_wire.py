"""The wire operations behind each pynamodb call that tests/contract/dynamodb_access.py maps to IAM
actions, recorded from botocore against moto: the contract test's table is what pynamodb really
sends, with no DescribeTable before an item operation (pynamodb 6 builds table metadata from the
model class), transactions as their items' actions, and a count without a hash key as DescribeTable."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from moto import mock_aws
from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.connection import Connection
from pynamodb.indexes import AllProjection, GlobalSecondaryIndex
from pynamodb.models import Model
from pynamodb.transactions import TransactGet, TransactWrite

from tests.contract import dynamodb_access as access

REGION = "us-east-1"


class ByOwner(GlobalSecondaryIndex["Thing"]):
    class Meta:
        index_name = "by_owner"
        projection = AllProjection()

    owner = UnicodeAttribute(hash_key=True)


class Thing(Model):
    class Meta:
        table_name = "things"
        region = REGION

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    owner = UnicodeAttribute(default="o")
    n = NumberAttribute(default=0)
    by_owner = ByOwner()


Recorder = Callable[[Callable[[], Any]], list[str]]


@pytest.fixture
def wire(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    with mock_aws():
        Thing._connection = None
        Thing.create_table(read_capacity_units=1, write_capacity_units=1, wait=True)
        Thing("a", "1").save()
        Thing("a", "2").save()
        sent: list[str] = []
        connection = Connection(region=REGION)
        for client in (Thing._get_connection().connection.client, connection.client):
            client.meta.events.register("before-call.dynamodb.*", lambda model, **_: sent.append(model.name))

        def record(operation: Callable[[], Any]) -> list[str]:
            sent.clear()
            operation()
            return list(sent)

        record.connection = connection  # type: ignore[attr-defined]
        yield record
        Thing._connection = None


def test_class_operations(wire: Recorder) -> None:
    assert wire(lambda: Thing.get("a", "1")) == [access.CLASS_OPS["get"]]
    assert wire(lambda: list(Thing.query("a"))) == [access.CLASS_OPS["query"]]
    assert wire(lambda: list(Thing.scan())) == [access.CLASS_OPS["scan"]]
    assert wire(lambda: Thing.count("a", Thing.sk == "1")) == [access.CLASS_OPS["count"]]
    assert wire(lambda: Thing.count()) == ["DescribeTable"]  # no hash key: the table's ItemCount
    assert wire(lambda: list(Thing.batch_get([("a", "1"), ("a", "2")]))) == [access.CLASS_OPS["batch_get"]]
    assert wire(lambda: Thing.exists()) == [access.CLASS_OPS["exists"]]


def test_index_operations(wire: Recorder) -> None:
    assert wire(lambda: list(Thing.by_owner.query("o"))) == [access.INDEX_OPS["query"]]
    assert wire(lambda: list(Thing.by_owner.scan())) == [access.INDEX_OPS["scan"]]
    assert wire(lambda: Thing.by_owner.count("o")) == [access.INDEX_OPS["count"]]


def test_item_operations_conditional_or_not(wire: Recorder) -> None:
    item = Thing("a", "3")

    assert wire(lambda: item.save(condition=Thing.sk.does_not_exist())) == [access.ITEM_OPS["save"]]
    assert wire(lambda: item.update(actions=[Thing.n.add(1)], condition=Thing.sk.exists())) == [
        access.ITEM_OPS["update"]
    ]
    assert wire(lambda: item.refresh(consistent_read=True)) == [access.ITEM_OPS["refresh"]]
    assert wire(lambda: item.delete(condition=Thing.n == 1)) == [access.ITEM_OPS["delete"]]


def test_batch_writes(wire: Recorder) -> None:
    def batch() -> None:
        with Thing.batch_write() as writes:
            writes.save(Thing("b", "1"))
            writes.delete(Thing("a", "1"))

    assert wire(batch) == [access.BATCH_OPS["save"]] == [access.BATCH_OPS["delete"]]


def test_transactions_are_one_call_whose_items_need_their_own_actions(wire: Recorder) -> None:
    connection = wire.connection  # type: ignore[attr-defined]

    def write() -> None:
        with TransactWrite(connection=connection) as tx:
            tx.save(Thing("c", "1"), condition=Thing.sk.does_not_exist())
            tx.update(Thing("a", "2"), actions=[Thing.n.add(1)])
            tx.delete(Thing("a", "1"))
            tx.condition_check(Thing, "b", "9", condition=Thing.sk.does_not_exist())

    def read() -> None:
        with TransactGet(connection=connection) as tx:
            tx.get(Thing, "c", "1")

    # IAM has no action for the transaction itself: each item is authorized as PutItem, UpdateItem,
    # DeleteItem, ConditionCheckItem or GetItem (TX_OPS), which is why the wire shows one call.
    assert wire(write) == ["TransactWriteItems"]
    assert wire(read) == ["TransactGetItems"]
    assert set(access.TX_OPS.values()) == {
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "ConditionCheckItem",
        "GetItem",
    }
