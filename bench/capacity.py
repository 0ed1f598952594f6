"""DynamoDB capacity as on-demand billing counts it: item sizes, read and write request units, and the
writes a table's secondary indexes add. Pure functions over DynamoDB-JSON items and template.yaml's
table definitions; bench/dynamodb_ops.py feeds them what each request read and wrote.

The rules (Amazon DynamoDB Developer Guide, "DynamoDB read and write operations" and "Provisioned
throughput considerations for Global Secondary Indexes"):
- item size: the UTF-8 length of every attribute name plus its value: a string its UTF-8 length, a
  number 1 byte per two significant digits + 1, binary its length, a boolean or null 1 byte, a list or
  map 3 bytes + its elements + 1 byte per element, a set the sum of its elements;
- reads: a GetItem rounds the item up to 4 KB; a Query or Scan sums every item it examined (before any
  filter, whatever the projection) and rounds the total up once; BatchGetItem rounds each item; a
  strongly consistent unit is 1 RRU per 4 KB, eventually consistent ½, transactional 2; an item that
  is absent, or a page with none, still costs the minimum;
- writes: 1 WRU per 1 KB of the larger of the item before and after (minimum 1), 2 in a transaction;
  a write whose condition fails still costs the existing item's size (minimum 1) and writes no index;
- every index (GSI or LSI) an item is in costs writes too, by its entry (the projected attributes):
  a new entry 1 write of its size, a removed one 1 write of its old size, a changed index key 2 (the
  delete and the put), a changed projected attribute 1, nothing when the entry is unchanged or the item
  lacks the index's key attributes (then it is not in the index at all).
With images of the item before and after each write (the bench reads them from moto) these rules are
exact; no "×(1 + indexes)" shortcut is needed.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

Item = Mapping[str, Any]  # DynamoDB JSON: {"name": {"S": "..."}, ...}

NARROWING = ("FilterExpression", "ProjectionExpression", "AttributesToGet", "QueryFilter", "ScanFilter")
READ_UNIT_BYTES = 4096
WRITE_UNIT_BYTES = 1024


# --- Sizes -----------------------------------------------------------------------------------------


def value_size(value: Mapping[str, Any]) -> int:
    """Bytes one attribute value takes (its name not included)."""
    (kind, raw), *_ = value.items()
    if kind == "S":
        return len(str(raw).encode())
    if kind == "N":
        return number_size(str(raw))
    if kind == "B":
        return len(_binary(raw))
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(str(s).encode()) for s in raw)
    if kind == "NS":
        return sum(number_size(str(n)) for n in raw)
    if kind == "BS":
        return sum(len(_binary(b)) for b in raw)
    if kind == "L":
        return 3 + sum(value_size(v) + 1 for v in raw)
    if kind == "M":
        return 3 + sum(len(k.encode()) + value_size(v) + 1 for k, v in raw.items())
    raise ValueError(f"not a DynamoDB attribute value: {value!r}")


def number_size(text: str) -> int:
    """1 byte per two significant digits, plus 1 (leading and trailing zeros do not count)."""
    digits = Decimal(text).normalize().as_tuple().digits
    significant = len(digits) if any(digits) else 1
    return math.ceil(significant / 2) + 1


def item_size(item: Item | None) -> int:
    if not item:
        return 0
    return sum(len(name.encode()) + value_size(value) for name, value in item.items())


def _binary(raw: Any) -> bytes:
    # botocore takes bytes; moto's item JSON holds binary base64-encoded.
    if isinstance(raw, bytes | bytearray):
        return bytes(raw)
    return base64.b64decode(str(raw))


# --- Units -----------------------------------------------------------------------------------------


def read_units(size: int, *, consistent: bool, transactional: bool = False) -> float:
    """RRU for `size` bytes read as one unit of rounding (one item, or one Query/Scan page)."""
    blocks = max(1, math.ceil(size / READ_UNIT_BYTES))
    if transactional:
        return 2.0 * blocks
    return float(blocks) if consistent else blocks / 2


def write_units(size: int, *, transactional: bool = False) -> int:
    blocks = max(1, math.ceil(size / WRITE_UNIT_BYTES))
    return 2 * blocks if transactional else blocks


# --- Tables and their indexes, from template.yaml -----------------------------------------------------


@dataclass(frozen=True)
class Index:
    name: str
    keys: tuple[str, ...]  # the index's own key attributes (hash, then range)
    projection: str  # ALL | KEYS_ONLY | INCLUDE
    included: tuple[str, ...] = ()


@dataclass(frozen=True)
class Table:
    name: str  # logical id in template.yaml
    keys: tuple[str, ...]
    indexes: tuple[Index, ...] = field(default=())

    def key_of(self, item: Item) -> dict[str, Any]:
        return {k: item[k] for k in self.keys if k in item}

    def entry(self, index: Index, item: Item | None) -> dict[str, Any] | None:
        """The item's entry in `index`: its projected attributes, or None when it is not indexed."""
        if not item or any(k not in item for k in index.keys):
            return None
        if index.projection == "ALL":
            return dict(item)
        keep = set(self.keys) | set(index.keys) | set(index.included)
        return {k: v for k, v in item.items() if k in keep}


