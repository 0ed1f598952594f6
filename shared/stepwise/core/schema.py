"""What every pydantic model at Stepwise's edges shares: strict bodies and aware timestamps."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, PlainSerializer, WithJsonSchema


def utcnow() -> datetime:
    """Now, in UTC, to the millisecond: the precision the API writes (`rfc3339`). A time kept finer
    would not survive a JSON round trip through a stored document (an agent's MCP server keeps its
    `created_at` in the agent's JSON and its OAuth grant is keyed by it), so none is made finer."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def rfc3339(moment: datetime) -> str:
    """The one way the API writes a time: RFC 3339 in UTC, with `Z` and milliseconds, always
    (`2026-12-04T05:03:39.377Z`), in bodies, event data and webhook payloads alike. A naive time is
    taken as UTC (every time we keep is)."""
    utc = (moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)).astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def json_default(value: object) -> object:
    """`json.dumps(..., default=json_default)`: times as `rfc3339`, anything else as its str."""
    return rfc3339(value) if isinstance(value, datetime) else str(value)


RFC3339_PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$"


def _not_a_number(value: object) -> object:
    """pydantic reads a number as Unix time; the spec says a time is a string, so a number is refused
    (a client sending `{"created_before": 196739}` meant something else)."""
    if isinstance(value, int | float):
        raise ValueError("a time is an RFC 3339 string, like 2026-12-04T05:03:39.377Z")
    return value


# A time in a model the API answers with (or reads): read like any datetime but from a string, written
# (in JSON) by rfc3339, and documented in the spec with the exact shape it always has.
Timestamp = Annotated[
    datetime,
    BeforeValidator(_not_a_number),
    PlainSerializer(rfc3339, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time", "pattern": RFC3339_PATTERN}),
]


class Strict(BaseModel):
    """Request bodies reject unknown fields, so a typo is a 422 rather than a silently ignored setting."""

    model_config = ConfigDict(extra="forbid")
