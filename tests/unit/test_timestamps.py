"""One way to write a time (issue 29): RFC 3339 in UTC with `Z` and milliseconds, everywhere the API
writes one: bodies (the `Timestamp` type), event data and webhook payloads (`rfc3339`)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from stepwise.api.app import build, spec
from stepwise.core.schema import RFC3339_PATTERN, Timestamp, json_default, rfc3339
from stepwise.webhooks.enqueue import _dumps

SHAPE = re.compile(RFC3339_PATTERN)


def test_a_time_is_written_in_utc_with_z_and_milliseconds() -> None:
    assert rfc3339(datetime(2026, 12, 4, 5, 3, 39, 377523, tzinfo=UTC)) == "2026-12-04T05:03:39.377Z"
    # A whole second keeps its fraction; another offset is converted; a naive time is UTC.
    assert rfc3339(datetime(2026, 12, 4, 5, 3, 39, tzinfo=UTC)) == "2026-12-04T05:03:39.000Z"
    plus_two = timezone(timedelta(hours=2))
    assert rfc3339(datetime(2026, 12, 4, 7, 0, 0, 999999, tzinfo=plus_two)) == "2026-12-04T05:00:00.999Z"
    assert rfc3339(datetime(2026, 12, 4, 5, 0, 0)) == "2026-12-04T05:00:00.000Z"


class _View(BaseModel):
    at: Timestamp
    maybe: Timestamp | None = None


def test_models_write_timestamps_in_that_shape_and_read_any_iso_time() -> None:
    view = _View.model_validate({"at": "2026-12-04T05:03:39+00:00", "maybe": "2026-12-04T07:03:39.5+02:00"})

    dumped = view.model_dump(mode="json")

    assert dumped == {"at": "2026-12-04T05:03:39.000Z", "maybe": "2026-12-04T05:03:39.500Z"}
    assert isinstance(view.model_dump()["at"], datetime)  # Python-side dumps keep the datetime


def test_webhook_bodies_write_their_timestamp_and_data_times_in_that_shape() -> None:
    at = datetime(2026, 12, 4, 5, 3, 39, tzinfo=UTC)

    body = json.loads(_dumps("run.completed", at, {"finished_at": at + timedelta(microseconds=1500)}))

    assert body["timestamp"] == "2026-12-04T05:03:39.000Z"
    assert body["data"]["finished_at"] == "2026-12-04T05:03:39.001Z"
    assert json_default(at) == "2026-12-04T05:03:39.000Z" and json_default(3) == "3"


def _date_times(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        if node.get("format") == "date-time":
            found.append((path, node))
        for key, value in node.items():
            found += _date_times(value, f"{path}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _date_times(value, f"{path}/{index}")
    return found


def test_every_time_the_spec_describes_is_a_timestamp() -> None:
    """A `datetime` field left in an API model would be written by pydantic's default (`+00:00` from
    some paths, no fraction on a whole second): in the spec it shows as a date-time without the pattern."""
    times = _date_times(json.loads(spec(build())))

    assert len(times) > 20
    assert [path for path, schema in times if schema.get("pattern") != RFC3339_PATTERN] == []
    assert SHAPE.match("2026-12-04T05:03:39.377Z") and not SHAPE.match("2026-12-04T05:03:39+00:00")


def test_a_number_is_no_time_in_a_request() -> None:
    # pydantic would read 196739 as Unix time; the spec says a time is a string (found by schemathesis
    # on POST /v1/runs:cancel's created_before).
    class Body(BaseModel):
        created_before: Timestamp | None = None

    with pytest.raises(ValidationError, match="RFC 3339 string"):
        Body.model_validate({"created_before": 196739})
    assert Body.model_validate({"created_before": "2026-12-04T05:03:39Z"}).created_before == datetime(
        2026, 12, 4, 5, 3, 39, tzinfo=UTC
    )