def tables_from_template(template: Mapping[str, Any]) -> dict[str, Table]:
    """Every AWS::DynamoDB::Table of a loaded template, by logical id, with its GSIs and LSIs."""
    out: dict[str, Table] = {}
    for logical, res in (template.get("Resources") or {}).items():
        if res.get("Type") != "AWS::DynamoDB::Table":
            continue
        props = res.get("Properties") or {}
        indexes = [
            Index(
                name=str(spec["IndexName"]),
                keys=_keys(spec["KeySchema"]),
                projection=str((spec.get("Projection") or {}).get("ProjectionType", "ALL")),
                included=tuple((spec.get("Projection") or {}).get("NonKeyAttributes") or ()),
            )
            for spec in [
                *(props.get("GlobalSecondaryIndexes") or ()),
                *(props.get("LocalSecondaryIndexes") or ()),
            ]
        ]
        out[logical] = Table(logical, _keys(props["KeySchema"]), tuple(indexes))
    return out


def _keys(schema: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    ordered = sorted(schema, key=lambda k: 0 if k["KeyType"] == "HASH" else 1)
    return tuple(str(k["AttributeName"]) for k in ordered)


# --- A write's cost ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class WriteCost:
    table: int  # WRU on the base table
    indexes: dict[str, int]  # WRU per index written

    @property
    def total(self) -> int:
        return self.table + sum(self.indexes.values())


def index_writes(table: Table, before: Item | None, after: Item | None) -> dict[str, int]:
    """WRU each index takes for an item going from `before` to `after` (None: absent)."""
    out: dict[str, int] = {}
    for index in table.indexes:
        old, new = table.entry(index, before), table.entry(index, after)
        if old == new:
            continue
        if old is None:
            units = write_units(item_size(new))
        elif new is None:
            units = write_units(item_size(old))
        elif any(old.get(k) != new.get(k) for k in index.keys):
            units = write_units(item_size(old)) + write_units(item_size(new))  # delete + put
        else:
            units = write_units(item_size(new))
        out[index.name] = units
    return out


def write_cost(
    table: Table,
    before: Item | None,
    after: Item | None,
    *,
    succeeded: bool,
    transactional: bool = False,
) -> WriteCost:
    """One item's write (put, update or delete; `after` None for a delete). A write that failed its
    condition (`succeeded` False) costs the existing item's size and changes no index."""
    if not succeeded:
        return WriteCost(write_units(item_size(before), transactional=transactional), {})
    size = max(item_size(before), item_size(after))
    return WriteCost(write_units(size, transactional=transactional), index_writes(table, before, after))


# --- What a read examined ----------------------------------------------------------------------


def examining(params: dict[str, Any]) -> dict[str, Any]:
    """A Query/Scan that examines what `params` examines but returns all of it: no filter, no
    projection, no COUNT, and only the expression names and values its remaining expressions use
    (DynamoDB rejects unused ones)."""
    kept = {k: v for k, v in params.items() if k not in (*NARROWING, "Select")}
    used = set(
        re.findall(r"[#:][A-Za-z0-9_]+", " ".join(str(kept.get(k, "")) for k in ("KeyConditionExpression",)))
    )
    for field_name in ("ExpressionAttributeNames", "ExpressionAttributeValues"):
        if field_name in kept:
            kept[field_name] = {k: v for k, v in kept[field_name].items() if k in used}
            if not kept[field_name]:
                del kept[field_name]
    return kept
